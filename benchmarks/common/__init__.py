"""What the benchmarks share: timing, the device's peaks, the training configs and the random models they run."""
