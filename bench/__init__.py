"""Benchmarks: scripts run from the repository root (see bench/README.md)."""
