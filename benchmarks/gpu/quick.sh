#!/usr/bin/env bash
# The GPU figures that matter most, in one command of at most 8 minutes (a lent machine
# gives 10 per command and 15 in all), printed as docs/performance.md's GPU table:
#
#   bash benchmarks/gpu/quick.sh [--reduced] [--out DIR] [--detector-weights DIR] [--budget SECONDS]
#
# Parts (each one process, python -m benchmarks.<name>):
#   anonymize     anonymize, bfloat16, batch 32 (the model alone, device time)
#   train2-cold   the stage-2 step, bfloat16, batch 8, compiled with an empty cache of its own
#   train2-warm   the same in a second process, from that cache (the warm compile)
#   train1        the stage-1 step, bfloat16, batch 8
#   folder        files in, files out: python -m dbaf_jax.commands.anonymize on a folder of photos
#                 (the photos of tests/data, 8 copies each), the full-width random model,
#                 the detectors' real weights from --detector-weights (a folder holding the
#                 converted centerface/ and mtcnn/; --detector DIR/mtcnn still gives MTCNN's alone)
#
# They run in two lanes side by side (train2-cold then train2-warm; anonymize, train1,
# folder), so that one lane's building and compiling, which use the host, overlap the
# other's; the timed windows take turns on the device (DBAF_BENCH_DEVICE_LOCK, see
# benchmarks/common/timing.py: device_turn). The compile and start-up columns are therefore
# measured beside the other lane's host work: upper bounds. Every part has its own
# limit (the lane's time left of --budget, default 460 s), so a slow part cannot take
# the others' time; a part cut off says so in its row. Compilation caches live under
# ${TMPDIR:-/tmp} (local disk): one empty per call for train2-cold/-warm, one for the rest;
# the random model anonymize writes is kept there for folder (DBAF_BENCH_MODELS).
#
# --reduced runs the same parts at tiny sizes (64 px, reduced widths, batch 2, the tiny
# random model, one copy of the photos) on whatever device there is, the CPU included:
# it proves the script end to end before a GPU is spent on it (no budget unless given).
#
# Outputs: OUT/PART.md (the benchmark's table), OUT/PART.log, OUT/summary.md (printed).
# Exits 1 when any part failed or was cut off.
set -u -o pipefail

out="benchmarks/out/gpu-quick-$(date +%Y%m%d-%H%M%S)"
reduced=0
detector=""
weights=""
budget=""
while [ $# -gt 0 ]; do
  case "$1" in
    --reduced) reduced=1; shift ;;
    --out) out="$2"; shift 2 ;;
    --detector) detector="$2"; shift 2 ;;
    --detector-weights) weights="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    -h|--help) sed -n '/^set -u/q;2,$p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$budget" ] || { [ $reduced = 1 ] && budget=100000 || budget=460; }
python="${PYTHON:-python3}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
caches="${TMPDIR:-/tmp}/dbaf-gpu-quick-$$"
mkdir -p "$caches/parts"
export DBAF_BENCH_DEVICE_LOCK="$out/device.lock"
# The random model is built and written once (by whichever part needs it first) and kept
# there for the others (benchmarks/common/models.py: kept_random_model).
export DBAF_BENCH_MODELS="$caches/models"
# Two processes share the device: neither may take three quarters of its memory at start.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
deadline=$(( $(date +%s) + budget ))

if [ $reduced = 1 ]; then
  tiny=(--size 64 --width-scale 0.0625 --encoder-width-scale 0.25)
  anonymize=(benchmarks.speed.anonymize --batches 2 --dtype bfloat16 --steps 2 "${tiny[@]}")
  train2=(benchmarks.speed.train_step --stages 2 --batch 2 --dtype bfloat16 --steps 1 --devices 1 "${tiny[@]}")
  train1=(benchmarks.speed.train_step --stages 1 --batch 2 --dtype bfloat16 --steps 1 --devices 1 "${tiny[@]}")
  folder=(benchmarks.speed.anonymize_folder --width tiny --dtype bfloat16 --copies 1 --repeats 1)
else
  anonymize=(benchmarks.speed.anonymize --batches 32 --dtype bfloat16 --steps 20)
  train2=(benchmarks.speed.train_step --stages 2 --batch 8 --dtype bfloat16 --steps 10)
  train1=(benchmarks.speed.train_step --stages 1 --batch 8 --dtype bfloat16 --steps 10)
  folder=(benchmarks.speed.anonymize_folder --width full --dtype bfloat16 --copies 8 --repeats 1)
fi
[ -n "$detector" ] && folder+=(--detector "$detector")
[ -n "$weights" ] && folder+=(--detector-weights "$weights")

part() {  # part NAME CACHE_DIR python-module args...
  local name="$1" cache="$2"; shift 2
  echo "python -m $*" > "$out/$name.command"
  local left=$(( deadline - $(date +%s) ))
  if [ $left -lt 30 ]; then
    echo "$name not run: ${budget} s budget spent" | tee "$out/$name.log" >&2
    return 1
  fi
  echo "== $name (limit ${left} s): python -m $*" >&2
  local start=$(date +%s)
  DBAF_JAX_CACHE_DIR="$cache" timeout --kill-after=10 "$left" "$python" -m "$@" > "$out/$name.md" 2> "$out/$name.log"
  local code=$? ran=$(( $(date +%s) - start ))
  if [ $code -ne 0 ]; then
    if [ $code -eq 124 ] || { [ $code -eq 137 ] && [ $ran -ge $left ]; }; then
      echo "cut off at its limit of ${left} s" >> "$out/$name.log"
    elif [ $code -eq 137 ]; then
      echo "killed after ${ran} s, before its limit (the out-of-memory killer?)" >> "$out/$name.log"
    fi
    echo "$name failed (exit $code): see $out/$name.log" >&2
    return 1
  fi
}

lane_stage2() {
  local status=0
  part train2-cold "$caches/train2" "${train2[@]}" || status=1
  part train2-warm "$caches/train2" "${train2[@]}" || status=1
  return $status
}

lane_rest() {
  local status=0
  part anonymize "$caches/parts" "${anonymize[@]}" || status=1
  part train1 "$caches/parts" "${train1[@]}" || status=1
  part folder "$caches/parts" "${folder[@]}" || status=1
  return $status
}

lane_stage2 & first=$!
lane_rest & second=$!
status=0
wait $first || status=1
wait $second || status=1

parts=()
for name in anonymize train2-cold train2-warm train1 folder; do
  parts+=("$name=$(cat "$out/$name.command" 2>/dev/null || echo '?')")
done
{
  echo "# GPU quick figures$([ $reduced = 1 ] && echo ' (reduced sizes)')"
  echo
  echo "- device: $("$python" -c 'import jax; d = jax.devices()[0]; print(d.platform, d.device_kind, len(jax.devices()), "device(s); JAX", jax.__version__)' 2>/dev/null)"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown), date: $(date -u +%Y-%m-%d)"
  echo
  "$python" -m benchmarks.gpu.quick_summary "$out" "${parts[@]}"
} > "$out/summary.md"
cat "$out/summary.md"
rm -rf "$caches"
echo "tables and logs in $out" >&2
exit $status
