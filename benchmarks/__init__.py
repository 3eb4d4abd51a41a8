"""Measurements, never asserted in tests, one folder per kind (benchmarks/README.md):
``speed/`` (time, memory, compile, FLOPs), ``baselines/`` (JAX against PyTorch: the
authors' code and the parity references), ``studies/`` (quality and privacy: recall,
recovery after sharing, hostile inputs), ``gpu/`` (the GPU runs' scripts) and
``common/`` (what they share). Each runs as ``python -m benchmarks.<kind>.<name>``.

Every benchmark but those of ``baselines/`` runs with the runtime requirements alone: no
PyTorch, nothing imported from tests/ (photos are read from tests/data as files; what the
tests use too, such as the canvases of labelled photos, comes from fixtures/). The
baselines' point is timing PyTorch beside our networks: they need the ``[dev]`` install
and import the parity references of tests/torch_reference.

The spellings of before the folders, ``python -m benchmarks.<name>``, still run: `MOVED`
names each one's new module, which runs in its place after a line on stderr saying so.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

MOVED = {
    f"benchmarks.{name}": f"benchmarks.{kind}.{name}"
    for kind, names in {
        "speed": (
            "anonymize anonymize_folder detect_frames detect_sizes distributed flops"
            " photo_memory png_encoding program_size train_step video wild"
        ),
        "baselines": (
            "encoders evaluate metric_networks reference_anonymize reference_pytorch stylegan2"
        ),
        "studies": (
            "clip_fallback detector_recall hostile_metadata hostile_sidecar jpeg_recovery"
            " ledger_recovery recognizer_bins"
        ),
        "common": "device_info models timing",
        "gpu": "quick_summary",
    }.items()
    for name in names.split()
}


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds an old spelling (a key of `MOVED`) at its new module's file: ``python -m``
    runs that file under the old name, after one line on stderr naming the new one."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        new = importlib.util.find_spec(MOVED[fullname])
        if new is None or new.origin is None:
            return None
        print(f"{fullname} moved: python -m {MOVED[fullname]}", file=sys.stderr)
        return importlib.util.spec_from_file_location(fullname, new.origin)


if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedFinder())
