"""Synchronisation building blocks of the ASHL training engine: schedules (ASHL/SHL),
ADSP's commit-rate search, and top-k compression with error feedback."""
