"""Benchmarks: recall on LoCoMo (`python -m bench.recall`) and speed (`python -m bench.speed`)."""
