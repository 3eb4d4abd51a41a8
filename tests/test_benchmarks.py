"""The benchmark scripts at tiny size, each run as its users run it, a process: their
printed figures agree with each other (images/s = batch / time, MFU = FLOP/s / peak, the
FLOP ceiling = peak / FLOP per image) and the largest batch found is one that ran. The
PyTorch baselines need the authors' checkout, so only their refusal of another folder
is tested here, and the GPU script's plumbing with a stand-in for Python.

No module under tests/ imports benchmarks/ (the last test holds it): what tests and
benchmarks share lives in fixtures/, and the units benchmarks/common/ shares among the
benchmarks are tested beside them, in benchmarks/tests/."""

import ast
import os
import subprocess
import sys

import pytest

from tests.paths import REPO

PEAK_TFLOPS = 0.002  # a made-up peak: the CPU is not in the table
CELL = (
    3e-3  # relative: the tables print 4 significant digits, and a check combines up to three cells
)
TINY = ["--size", "64", "--width-scale", "0.0625", "--encoder-width-scale", "0.25", "--steps", "2"]


def benchmark(module: str, *args: str, env: dict[str, str] | None = None):
    """``python -m benchmarks.<module> args`` from the project's root: the finished process."""
    return subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
    )


def table_rows(text: str) -> list[dict[str, str]]:
    """The rows of the markdown table printed in ``text``, as header -> cell."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [
        dict(zip(header, (cell.strip() for cell in line.strip("|").split("|"))))
        for line in lines[2:]
    ]


def percent(cell: str) -> float:
    return float(cell.rstrip("%")) / 100


@pytest.mark.parametrize("baseline", ["reference_pytorch", "reference_anonymize"])
def test_reference_baselines_refuse_a_folder_that_is_not_the_authors_code(baseline, tmp_path):
    done = benchmark(f"baselines.{baseline}", "--reference-repo", str(tmp_path))
    assert done.returncode == 1
    err = done.stderr
    assert err.count("\n") == 1 and err.startswith("error: ") and "mrzhu-cool/DBAF" in err


@pytest.mark.parametrize("old, new", [("png_encoding", "speed.png_encoding")])
def test_an_old_spelling_runs_the_moved_benchmark_and_names_the_new_one(old, new):
    """``python -m benchmarks.<name>`` of before the kinds' folders runs the moved module,
    after one line on stderr naming its new spelling (benchmarks/__init__.py: MOVED)."""
    before, after = benchmark(old, "--help"), benchmark(new, "--help")
    assert before.returncode == after.returncode == 0
    assert before.stdout == after.stdout and "--levels" in after.stdout
    assert before.stderr == f"benchmarks.{old} moved: python -m benchmarks.{new}\n"


@pytest.mark.long  # the benchmark as a process, compiling the tiny model: 118 s in CI
def test_anonymize_figures_are_consistent():
    done = benchmark(
        "speed.anonymize", "--batches", "1", "2", "--peak-tflops", str(PEAK_TFLOPS), *TINY
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = table_rows(done.stdout)
    assert [row["batch"] for row in rows] == ["1", "2"]
    label = f"{PEAK_TFLOPS:g} TFLOP/s"
    for row in rows:
        batch, seconds = int(row["batch"]), float(row["batch s"])
        gflop_per_image, tflops = float(row["GFLOP/image"]), float(row["TFLOP/s"])
        assert gflop_per_image > 0 and float(row["compile s"]) > 0
        assert float(row["images/s"]) == pytest.approx(batch / seconds, rel=CELL)
        assert tflops == pytest.approx(gflop_per_image * batch / seconds / 1e3, rel=CELL)
        ceiling = float(row[f"ceiling images/s {label}"])
        assert ceiling == pytest.approx(PEAK_TFLOPS * 1e3 / gflop_per_image, rel=CELL)
        assert percent(row[f"MFU {label}"]) == pytest.approx(
            float(row["images/s"]) / ceiling, rel=CELL, abs=1e-3
        )
        assert row["peak GiB"] == "n/a"  # the CPU keeps no memory statistics
    # The FLOPs scale with the batch: XLA counted the program actually compiled.
    assert float(rows[1]["GFLOP/image"]) == pytest.approx(float(rows[0]["GFLOP/image"]), rel=0.05)


@pytest.mark.long  # the benchmark as a process, two batch sizes compiled: 126 s in CI
def test_anonymize_largest_batch_is_one_that_ran():
    done = benchmark(
        "speed.anonymize", "--batches", "1", "--find-max-batch", "--max-batch", "2", *TINY[:-1], "1"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.rstrip().endswith("largest batch that fits (up to 2): 2")


@pytest.mark.long  # compiles a whole stage-1 train step twice: about 5 min on 2 cores
def test_train_step_figures_are_consistent():
    done = benchmark(
        "speed.train_step",
        *[
            "--stages",
            "1",
            "--batch",
            "2",
            "--devices",
            "1",
            "--peak-tflops",
            str(PEAK_TFLOPS),
            *TINY[:-1],
            "1",
        ],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = table_rows(done.stdout)
    seconds, gflop, tflops = float(row["step s"]), float(row["GFLOP/step"]), float(row["TFLOP/s"])
    assert gflop > 0 and float(row["compile s"]) > 0
    assert float(row["images/s"]) == pytest.approx(2 / seconds, rel=CELL)
    assert tflops == pytest.approx(gflop / seconds / 1e3, rel=CELL)
    assert percent(row[f"MFU {PEAK_TFLOPS:g} TFLOP/s"]) == pytest.approx(
        tflops / PEAK_TFLOPS, rel=CELL, abs=1e-3
    )


def test_gpu_script_runs_each_part_on_its_own_and_reports_the_failures(tmp_path):
    """Each part's command writes its own table; a failing part, a reference part without
    the authors' checkout and an unknown part are reported and make the exit status 1,
    and the parts after them still run."""
    stand_in = tmp_path / "bin" / "python"
    stand_in.parent.mkdir()
    # Prints its arguments as the "table"; the train-step benchmark "fails".
    stand_in.write_text('#!/bin/bash\necho "$*"\n[[ "$2" != benchmarks.speed.train_step ]]\n')
    stand_in.chmod(0o755)
    out = tmp_path / "out"
    script = REPO / "benchmarks" / "gpu" / "figures.sh"
    parts = ["train2-f32", "reference-train", "bogus", "anonymize-bf16"]
    env = {**os.environ, "PATH": f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", str(script), "--out", str(out), *parts], env=env, capture_output=True, text=True
    )
    assert result.returncode == 1
    assert (out / "anonymize-bf16.md").read_text() == (
        "-m benchmarks.speed.anonymize --batches 1 8 32 --dtype bfloat16\n"
    )
    assert (
        "train2-f32 failed" in result.stderr
        and "reference-train needs --reference-repo" in result.stderr
    )
    assert "unknown part bogus" in result.stderr
    assert not (out / "reference-train.md").exists()


STAND_IN = """#!/bin/bash
# A stand-in for python: each benchmark prints a table of made-up figures (the cache it was
# given in the command cell); benchmarks.speed.train_step --stages 1 fails.
if [ "$1" = -c ]; then echo "cpu stand-in"; exit 0; fi
if [ "$2" = benchmarks.gpu.quick_summary ]; then exec "$REAL_PYTHON" "$@"; fi
case "$2" in
  benchmarks.speed.train_step)
    [ "$4" = 1 ] && { echo "stage 1 broke" >&2; exit 3; }
    echo "[   12.0 s] stage 2, batch 8: state built and placed; lowering and compiling the step" >&2
    printf '| stage | compile s | step s | images/s | MFU H200 bf16 | peak GiB |\\n|---|---|---|---|---|---|\\n'
    printf '| 2 | 9.5 (%s) | 0.2 | 40 | 18.5%% | 17.0 |\\n' "$DBAF_JAX_CACHE_DIR" ;;
  benchmarks.speed.anonymize)
    printf '| batch | compile s | batch s | images/s | MFU H200 bf16 | peak GiB |\\n|---|---|---|---|---|---|\\n'
    printf '| 32 | 30 | 0.024 | 1324 | 28.0%% | 5.95 |\\n' ;;
  benchmarks.speed.anonymize_folder)
    printf '| run | s | photos/s | faces/s | s/photo | megapixels/s |\\n|---|---|---|---|---|---|\\n'
    printf '| first (compiled) | 50.0 | 0.5 | 1 | 2 | 1 |\\n| warm (median of 1) | 10.0 | 2.4 | 5 | 0.42 | 6 |\\n' ;;
esac
"""


def gpu_quick(tmp_path, stand_in: str, *args: str, timeout: float | None = None):
    """benchmarks/gpu/quick.sh ``args`` with ``stand_in`` (a script) as its Python and
    ``tmp_path`` as its temporary folder: the finished process."""
    python = tmp_path / "python"
    python.write_text(stand_in)
    python.chmod(0o755)
    env = {**os.environ, "PYTHON": str(python), "REAL_PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu" / "quick.sh"), *args],
        env={**env, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
    )


def test_gpu_quick_runs_every_part_in_its_lane_and_tabulates_them(tmp_path):
    """Every part runs once with its own command; the warm stage-2 part reuses the cold
    part's cache and no other part does; a failing part gets a row naming its log and
    makes the exit status 1; the summary is docs/performance.md's table."""
    out = tmp_path / "out"
    result = gpu_quick(tmp_path, STAND_IN, "--out", str(out), "--detector", "D")
    assert result.returncode == 1, result.stderr
    rows = {row["part"]: row for row in table_rows((out / "summary.md").read_text())}
    assert list(rows) == ["anonymize", "train2-cold", "train2-warm", "train1", "folder"]
    assert (
        rows["anonymize"]["command"]
        == "`python -m benchmarks.speed.anonymize --batches 32 --dtype bfloat16 --steps 20`"
    )
    assert (
        rows["anonymize"]["images/s"] == "1324" and rows["anonymize"]["MFU"] == "28.0% (H200 bf16)"
    )
    cold, warm = rows["train2-cold"]["compile s"], rows["train2-warm"]["compile s"]
    assert cold == warm and str(tmp_path) in cold  # one cache of their own, on local disk
    assert rows["train2-cold"]["before compiling s"] == "12"
    assert (
        rows["train1"]["compile s"].startswith("no figures: see")
        and "train1 failed (exit 3)" in result.stderr
    )
    assert (
        "--width full" in rows["folder"]["command"] and "--detector D" in rows["folder"]["command"]
    )
    assert (
        rows["folder"]["step / batch s"] == "0.42 per photo"
        and rows["folder"]["images/s"] == "2.4 photos/s"
    )
    assert not any(tmp_path.glob("dbaf-gpu-quick-*"))  # the caches are removed


@pytest.mark.slow  # runs the script's parts as processes: 31 s
def test_gpu_quick_gives_no_part_more_than_the_budget_left(tmp_path):
    sleeper = '#!/bin/bash\n[ "$1" = -c ] && exit 0\n[ "$2" = benchmarks.gpu.quick_summary ] && exec "$REAL_PYTHON" "$@"\nsleep 600\n'
    out = tmp_path / "out"
    result = gpu_quick(tmp_path, sleeper, "--out", str(out), "--budget", "31", timeout=120)
    assert result.returncode == 1
    assert "cut off at its limit" in (out / "train2-cold.log").read_text()
    assert "budget spent" in (out / "train2-warm.log").read_text()
    assert "budget spent" in (out / "folder.log").read_text()


def runtime_benchmarks() -> list[str]:
    """Every module of benchmarks/ but the baselines (JAX against PyTorch), dotted."""
    paths = (REPO / "benchmarks").rglob("*.py")
    return sorted(
        ".".join(path.relative_to(REPO).with_suffix("").parts)
        for path in paths
        if not {"baselines", "tests"} & set(path.parts) and path.name != "__init__.py"
    )


def top_level_imports(path) -> set[str]:
    """The top-level packages ``path`` imports anywhere in its code (inside functions too)."""
    tree = ast.parse(path.read_text())
    names = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    names |= {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    return {name.split(".")[0] for name in names}


def test_runtime_benchmarks_import_neither_torch_nor_tests():
    """Each benchmark but the PyTorch comparisons imports, in a process where torch and tests
    cannot be imported, and names neither anywhere in its code (imports inside functions too)."""
    names = runtime_benchmarks()
    assert "benchmarks.speed.anonymize" in names and "benchmarks.common.models" in names
    for name in names:
        imported = top_level_imports(REPO / (name.replace(".", "/") + ".py"))
        assert not imported & {"torch", "tests"}, name
    blocked = "import sys; sys.modules.update(torch=None, tests=None, torchvision=None); "
    code = blocked + "; ".join(f"import {name}" for name in names)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_no_test_module_imports_a_benchmark():
    """tests/ checks the product; a benchmark is run, never imported, by a test."""
    for path in sorted((REPO / "tests").rglob("*.py")):
        assert "benchmarks" not in top_level_imports(path), path.relative_to(REPO)
