"""The GPU runs: quick.sh, figures.sh, bundle.sh, and the summary table quick.sh prints (python -m benchmarks.gpu.quick_summary)."""
