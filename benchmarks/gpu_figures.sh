#!/usr/bin/env bash
# The figures the README's Performance section asks of a GPU, each part's table in
# OUT/<part>.md and its progress lines in OUT/<part>.log:
#
#   bash benchmarks/gpu_figures.sh [--out DIR] [--reference-repo DIR] [PART ...]
#
# PART (default: all but the reference parts unless --reference-repo is given):
#   anonymize-bf16, anonymize-f32   batches 1, 8 and 32, and the largest that fits
#   train-bf16, train-f32           stages 1 and 2 at batch 8, and the largest that fits
#   reference-train                 the authors' iteration, batch 8, fp32/tf32/bf16/tf32+compile
#   reference-anonymize             the authors' anonymization, batches 1, 8 and 32, same modes
# Each part runs on its own, so one that fails or runs out of time leaves the others.
# No compilation cache is set: the compile times are those of a first run. Exits 1
# when any part failed.
set -u -o pipefail

out="benchmarks/out/$(date +%Y%m%d-%H%M%S)"
reference_repo=""
parts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --reference-repo) reference_repo="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) parts+=("$1"); shift ;;
  esac
done
if [ ${#parts[@]} -eq 0 ]; then
  parts=(anonymize-bf16 anonymize-f32 train-bf16 train-f32)
  [ -n "$reference_repo" ] && parts+=(reference-train reference-anonymize)
fi
mkdir -p "$out"

run() {  # run PART python-module args...
  local part="$1"; shift
  echo "== $part: python -m $*" >&2
  if python -m "$@" > "$out/$part.md" 2> "$out/$part.log"; then
    cat "$out/$part.md"
  else
    echo "$part failed (exit $?): see $out/$part.log" >&2
    return 1
  fi
}

needs_reference() {
  if [ -z "$reference_repo" ]; then
    echo "$1 needs --reference-repo (a checkout of github.com/mrzhu-cool/DBAF)" >&2
    return 1
  fi
}

status=0
for part in "${parts[@]}"; do
  case "$part" in
    anonymize-bf16) run "$part" benchmarks.anonymize --batches 1 8 32 --dtype bfloat16 --find-max-batch ;;
    anonymize-f32) run "$part" benchmarks.anonymize --batches 1 8 32 --dtype float32 --find-max-batch ;;
    train-bf16) run "$part" benchmarks.train_step --stages 2 1 --batch 8 --dtype bfloat16 --find-max-batch ;;
    train-f32) run "$part" benchmarks.train_step --stages 2 1 --batch 8 --dtype float32 --find-max-batch ;;
    reference-train)
      needs_reference "$part" && run "$part" benchmarks.reference_pytorch --reference-repo "$reference_repo" --batch 8 --find-max-batch ;;
    reference-anonymize)
      needs_reference "$part" && run "$part" benchmarks.reference_anonymize --reference-repo "$reference_repo" --batches 1 8 32 --find-max-batch ;;
    *) echo "unknown part $part (see --help)" >&2; false ;;
  esac || status=1
done
echo "tables and logs in $out" >&2
exit $status
