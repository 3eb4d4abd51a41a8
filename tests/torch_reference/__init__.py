"""PyTorch reference modules with the public checkpoints' key layouts (tests only)."""
