"""Benchmarks of issue 6: `just bench` (python -m bench)."""
