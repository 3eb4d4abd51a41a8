"""Converters from the public PyTorch checkpoints to dbaf_jax model directories (torch needed here only)."""
