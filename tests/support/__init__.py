"""Test-only helpers that the benchmarks share: starting kinesalite."""
