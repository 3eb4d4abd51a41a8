#!/usr/bin/env bash
# The spelling of before benchmarks/gpu/: runs benchmarks/gpu/figures.sh, after one line saying so.
echo "benchmarks/gpu_figures.sh moved: bash benchmarks/gpu/figures.sh" >&2
exec bash "$(dirname "$0")/gpu/figures.sh" "$@"
