#!/usr/bin/env bash
# The spelling of before benchmarks/gpu/: runs benchmarks/gpu/quick.sh, after one line saying so.
echo "benchmarks/gpu_quick.sh moved: bash benchmarks/gpu/quick.sh" >&2
exec bash "$(dirname "$0")/gpu/quick.sh" "$@"
