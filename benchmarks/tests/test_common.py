"""What the benchmarks share (benchmarks/common/), as units: the peak table names the GPUs
it should, the largest-batch search returns a batch that ran, treating only out-of-memory
errors as the answer, FLOPs are counted where a backend gives no count, the random model
is written once and kept; and every spelling of before the kinds' folders names a module
that exists. The benchmarks themselves run as processes in tests/test_benchmarks.py."""

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import benchmarks
from benchmarks.common import device_info, models, timing
from dbaf_jax.core import compilation_cache
from dbaf_jax.inference.anonymizer import FaceAnonymizer

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "name, gpu, bf16, tf32",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.0, 494.5),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756.0, 378.0),
        ("NVIDIA H200", "H200", 989.0, 494.5),
        ("NVIDIA A100-SXM4-80GB", "A100", 312.0, 156.0),
    ],
)
def test_known_gpus_have_their_peaks(name, gpu, bf16, tf32):
    assert device_info.named_peaks(name) == {f"{gpu} bf16": bf16 * 1e12, f"{gpu} TF32": tf32 * 1e12}


def test_unknown_device_has_no_peak_unless_given():
    assert device_info.gpu_peaks("cpu") is None
    assert device_info.named_peaks("cpu") == {}
    assert device_info.named_peaks("NVIDIA H100 80GB HBM3", 100.0) == {"100 TFLOP/s": 1e14}


def fits_below(limit: int, tried: list[int]):
    """A ``fits`` that records its batches and runs out of memory above ``limit``."""

    def fits(batch):
        tried.append(batch)
        if batch > limit:
            raise jax.errors.JaxRuntimeError(
                f"RESOURCE_EXHAUSTED: Out of memory allocating {batch} images"
            )

    return fits


@pytest.mark.parametrize(
    "start, limit, multiple, expected",
    [(1, 13, 1, 13), (2, 13, 2, 12), (4, 1000, 4, 64), (8, 7, 1, None)],
)
def test_largest_batch_doubles_then_bisects(start, limit, multiple, expected):
    tried = []
    found = device_info.largest_batch(fits_below(limit, tried), start, 64, multiple)
    assert found == expected
    if found is not None:
        assert found in tried and all(b % multiple == 0 for b in tried)
        assert (
            found + multiple > 64 or found + multiple in tried
        )  # the next batch up was tried and failed


def lowered_training_computation():
    """A lowered program with convolutions, a matmul and their gradients: what the step counts."""

    def loss(kernel, dense, images):
        maps = jax.lax.conv_general_dilated(
            images, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        return jnp.mean(jnp.tanh(maps.reshape(len(images), -1) @ dense) ** 2)

    args = (jnp.ones((3, 3, 3, 8)), jnp.ones((16 * 16 * 8, 4)), jnp.ones((2, 16, 16, 3)))
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1))).lower(*args)


class WithoutCostAnalysis:
    """A lowered program as a GPU plugin presents it: ``cost_analysis()`` gives ``answer``."""

    def __init__(self, lowered, answer):
        self.lowered, self.answer = lowered, answer

    def cost_analysis(self):
        return self.answer

    def compiler_ir(self, dialect=None):
        return self.lowered.compiler_ir(dialect)


def test_flops_of_a_backend_without_a_count_are_the_cpus_count_of_the_same_program():
    lowered = lowered_training_computation()
    backend = lowered.cost_analysis()["flops"]
    # The forward conv alone is 2 * (2 * 16 * 16 * 8) * (3 * 3 * 3) multiply-adds' FLOPs.
    assert backend > 2 * 2 * 16 * 16 * 8 * 27
    assert timing.cpu_flops(lowered) == backend
    assert timing.model_flops(lowered) == backend
    for answer in (None, {}, [], [{"bytes accessed": 1.0}]):
        assert timing.model_flops(WithoutCostAnalysis(lowered, answer)) == backend
    assert (
        timing.model_flops(WithoutCostAnalysis(lowered, [{"flops": 7.0}])) == 7.0
    )  # the backend's own count wins


def test_largest_batch_passes_other_errors_on():
    def fits(batch):
        raise ValueError("not a memory problem")

    with pytest.raises(ValueError):
        device_info.largest_batch(fits, 1, 8)


def test_out_of_memory_errors_of_both_frameworks_are_recognised():
    assert device_info.is_out_of_memory(
        jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 8 bytes")
    )
    assert device_info.is_out_of_memory(
        RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    )
    assert not device_info.is_out_of_memory(
        RuntimeError("CUDA error: an illegal memory access was encountered")
    )


def test_every_old_spelling_names_an_existing_module():
    for old, new in benchmarks.MOVED.items():
        assert (REPO / (new.replace(".", "/") + ".py")).is_file(), new
        assert not (REPO / (old.replace(".", "/") + ".py")).exists(), old


@pytest.mark.long  # builds and writes a random model: 103 s in CI
def test_a_random_model_is_written_once_and_kept(tmp_path, monkeypatch):
    """The benchmarks' random model is built and written once, then every later run loads
    the kept one; a run's own folder links to it (its detector added there, the kept
    model unchanged). With the compilation cache off and no DBAF_BENCH_MODELS (the
    tests), nothing is kept: the model goes into the run's folder as before."""
    monkeypatch.setenv(models.MODELS_VARIABLE, str(tmp_path / "kept"))
    size, scale, encoder_scale = models.WIDTHS["tiny"]
    kept = models.kept_random_model(size, scale, encoder_scale, tmp_path / "run1")
    assert kept.parent == tmp_path / "kept" and (kept / "model.json").is_file()
    assert [p.name for p in (tmp_path / "kept").iterdir()] == [kept.name]
    before = sorted((p, p.stat().st_mtime_ns) for p in kept.rglob("*"))
    monkeypatch.setattr(models, "random_model", lambda *args: pytest.fail("built again"))
    assert models.kept_random_model(size, scale, encoder_scale, tmp_path / "run2") == kept
    (tmp_path / "run2").mkdir()
    detector = tmp_path / "detector"
    detector.mkdir()
    (detector / "weights").write_text("the detector's files")
    view = models.with_detector(
        models.linked_model(kept, tmp_path / "run2" / "model"), detector, tmp_path / "run2"
    )
    assert (view / "mtcnn" / "weights").is_file() and not (kept / "mtcnn").exists()
    assert sorted((p, p.stat().st_mtime_ns) for p in kept.rglob("*")) == before
    assert FaceAnonymizer(view).fingerprint == FaceAnonymizer(kept).fingerprint
    monkeypatch.delenv(models.MODELS_VARIABLE)
    monkeypatch.setenv(compilation_cache.ENVIRONMENT_VARIABLE, compilation_cache.OFF)
    assert models.kept_models_directory() is None  # the compilation cache off: nothing kept
    monkeypatch.setenv(models.MODELS_VARIABLE, "off")
    assert models.kept_models_directory() is None
