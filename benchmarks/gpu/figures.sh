#!/usr/bin/env bash
# The figures docs/performance.md asks of a GPU, in parts of at most ten minutes each
# (a lent machine's limit per command), sharing one compilation cache:
#
#   bash benchmarks/gpu/figures.sh [--out DIR] [--cache DIR] [--reference-repo DIR] [PART ...]
#
# PART (default: every part but the reference ones, which need --reference-repo):
#   compile-cold      stage 2 (B8) and stage 1 (B16) steps, float32, compiled with an empty
#                     cache of their own: the cold compile, then again from that cache
#   compile-noautotune  the same cold compile with --xla_gpu_autotune_level=0 (how much of
#                     the compile is autotuning)
#   compile-cid-scan  the same cold compile with CID's blocks under lax.scan (config.cid_scan)
#   train2-bf16, train2-f32, train1-bf16, train1-f32
#                     one stage's step at batch 8: images/s, MFU, compile
#   train2-maxbatch, train1-maxbatch   the largest bfloat16 batch that fits
#   anonymize-bf16, anonymize-f32      the model alone, batches 1, 8 and 32
#   anonymize-folder  the whole command on a folder of photos (files in, files out)
#   png               PNG encoding per compression level (host only)
#   detect-frames     MTCNN on 1280x960 clip frames, one at a time and 8 at a time
#   video             anonymize_video and recover_video end to end (tiny model, 96 frames)
#   parity-f32        the parity tests on the GPU in float32, TF32 off (their tolerances must hold)
#   parity-tf32       the same with TF32 matmuls and convolutions: each failure names its error
#   reference-train, reference-anonymize   the authors' code, same device
#
# --cache DIR is the compilation cache every part shares (default OUT/xla-cache): give
# a folder that outlives the machine (one under $OUT of a lent machine, carried back
# and forth) so that a part cut at the limit is finished by the next call, from the
# cache, instead of compiling again. Each part runs under `timeout` (PART_SECONDS,
# default 570) so one that runs long still leaves its log and the parts after it.
# Prints OUT/summary.md at the end: device, commit and date, then every part's table.
# Exits 1 when any part failed.
set -u -o pipefail

out="benchmarks/out/$(date +%Y%m%d-%H%M%S)"
cache=""
reference_repo=""
parts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --cache) cache="$2"; shift 2 ;;
    --reference-repo) reference_repo="$2"; shift 2 ;;
    -h|--help) sed -n '/^set -u/q;2,$p' "$0"; exit 0 ;;
    *) parts+=("$1"); shift ;;
  esac
done
if [ ${#parts[@]} -eq 0 ]; then
  parts=(compile-cold compile-noautotune compile-cid-scan train2-bf16 train2-f32 train1-bf16 train1-f32
         train2-maxbatch train1-maxbatch anonymize-bf16 anonymize-f32 anonymize-folder png detect-frames video
         parity-f32 parity-tf32)
  [ -n "$reference_repo" ] && parts+=(reference-train reference-anonymize)
fi
mkdir -p "$out"
export DBAF_JAX_CACHE_DIR="${cache:-$out/xla-cache}"
seconds="${PART_SECONDS:-570}"
# Every test that compares a converted network with its PyTorch reference.
parity_tests=(tests/models/test_stylegan2.py tests/models/test_e4e.py tests/models/test_irse.py
              tests/models/test_arcface.py tests/models/dbaf/test_cid.py tests/models/dbaf/test_maar.py
              tests/models/dbaf/test_kria.py tests/models/test_lpips.py tests/models/test_parsers.py
              tests/models/test_mtcnn.py tests/models/test_facenet.py tests/models/test_inception.py
              tests/train/dbaf/test_losses.py tests/models/dbaf/test_dbaf_pipeline.py tests/train/test_training_parity.py)

run() {  # run PART python-module args...
  local part="$1"; shift
  echo "== $part: python -m $* (DBAF_JAX_CACHE_DIR=$DBAF_JAX_CACHE_DIR)" >&2
  timeout "$seconds" python -m "$@" > "$out/$part.md" 2> "$out/$part.log"
  local code=$?
  if [ $code -eq 0 ]; then
    cat "$out/$part.md"
  else
    [ $code -eq 124 ] && echo "$part ran past ${seconds} s: run it again to finish from the cache" >&2
    echo "$part failed (exit $code): see $out/$part.log" >&2
    return 1
  fi
}

needs_reference() {
  if [ -z "$reference_repo" ]; then
    echo "$1 needs --reference-repo (a checkout of the authors' DBAF code)" >&2
    return 1
  fi
}

status=0
for part in "${parts[@]}"; do
  case "$part" in
    compile-cold)
      DBAF_JAX_CACHE_DIR="$out/xla-cache-cold-$(date +%s)" run "$part" benchmarks.speed.program_size --compile --compile-twice ;;
    compile-noautotune)
      XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_autotune_level=0" DBAF_JAX_CACHE_DIR=off run "$part" benchmarks.speed.program_size --compile ;;
    compile-cid-scan)
      DBAF_JAX_CACHE_DIR="$out/xla-cache-scan-$(date +%s)" run "$part" benchmarks.speed.program_size --compile --compile-twice --cid-scan ;;
    train2-bf16) run "$part" benchmarks.speed.train_step --stages 2 --batch 8 --dtype bfloat16 ;;
    train2-f32) run "$part" benchmarks.speed.train_step --stages 2 --batch 8 --dtype float32 ;;
    train1-bf16) run "$part" benchmarks.speed.train_step --stages 1 --batch 8 --dtype bfloat16 ;;
    train1-f32) run "$part" benchmarks.speed.train_step --stages 1 --batch 8 --dtype float32 ;;
    train2-maxbatch) run "$part" benchmarks.speed.train_step --stages 2 --batch 8 --dtype bfloat16 --steps 5 --find-max-batch ;;
    train1-maxbatch) run "$part" benchmarks.speed.train_step --stages 1 --batch 8 --dtype bfloat16 --steps 5 --find-max-batch ;;
    anonymize-bf16) run "$part" benchmarks.speed.anonymize --batches 1 8 32 --dtype bfloat16 ;;
    anonymize-f32) run "$part" benchmarks.speed.anonymize --batches 1 8 32 --dtype float32 ;;
    anonymize-folder) run "$part" benchmarks.speed.anonymize_folder --dtype bfloat16 --copies 8 ;;
    png) run "$part" benchmarks.speed.png_encoding ;;
    detect-frames)
      if python -m convert.mtcnn --out "$out/detector" > "$out/$part.log" 2>&1; then
        run "$part" benchmarks.speed.detect_frames --detector "$out/detector/mtcnn" --width 1280
      else
        echo "$part failed: converting MTCNN's weights failed, see $out/$part.log" >&2; false
      fi ;;
    video) run "$part" benchmarks.speed.video --frames 96 --smooth 2 --batch-size 32 ;;
    parity-f32)
      JAX_PLATFORMS=cuda JAX_DEFAULT_MATMUL_PRECISION=highest run "$part" pytest -q -rf -p no:cacheprovider "${parity_tests[@]}" ;;
    parity-tf32)
      JAX_PLATFORMS=cuda JAX_DEFAULT_MATMUL_PRECISION=tensorfloat32 run "$part" pytest -q -rf -p no:cacheprovider "${parity_tests[@]}" ;;
    reference-train)
      needs_reference "$part" && run "$part" benchmarks.baselines.reference_pytorch --reference-repo "$reference_repo" --batch 8 ;;
    reference-anonymize)
      needs_reference "$part" && run "$part" benchmarks.baselines.reference_anonymize --reference-repo "$reference_repo" --batches 1 8 32 ;;
    *) echo "unknown part $part (see --help)" >&2; false ;;
  esac || status=1
done

{
  echo "# GPU figures"
  echo
  echo "- device: $(python -c 'import jax; d = jax.devices()[0]; print(d.platform, d.device_kind, len(jax.devices()), "device(s)")' 2>/dev/null)"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown), date: $(date -u +%Y-%m-%d)"
  for part in "${parts[@]}"; do
    echo
    echo "## $part"
    echo
    if [ -s "$out/$part.md" ]; then cat "$out/$part.md"; else echo "(no figures: see $part.log)"; fi
  done
} > "$out/summary.md"
cat "$out/summary.md"
echo "tables and logs in $out" >&2
exit $status
