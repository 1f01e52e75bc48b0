"""Device profiles: measured by short pre-training on each device (ASHL's profiling step)."""
