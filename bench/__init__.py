"""Benchmarks: `make bench` runs them (python -m bench)."""
