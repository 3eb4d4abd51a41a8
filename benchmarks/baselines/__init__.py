"""Baselines: JAX against PyTorch, the authors' code and the parity references (python -m benchmarks.baselines.<name>; needs the [dev] install)."""
