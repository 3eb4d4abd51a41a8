"""The test double of a trained model for whole photos: the benchmarks'
(benchmarks/invertible_double.py, one home for the ledger tests and benchmark)."""

from benchmarks.invertible_double import KEY_SHAPE, InvertibleDouble

__all__ = ["KEY_SHAPE", "InvertibleDouble"]
