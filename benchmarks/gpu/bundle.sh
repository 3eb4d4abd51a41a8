#!/usr/bin/env bash
# Wheels for a lent GPU machine that reaches no package index, made here beforehand:
#
#   bash benchmarks/gpu/bundle.sh
#
# The lent machines' images already hold CPython 3.12 with JAX and its CUDA plugin, numpy,
# scipy, pillow, scikit-learn and tqdm (and PyTorch); their versions stay. This downloads
# every other runtime pin of pyproject.toml (PyAV and supervision among them) and the few of
# their dependencies such an image lacks, as CPython 3.12 manylinux wheels, into
# .gpu-bundle/whl (git-ignored through .git/info/exclude; about 50 MB), and writes .gpu-bundle/env.sh. On the machine, from
# the project root (carry .gpu-bundle with the working tree):
#
#   . .gpu-bundle/env.sh && bash benchmarks/gpu/quick.sh ...
#
# env.sh installs the wheels into /tmp/site, leaving the image's environment as it is,
# and puts them and the project first on PYTHONPATH. Use the image's own python3.
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '/^set -e/q;2,$p' "$0"; exit 0 ;; esac
[ -f pyproject.toml ] || { echo "run it from the project root" >&2; exit 2; }
out=.gpu-bundle
grep -qs "^/$out/" .git/info/exclude || { mkdir -p .git/info; echo "/$out/" >> .git/info/exclude; }
rm -rf "$out"; mkdir -p "$out/whl"
# The runtime pins, less what the image brings.
pins=$(python3 - <<'EOF'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
image = {"jax", "jaxlib", "numpy", "scipy", "pillow", "tqdm", "scikit-learn"}
# dlib and its 98 MB of trained files serve only the dlib detectors and Table III's dlib
# rows, which no GPU part runs (both are imported only when asked for); without them the
# bundle fits the 64 MiB a lent machine's call carries.
unused = {"dlib-bin", "face-recognition-models", "setuptools"}
for spec in project["dependencies"]:
    name = re.split(r"[\[=<>!~ ]", spec, maxsplit=1)[0]
    if "==" in spec and name.lower() not in image | unused:
        print(re.sub(r"\[[^]]*\]", "", spec).replace(" ", ""))
EOF
)
# Dependencies of those pins that the images lack (found by installing the pins there with
# --no-deps and importing every benchmark).
extra="dm-tree==0.1.10 docstring-parser==0.18.0 googleapis-common-protos==1.76.0 immutabledict==4.3.1
portpicker==1.6.0 pydeprecate==0.13.0 simple-parsing==0.1.9 tensorflow-metadata==1.21.0 termcolor==3.3.0
toml==0.10.2 tzdata==2026.6 defusedxml==0.7.1"
# One pin at a time: a pin published only as source (face-recognition-models: dlib's weights,
# pure Python) is built into a wheel here instead.
for pin in $pins $extra; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$out/whl" "$pin" 2>/dev/null || python3 -m pip wheel -q --no-deps -w "$out/whl" "$pin"
done
cat > "$out/env.sh" <<'EOS'
# Sourced on the GPU machine from the project root (see benchmarks/gpu/bundle.sh).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu-bundle/whl/*.whl || return 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export DBAF_JAX_CACHE_DIR=${DBAF_JAX_CACHE_DIR:-/tmp/dbaf-xla}
python3 -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())"
EOS
du -sh "$out" | awk '{print "bundle: " $1 " in .gpu-bundle/ (carry it with the working tree)"}'
