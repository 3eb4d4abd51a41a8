#!/usr/bin/env bash
# The spelling of before benchmarks/gpu/: runs benchmarks/gpu/bundle.sh, after one line saying so.
echo "benchmarks/gpu_bundle.sh moved: bash benchmarks/gpu/bundle.sh" >&2
exec bash "$(dirname "$0")/gpu/bundle.sh" "$@"
