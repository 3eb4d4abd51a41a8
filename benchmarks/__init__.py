"""Speed measurements (run as ``python -m benchmarks.<name>``); never asserted in tests."""
