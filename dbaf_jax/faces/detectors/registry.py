"""The detectors by name, their default settings, and building the photo path's detector.

`DETECTORS` is the registry, one line per detector: its name (what ``--detectors``
takes and the run summary prints), the folder of the model directory (or of
``--detector-weights``) its weights are in and the command that writes it (None: it
needs no weights file), how to build it (from that folder, and whether its
low-confidence band is on) and why it cannot run here, if it cannot. `build` loads
only the detectors named, each from its own folder, makes one detector of them (an
`ensemble.Ensemble` when there are more than one) and says, in notes for the summary,
which default detector did not run and why: a missing optional detector is never
passed over in silence, and missing weights are an error naming the command that
writes them.

The settings (docs/photos.md gives the measurements they were chosen from):
CenterFace calls sure what scores at least `CENTERFACE_SURE` (the published demo's
cut) and reports down to `CENTERFACE_LOW`;
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

from dbaf_jax.core.errors import ConfigError, ModelDirectoryError
from dbaf_jax.faces.detectors import centerface, dlib_detectors, mtcnn
from dbaf_jax.faces.detectors.base import Detector
from dbaf_jax.faces.detectors.ensemble import Ensemble
from dbaf_jax.storage import model_directory

MTCNN_MIN_FACE = (
    mtcnn.MIN_FACE_SIZE
)  # 12 px measured: no face more than the band at 20 px, 3 more sure false alarms, 2.5x the time
MTCNN_LOW_THRESHOLDS = (0.5, 0.5, 0.5)
CENTERFACE_SURE = 0.35
CENTERFACE_LOW = 0.3
HOG_UPSAMPLE = 2
HOG_SURE = 0.0
HOG_LOW = -0.5
CNN_UPSAMPLE = 1
CNN_SURE = 0.5


@dataclasses.dataclass(frozen=True)
class Entry:
    """One detector: ``build(weights, low_band)`` (``weights``: the folder `folder` of the
    weights root, None when it has none), ``unavailable()`` (None or why not), and where
    its weights are: `folder` under the weights root, written by `converter`."""

    build: Callable[[Path | None, bool], Detector]
    unavailable: Callable[[], str | None]
    folder: str | None = None
    converter: str | None = None


def _centerface(directory: Path | None, low_band: bool) -> Detector:
    assert directory is not None
    if low_band:
        return centerface.CenterFaceDetector.load(
            directory, threshold=CENTERFACE_LOW, sure_threshold=CENTERFACE_SURE
        )
    return centerface.CenterFaceDetector.load(directory, threshold=CENTERFACE_SURE)


def _mtcnn(directory: Path | None, low_band: bool) -> Detector:
    assert directory is not None
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


def _dlib(
    kind: str, upsample: int, sure: float, low: float
) -> Callable[[Path | None, bool], Detector]:
    def build(directory: Path | None, low_band: bool) -> Detector:
        return dlib_detectors.DlibDetector(
            kind, upsample, low if low_band else sure, sure if low_band else None
        )

    return build


DETECTORS: dict[str, Entry] = {
    "centerface": Entry(_centerface, lambda: None, centerface.DIRECTORY, "convert.centerface"),
    "mtcnn": Entry(_mtcnn, lambda: None, model_directory.MTCNN_DIR, "convert.mtcnn"),
    "dlib-hog": Entry(
        _dlib("hog", HOG_UPSAMPLE, HOG_SURE, HOG_LOW), dlib_detectors.DlibDetector.unavailable
    ),
    "dlib-cnn": Entry(
        _dlib("cnn", CNN_UPSAMPLE, CNN_SURE, 0.0), dlib_detectors.DlibDetector.unavailable
    ),
}
# CenterFace alone: joining MTCNN or dlib's HOG found no labelled face more, added false
# alarms and cost 2-4 times as long (docs/photos.md, How the default was chosen).
DEFAULT = ("centerface",)


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
    """The folder the detectors' weight folders are in: ``given`` (``--detector-weights``)
    or the model directory; a ModelDirectoryError when ``given`` is no folder, or is one
    detector's own folder rather than the folder that holds it."""
    if given is None:
        return Path(model_dir)
    root = Path(given)
    if not root.is_dir():
        raise ModelDirectoryError(
            f"--detector-weights {root}: no such folder (the folder that holds the detectors' "
            f"weights: {', '.join(detector_folders())})"
        )
    if (root / "pnet").is_dir() or (root / model_directory.NETWORK_FILE).is_file():
        raise ModelDirectoryError(
            f"--detector-weights {root}: this is one detector's folder; pass the folder that "
            f"holds it ({root.parent}), where each detector finds its own ({', '.join(detector_folders())})"
        )
    return root


def detector_folders() -> list[str]:
    """The weight folders the detectors read, e.g. ['centerface/', 'mtcnn/']."""
    return [f"{entry.folder}/" for entry in DETECTORS.values() if entry.folder]


def weights_of(name: str, root: str | Path) -> Path | None:
    """Detector ``name``'s weights folder under ``root`` (None: it needs none); a
    ModelDirectoryError naming the command that writes it when it is not there."""
    entry = DETECTORS[name]
    if entry.folder is None:
        return None
    directory = Path(root) / entry.folder
    if not directory.is_dir():
        raise ModelDirectoryError(
            f"{directory}: no weights for the {name} face detector (python -m {entry.converter} "
            f"--out {Path(root)} writes them; or --detectors without {name}, or --aligned for aligned crops)"
        )
    return directory


def build(
    root: str | Path, names: Sequence[str] | None = None, low_band: bool = True
) -> tuple[Detector, list[str]]:
    """The detector of ``names`` (None: `DEFAULT`, those installed) and notes naming
    each default detector that could not run and why. A named detector that cannot run
    is a ConfigError; each detector reads its weights from its folder under ``root``
    (`weights_of`), and only the detectors chosen are loaded."""
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
        detectors.append(DETECTORS[name].build(weights_of(name, root), low_band))
    return (detectors[0] if len(detectors) == 1 else Ensemble(detectors)), notes


def names_help() -> str:
    """What ``--detectors`` takes, for the commands' --help."""
    return (
        f"face detectors, separated by commas, from {', '.join(DETECTORS)}; default "
        f"{','.join(DEFAULT)} with the low-confidence band pixelated (docs/photos.md)"
    )
