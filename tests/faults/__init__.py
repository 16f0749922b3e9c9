"""Faults injected into the document children of tests/fault_worker.py: one module per fault, each the
stage entries with one part broken (the children do the document work, so the fault must live there)."""
