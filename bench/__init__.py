"""Benchmarks: `just bench` (python -m bench)."""
