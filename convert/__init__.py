"""Converters from the public PyTorch checkpoints (and CenterFace's ONNX file) to dbaf_jax model
directories (torch and onnx needed here only)."""
