"""Measurement: one timed run and its aggregates, fidelity and distances, benchmarks, step
profiles, speedups and their intervals."""
