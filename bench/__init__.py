"""The benchmarks (`python -m bench.<name>`, each printing one JSON object) and the suite that runs them
and renders bench/REPORT.md (`python -m bench.suite`, `make bench`)."""
