"""The detectors by name, their default settings, and building the photo path's detector.

`DETECTORS` is the registry, one line per detector: its name (what ``--detectors``
takes and the run summary prints), how to build it (from the MTCNN weights' directory,
and whether its low-confidence band is on) and why it cannot run here, if it cannot.
`build` makes one detector of several names (an `ensemble.Ensemble` when there are
more than one) and says, in notes for the summary, which default detector did not run
and why: a missing optional detector is never passed over in silence.

The settings (docs/photos.md gives the measurements they were chosen from):
with its band, MTCNN looks for faces from `MTCNN_MIN_FACE` pixels (facenet-pytorch's
20), runs its cascade at `MTCNN_LOW_THRESHOLDS` and calls sure what O-net scores over
facenet-pytorch's 0.7;
dlib's HOG detector is sure at a margin of `HOG_SURE` and reports down to `HOG_LOW`;
the CNN is sure from `CNN_SURE` (it reports from 0). Without the band each runs at its
sure setting alone: MTCNN exactly as facenet-pytorch runs it (20 px, 0.6/0.7/0.7).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Sequence

from dbaf_jax import model_directory
from dbaf_jax.errors import ConfigError, ModelDirectoryError
from dbaf_jax.faces.detectors import dlib_detectors, mtcnn
from dbaf_jax.faces.detectors.base import Detector
from dbaf_jax.faces.detectors.ensemble import Ensemble

MTCNN_MIN_FACE = (
    mtcnn.MIN_FACE_SIZE
)  # 12 px measured: no face more than the band at 20 px, 3 more sure false alarms, 2.5x the time
MTCNN_LOW_THRESHOLDS = (0.5, 0.5, 0.5)
HOG_UPSAMPLE = 2
HOG_SURE = 0.0
HOG_LOW = -0.5
CNN_UPSAMPLE = 1
CNN_SURE = 0.5


@dataclasses.dataclass(frozen=True)
class Entry:
    """One detector: ``build(mtcnn_dir, low_band)`` and ``unavailable()`` (None or why not)."""

    build: Callable[[Path, bool], Detector]
    unavailable: Callable[[], str | None]


def _mtcnn(directory: Path, low_band: bool) -> Detector:
    if low_band:
        return mtcnn.MTCNN.load(
            directory,
            min_face_size=MTCNN_MIN_FACE,
            thresholds=MTCNN_LOW_THRESHOLDS,
            sure_threshold=mtcnn.THRESHOLDS[2],
        )
    return mtcnn.MTCNN.load(
        directory
    )  # facenet-pytorch's settings (the evaluation's, the parity tests')


def _dlib(kind: str, upsample: int, sure: float, low: float) -> Callable[[Path, bool], Detector]:
    def build(directory: Path, low_band: bool) -> Detector:
        return dlib_detectors.DlibDetector(
            kind, upsample, low if low_band else sure, sure if low_band else None
        )

    return build


DETECTORS: dict[str, Entry] = {
    "mtcnn": Entry(_mtcnn, lambda: None),
    "dlib-hog": Entry(
        _dlib("hog", HOG_UPSAMPLE, HOG_SURE, HOG_LOW), dlib_detectors.DlibDetector.unavailable
    ),
    "dlib-cnn": Entry(
        _dlib("cnn", CNN_UPSAMPLE, CNN_SURE, 0.0), dlib_detectors.DlibDetector.unavailable
    ),
}
DEFAULT = ("mtcnn", "dlib-hog")  # the CNN is left out for its cost on CPUs (docs/photos.md)


def parse_names(text: str) -> tuple[str, ...]:
    """'mtcnn,dlib-hog' -> ('mtcnn', 'dlib-hog'); a ConfigError names an unknown one."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in DETECTORS]
    if unknown or not names:
        raise ConfigError(
            f"--detectors {text!r}: expected names from {', '.join(DETECTORS)} separated by commas"
        )
    return names


def weights_dir(model_dir: str | Path, given: str | Path | None = None) -> Path:
    """The MTCNN weights' directory: ``given`` (``--detector``) or MODEL/mtcnn; a
    ModelDirectoryError naming the command that writes it when it is not there."""
    directory = Path(given) if given is not None else Path(model_dir) / model_directory.MTCNN_DIR
    if not directory.is_dir():
        # convert.mtcnn --out D writes D/mtcnn: name the command that makes this very folder.
        if directory.name == model_directory.MTCNN_DIR:
            hint = f"python -m convert.mtcnn --out {directory.parent} writes it"
        else:
            hint = f"python -m convert.mtcnn --out {directory} writes {directory / 'mtcnn'}: pass that as --detector"
        raise ModelDirectoryError(
            f"{directory}: no MTCNN face detector ({hint}; or --aligned for aligned crops)"
        )
    return directory


def build(
    mtcnn_dir: str | Path, names: Sequence[str] | None = None, low_band: bool = True
) -> tuple[Detector, list[str]]:
    """The detector of ``names`` (None: `DEFAULT`, those installed) and notes naming
    each default detector that could not run and why. A named detector that cannot run
    is a ConfigError; MTCNN's weights are read from ``mtcnn_dir``."""
    chosen = DEFAULT if names is None else tuple(names)
    detectors, notes = [], []
    for name in chosen:
        why = DETECTORS[name].unavailable()
        if why is not None:
            if names is not None:
                raise ConfigError(f"--detectors {name}: cannot run: {why}")
            notes.append(
                f"detector {name} not run: {why}; faces only it would find are not looked for"
            )
            continue
        detectors.append(DETECTORS[name].build(Path(mtcnn_dir), low_band))
    return (detectors[0] if len(detectors) == 1 else Ensemble(detectors)), notes
