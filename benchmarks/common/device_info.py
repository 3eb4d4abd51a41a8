"""What a benchmark needs to know about the accelerator: its peak FLOP rates and memory.

Peaks are NVIDIA's dense (no sparsity) tensor-core figures from the data sheets, in
TFLOP/s per GPU: ``bf16`` for bfloat16 inputs, ``tf32`` for float32 matmuls and
convolutions run as TF32 (what JAX's default precision and PyTorch's
``allow_tf32`` do on these GPUs). A device not in the table has unknown peaks: MFU is
then reported only against a peak given with ``--peak-tflops``.

Both frameworks name GPUs alike (``jax.Device.device_kind`` and
``torch.cuda.get_device_name()``, e.g. "NVIDIA H100 80GB HBM3"), so one table serves.
"""

from __future__ import annotations

import argparse
from typing import Callable, NamedTuple


class GPUPeaks(NamedTuple):
    """A GPU model: substrings its device name holds (all of them), and its peaks."""

    name: str
    markers: tuple[str, ...]
    bf16_tflops: float
    tf32_tflops: float


# First match wins, so the PCIe variant precedes the SXM one it would also match.
KNOWN_GPUS = (
    GPUPeaks("H100 PCIe", ("H100", "PCIE"), 756.0, 378.0),
    GPUPeaks("H100 SXM", ("H100",), 989.0, 494.5),
    GPUPeaks("H200", ("H200",), 989.0, 494.5),  # the H100 SXM's compute, more memory
    GPUPeaks("A100", ("A100",), 312.0, 156.0),
)


def gpu_peaks(device_kind: str) -> GPUPeaks | None:
    """The table's entry for a device name, None when it is not a known GPU."""
    kind = device_kind.upper()
    return next((gpu for gpu in KNOWN_GPUS if all(m in kind for m in gpu.markers)), None)


def named_peaks(device_kind: str, peak_tflops: float | None = None) -> dict[str, float]:
    """Column label -> peak FLOP/s of ONE device to compute MFU against.

    ``peak_tflops`` (the user's figure) replaces the table; an unknown device without
    it gives {} (MFU not reported).
    """
    if peak_tflops is not None:
        return {f"{peak_tflops:g} TFLOP/s": peak_tflops * 1e12}
    gpu = gpu_peaks(device_kind)
    if gpu is None:
        return {}
    return {f"{gpu.name} bf16": gpu.bf16_tflops * 1e12, f"{gpu.name} TF32": gpu.tf32_tflops * 1e12}


def add_peak_argument(parser: argparse.ArgumentParser, device: str) -> None:
    """``--peak-tflops``, the user's figure `named_peaks` takes, of ``device`` ("the
    device", "one device")."""
    parser.add_argument(
        "--peak-tflops",
        type=float,
        help=f"peak TFLOP/s of {device} for MFU (default: the table's)",
    )


def describe_peaks(peaks: dict[str, float]) -> str:
    if not peaks:
        return "peak FLOP/s unknown for this device (give --peak-tflops for MFU)"
    named = (
        label if label.endswith("TFLOP/s") else f"{label} ({value / 1e12:g} TFLOP/s dense)"
        for label, value in peaks.items()
    )
    return "MFU against " + ", ".join(named)


def jax_peak_memory_bytes(device) -> int | None:
    """Peak bytes in use on a JAX device since the process started, None where the
    backend keeps no statistics (the CPU)."""
    stats = device.memory_stats()
    return (
        None if not stats or "peak_bytes_in_use" not in stats else int(stats["peak_bytes_in_use"])
    )


def format_bytes(count: int | None) -> str:
    return "n/a" if count is None else f"{count / 2**30:.2f}"


def is_out_of_memory(err: BaseException) -> bool:
    """XLA's RESOURCE_EXHAUSTED and PyTorch's CUDA out-of-memory errors."""
    message = str(err)
    return "RESOURCE_EXHAUSTED" in message or "out of memory" in message.lower()


def largest_batch(
    fits: Callable[[int], None], start: int, limit: int, multiple: int = 1
) -> int | None:
    """The largest batch in [start, limit], a multiple of ``multiple``, for which
    ``fits(batch)`` returns instead of raising an out-of-memory error (`is_out_of_memory`;
    other errors propagate). Doubles from ``start``, then bisects between the last
    batch that fit and the first that did not. None when ``start`` does not fit.

    Assumes memory grows with the batch, so every batch below one that fits fits too.
    """
    if start % multiple or start < 1:
        raise ValueError(f"start {start} is not a positive multiple of {multiple}")

    def try_batch(batch: int) -> bool:
        try:
            fits(batch)
        except Exception as err:  # noqa: BLE001 - only out-of-memory errors are an answer
            if not is_out_of_memory(err):
                raise
            return False
        return True

    if not try_batch(start):
        return None
    good, bad = start, None
    while bad is None and good < limit:
        candidate = min(2 * good, limit // multiple * multiple)
        if candidate <= good:
            break
        if try_batch(candidate):
            good = candidate
        else:
            bad = candidate
    while bad is not None and bad - good > multiple:
        middle = (good + bad) // 2 // multiple * multiple
        if try_batch(middle):
            good = middle
        else:
            bad = middle
    return good


def add_largest_batch_arguments(parser: argparse.ArgumentParser, max_batch: int) -> None:
    """``--find-max-batch`` and ``--max-batch``: whether to run `largest_batch` (or
    its PyTorch twin) and its limit, ``max_batch`` by default."""
    parser.add_argument(
        "--find-max-batch",
        action="store_true",
        help="also search the largest batch that fits (slow)",
    )
    parser.add_argument("--max-batch", type=int, default=max_batch, help="upper end of that search")
