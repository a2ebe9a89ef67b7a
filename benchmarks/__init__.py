"""Benchmarks of pytest-sdbench (not tests): run them as modules from the repository root,
e.g. ``python -m benchmarks.sdbench_bench all``."""
