"""MTCNN face detection: boxes, probabilities and five landmarks per face.

The pipeline is facenet-pytorch's `MTCNN.detect(image, landmarks=True)`, step for step:

1. Image pyramid: scales 12/min_face_size * factor**k while the shorter side stays at
   least 12 pixels; level k is resized to (int(H*s + 1), int(W*s + 1)) with PyTorch's
   'area' interpolation and normalized to (x - 127.5) / 128.
2. P-net per level; every cell with face probability >= thresholds[0] proposes the
   12x12 window at stride 2, mapped back to the image. NMS (IoU 0.5) within each
   level, then NMS (IoU 0.7) over all levels; box regression (offsets times the box
   size), then each box squared around its centre (side = its longer side).
3. Crops of the squared boxes, truncated to integers and clipped to the image (not
   zero-padded: a clipped crop is stretched to the square), area-resized to 24x24;
   R-net keeps probabilities > thresholds[1]; NMS (IoU 0.7), regression with
   inclusive sizes (x2 - x1 + 1), squaring.
4. The same at 48x48 through O-net (> thresholds[2]); landmarks are read in the boxes
   before O-net's regression; after it, a last NMS that divides the intersection by
   the smaller box's area ('Min', 0.7).
5. Faces ordered by box area, largest first.

Everything but the networks runs on the host in NumPy, in float32 and in the
reference's order of operations, so the decisions (thresholds, floors, truncations,
NMS) come out as in PyTorch. The networks are jitted: P-net once per pyramid level
shape, each level zero-padded below and to the right to a multiple of `PNET_BUCKET`
(P-net is told the real size, takes its pooling over the real pixels only, and the
cells past the real size are cut off), so photos of nearby sizes share programs;
R-net and O-net on batches of crops padded to a few bucket sizes.
`MTCNN.detect_many` runs them on several images of one size at once (a clip's
frames), each image's result as if detected alone.

The two NMS flavours differ as in the reference: the first three stages use
torchvision's (areas x2 - x1, candidates in descending score with a stable sort,
suppress when IoU > threshold); the last uses MTCNN's own NumPy one (areas
x2 - x1 + 1, candidates in reverse `np.argsort` order, keep when overlap <= threshold).

Where the reference fails, this module decides: a squared box lying wholly outside
the image gives an empty crop, which the reference skips while keeping its box (its
scores then no longer line up with its boxes); here such a box is dropped.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Sequence

import flax.linen as nn
import jax
import numpy as np

from dbaf_jax.core.errors import ConfigError, ModelDirectoryError
from dbaf_jax.faces.detectors.base import Detections, empty, rgb_frames
from dbaf_jax.faces.detectors.mtcnn_steps import (
    area_resize,
    crop_regions,
    landmark_points,
    level_size,
    nms,
    normalize,
    proposals,
    pyramid_scales,
    regress,
    square,
    summed_area_table,
)
from dbaf_jax.models.mtcnn import ONET_SIDE, RNET_SIDE
from dbaf_jax.storage import model_directory

MIN_FACE_SIZE = 20
SCALE_FACTOR = 0.709
THRESHOLDS = (0.6, 0.7, 0.7)

NMS_WITHIN_LEVEL = 0.5
NMS_ACROSS_LEVELS = 0.7
NMS_REFINED = 0.7
NMS_OUTPUT = 0.7
PNET_BUCKET = 32  # pyramid levels run padded to a multiple of this: photos of nearby sizes share P-net's programs
SMALLEST_BATCH = 16  # crop batches are padded to a power of two from here ...
LARGEST_BATCH = 512  # ... up to here, then run in chunks of this size

NETWORK_KINDS = {"pnet": "mtcnn:PNet", "rnet": "mtcnn:RNet", "onet": "mtcnn:ONet"}


# ---------------------------------------------------------------- networks


@functools.partial(jax.jit, static_argnums=0)
def _forward(module: nn.Module, variables: dict, *inputs: jax.Array):
    return module.apply(variables, *inputs)


def level_bucket(size: int) -> int:
    """The padded side a pyramid level of ``size`` pixels runs at (`PNET_BUCKET`)."""
    return -(-size // PNET_BUCKET) * PNET_BUCKET


def pnet_output_size(size: int) -> int:
    """P-net's output cells along a side of ``size`` input pixels."""
    return -(-(size - 2) // 2) - 4


def batch_bucket(count: int) -> int:
    """The padded batch size for ``count`` crops: a power of two in [SMALLEST_BATCH, LARGEST_BATCH]."""
    return min(max(SMALLEST_BATCH, 1 << max(count - 1, 0).bit_length()), LARGEST_BATCH)


def run_on_crops(network: model_directory.Network, crops: np.ndarray) -> tuple[np.ndarray, ...]:
    """(N, S, S, 3) normalized crops -> the network's outputs as NumPy, each (N, ...).

    Batches are zero-padded to `batch_bucket` sizes so that few shapes get compiled.
    """
    outputs = []
    for start in range(0, len(crops), LARGEST_BATCH):
        chunk = crops[start : start + LARGEST_BATCH]
        padded = np.zeros((batch_bucket(len(chunk)),) + chunk.shape[1:], np.float32)
        padded[: len(chunk)] = chunk
        outputs.append(
            [
                np.asarray(o)[: len(chunk)]
                for o in _forward(network.module, network.variables, padded)
            ]
        )
    return tuple(np.concatenate(parts) for parts in zip(*outputs))


# ---------------------------------------------------------------- the detector


class MTCNN:
    """MTCNN with converted weights (``python -m convert.mtcnn --out DIR``, then
    ``MTCNN.load(DIR / 'mtcnn')``); `detect` finds the faces in one image.

    ``sure_threshold`` (O-net's probability) splits the detections into sure ones (>)
    and a low-confidence band (the rest, down to ``thresholds[2]``); None: all sure.
    The run itself is the reference's with ``thresholds``: at the defaults it is
    facenet-pytorch's, detection for detection.
    """

    name = "mtcnn"

    def __init__(
        self,
        pnet: model_directory.Network,
        rnet: model_directory.Network,
        onet: model_directory.Network,
        min_face_size: float = MIN_FACE_SIZE,
        factor: float = SCALE_FACTOR,
        thresholds: tuple[float, float, float] = THRESHOLDS,
        sure_threshold: float | None = None,
    ):
        if not min_face_size > 0:
            raise ConfigError(f"min_face_size must be positive, not {min_face_size}")
        if not 0 < factor < 1:
            raise ConfigError(f"the pyramid factor must lie strictly between 0 and 1, not {factor}")
        if len(thresholds) != 3:
            raise ConfigError(f"thresholds needs one value per network (3), not {thresholds}")
        # Weights moved to the device once, not at every call.
        self.pnet, self.rnet, self.onet = (
            dataclasses.replace(n, variables=jax.device_put(n.variables))
            for n in (pnet, rnet, onet)
        )
        self.min_face_size = min_face_size
        self.factor = factor
        self.thresholds = tuple(thresholds)
        self.sure_threshold = sure_threshold

    @classmethod
    def load(cls, directory: str | Path, **options) -> MTCNN:
        """Loads DIR/mtcnn as written by `convert.mtcnn` (``options`` as for the constructor)."""
        directory = Path(directory)
        networks: dict[str, model_directory.Network] = {}
        for name, kind in NETWORK_KINDS.items():
            network = model_directory.load_network(
                directory / name
            )  # ModelDirectoryError naming the path
            if network.info["kind"] != kind:
                raise ModelDirectoryError(
                    f"{directory / name} holds a {network.info['kind']}, not an MTCNN {kind}"
                )
            networks[name] = network
        return cls(networks["pnet"], networks["rnet"], networks["onet"], **options)

    def detect(self, image: np.ndarray) -> Detections:
        """Faces in ``image``, an (H, W, 3) uint8 RGB array."""
        return self.detect_many([image])[0]

    def detect_many(self, images: Sequence[np.ndarray]) -> list[Detections]:
        """Faces in each of ``images``, (H, W, 3) uint8 RGB arrays of one size (a clip's
        frames): P-net runs once per pyramid level on all of them (padded to a power of
        two, so few batch shapes are compiled), R-net and O-net once on all their crops.
        Each image gets `detect`'s decisions on it alone (the networks are per image; a
        batch may change their float rounding, not the pipeline)."""
        images = rgb_frames(images)
        if not images:
            return []
        height, width = images[0].shape[:2]
        tables = [summed_area_table(image) for image in images]
        boxes = self._propose(tables, height, width)
        boxes = self._refine(tables, boxes, height, width)
        return self._output(tables, boxes, height, width)

    def _propose(self, tables: list[np.ndarray], height: int, width: int) -> list[np.ndarray]:
        """Stage 1: P-net over each image's pyramid -> per image (n, 4) squared candidate boxes."""
        level_results: list[list] = [[] for _ in tables]
        padded = 1 << (len(tables) - 1).bit_length()
        for scale in pyramid_scales(height, width, self.min_face_size, self.factor):
            level_height, level_width = level_size(height, width, scale)
            levels = np.zeros(
                (padded, level_bucket(level_height), level_bucket(level_width), 3), np.float32
            )
            for i, table in enumerate(tables):
                levels[i, :level_height, :level_width] = normalize(
                    area_resize(
                        table, np.array([(0, 0, height, width)]), (level_height, level_width)
                    )
                )[0]
            valid = np.array([level_height, level_width], np.int32)
            cells = (
                slice(None),
                slice(pnet_output_size(level_height)),
                slice(pnet_output_size(level_width)),
            )
            offsets, probs = (
                np.asarray(o)[cells]
                for o in _forward(self.pnet.module, self.pnet.variables, levels, valid)
            )
            for i, results in enumerate(level_results):
                boxes, scores, cell_offsets = proposals(
                    offsets[i], probs[i, ..., 1], scale, self.thresholds[0]
                )
                keep = nms(boxes, scores, NMS_WITHIN_LEVEL)
                results.append((boxes[keep], scores[keep], cell_offsets[keep]))
        squared = []
        for results in level_results:
            if not results:
                squared.append(np.zeros((0, 4), np.float32))
                continue
            boxes, scores, offsets = (np.concatenate(parts) for parts in zip(*results))
            keep = nms(boxes, scores, NMS_ACROSS_LEVELS)
            squared.append(square(regress(boxes[keep], offsets[keep], inclusive=False)))
        return squared

    @staticmethod
    def _crops(
        tables: list[np.ndarray], boxes: list[np.ndarray], height: int, width: int, side: int
    ):
        """Each image's boxes that give a crop, and all their crops (N, side, side, 3)
        normalized, in image order."""
        kept, crops = [], []
        for table, image_boxes in zip(tables, boxes):
            regions, nonempty = crop_regions(image_boxes, height, width)
            kept.append(image_boxes[nonempty])
            if nonempty.any():
                crops.append(normalize(area_resize(table, regions[nonempty], (side, side))))
        return kept, (np.concatenate(crops) if crops else np.zeros((0, side, side, 3), np.float32))

    def _refine(
        self, tables: list[np.ndarray], boxes: list[np.ndarray], height: int, width: int
    ) -> list[np.ndarray]:
        """Stage 2: R-net on 24x24 crops -> per image (m, 4) squared boxes."""
        kept, crops = self._crops(tables, boxes, height, width, RNET_SIDE)
        if not len(crops):
            return kept
        all_offsets, all_probs = run_on_crops(self.rnet, crops)
        refined, start = [], 0
        for image_boxes in kept:
            offsets, probs = (
                all_offsets[start : start + len(image_boxes)],
                all_probs[start : start + len(image_boxes)],
            )
            start += len(image_boxes)
            scores = probs[:, 1]
            passed = scores > np.float32(self.thresholds[1])
            image_boxes, scores, offsets = image_boxes[passed], scores[passed], offsets[passed]
            keep = nms(image_boxes, scores, NMS_REFINED)
            refined.append(square(regress(image_boxes[keep], offsets[keep], inclusive=True)))
        return refined

    def _output(
        self, tables: list[np.ndarray], boxes: list[np.ndarray], height: int, width: int
    ) -> list[Detections]:
        """Stage 3: O-net on 48x48 crops -> per image final boxes, probabilities and landmarks."""
        kept, crops = self._crops(tables, boxes, height, width, ONET_SIDE)
        outputs = run_on_crops(self.onet, crops) if len(crops) else ()
        found, start = [], 0
        for image_boxes in kept:
            if not len(image_boxes):
                found.append(empty())
                continue
            offsets, fractions, probs = (o[start : start + len(image_boxes)] for o in outputs)
            start += len(image_boxes)
            scores = probs[:, 1]
            passed = scores > np.float32(self.thresholds[2])
            image_boxes, scores, offsets, fractions = (
                image_boxes[passed],
                scores[passed],
                offsets[passed],
                fractions[passed],
            )
            landmarks = landmark_points(image_boxes, fractions)
            image_boxes = regress(image_boxes, offsets, inclusive=True)
            keep = nms(image_boxes, scores, NMS_OUTPUT, mode="min")
            image_boxes, scores, landmarks = image_boxes[keep], scores[keep], landmarks[keep]
            largest_first = np.argsort(
                (image_boxes[:, 2] - image_boxes[:, 0]) * (image_boxes[:, 3] - image_boxes[:, 1])
            )[::-1]
            scores = scores[largest_first]
            sure = None if self.sure_threshold is None else scores > np.float32(self.sure_threshold)
            found.append(
                Detections(image_boxes[largest_first], scores, landmarks[largest_first], sure)
            )
        return found
