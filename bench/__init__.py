"""Benchmarks: ``python -m bench`` from the repository root (see docs/benchmarks.md)."""
