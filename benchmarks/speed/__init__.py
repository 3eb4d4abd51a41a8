"""Speed: time, memory, compile time and FLOPs of the commands, the steps and their parts (python -m benchmarks.speed.<name>)."""
