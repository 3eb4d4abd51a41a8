"""The test double of a trained model for whole photos (fixtures/invertible_double.py, one
home for the tests and the ledger and clip studies of benchmarks/studies/), and
`double_with_mtcnn`, the double with the real MTCNN finding its faces."""

from pathlib import Path

from convert.common import run
from convert.mtcnn import main as convert_mtcnn
from dbaf_jax.faces import photos
from dbaf_jax.faces.detectors import registry
from fixtures.invertible_double import KEY_SHAPE, InvertibleDouble

__all__ = ["KEY_SHAPE", "InvertibleDouble", "double_with_mtcnn"]


def double_with_mtcnn(tmp: Path) -> tuple[InvertibleDouble, photos.PhotoFaces]:
    """An `InvertibleDouble` of 128 px faces and the faces the real MTCNN finds for it
    (converted into ``tmp/model/mtcnn``; no low-confidence band)."""
    run(convert_mtcnn, ["--out", str(tmp / "model")])
    double = InvertibleDouble(128)
    detector = registry.build(tmp / "model", ["mtcnn"], low_band=False)[0]
    return double, photos.PhotoFaces(detector, double.input_size)
