"""MTCNN's host-side steps, in NumPy and float32 in the reference's order of
operations (`detectors.mtcnn` describes the pipeline): exact area resizing, the image
pyramid, P-net's proposals, the two NMS flavours, box regression and squaring, crop
regions and landmark points."""

from __future__ import annotations

import numpy as np

PROPOSAL_STRIDE = 2  # P-net's output cells step 2 input pixels ...
PROPOSAL_CELL = 12  # ... and each sees a 12x12 window


# ---------------------------------------------------------------- exact area resizing


def summed_area_table(pixels: np.ndarray) -> np.ndarray:
    """(H, W, C) uint8 -> (H + 1, W + 1, C) uint32 sums of pixels[:y, :x].

    uint32 may wrap on large images, but a window's sum, a difference of four
    entries, is exact modulo 2**32 and so exact for any window the resizes use.
    """
    table = np.zeros((pixels.shape[0] + 1, pixels.shape[1] + 1, pixels.shape[2]), np.uint32)
    table[1:, 1:] = pixels.cumsum(0, dtype=np.uint32).cumsum(1, dtype=np.uint32)
    return table


def _windows(in_sizes: np.ndarray, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(N, out_size) starts and ends of PyTorch's adaptive windows [floor(i*n/m), ceil((i+1)*n/m))."""
    i = np.arange(out_size)[None, :]
    n = np.asarray(in_sizes)[:, None]
    return i * n // out_size, -(-(i + 1) * n // out_size)


def area_resize(table: np.ndarray, regions: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """PyTorch's `interpolate(mode='area')` of regions of a uint8 image, bit for bit.

    Args:
      table: the image's `summed_area_table`, (H + 1, W + 1, C).
      regions: (N, 4) int (top, left, height, width), each non-empty and inside the image.
      size: output (height, width).

    Returns:
      (N, height, width, C) float32. Each output pixel averages its window as PyTorch
      does: integer pixel sums are exact (in PyTorch too, below 2**24), then divided
      by the window's height and then by its width in float32.
    """
    regions = np.asarray(regions, np.int64).reshape(-1, 4)
    row_starts, row_ends = _windows(regions[:, 2], size[0])
    col_starts, col_ends = _windows(regions[:, 3], size[1])

    def corner(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return table[(rows + regions[:, :1])[:, :, None], (cols + regions[:, 1:2])[:, None, :]]

    sums = (
        corner(row_ends, col_ends)
        - corner(row_starts, col_ends)
        - corner(row_ends, col_starts)
        + corner(row_starts, col_starts)
    )
    heights = (row_ends - row_starts).astype(np.float32)[:, :, None, None]
    widths = (col_ends - col_starts).astype(np.float32)[:, None, :, None]
    return sums.astype(np.float32) / heights / widths


def normalize(pixels: np.ndarray) -> np.ndarray:
    """[0, 255] -> the networks' input range, (x - 127.5) / 128 in float32."""
    return (pixels - np.float32(127.5)) * np.float32(0.0078125)


# ---------------------------------------------------------------- boxes on the host


def pyramid_scales(height: int, width: int, min_face_size: float, factor: float) -> list[float]:
    """The pyramid's scales, largest first (Python floats, as the reference computes them)."""
    scale = 12.0 / min_face_size
    shorter = min(height, width) * scale
    scales = []
    while shorter >= 12:
        scales.append(scale)
        scale *= factor
        shorter *= factor
    return scales


def level_size(height: int, width: int, scale: float) -> tuple[int, int]:
    return int(height * scale + 1), int(width * scale + 1)


def proposals(
    offsets: np.ndarray, probs: np.ndarray, scale: float, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """P-net cells at or above ``threshold`` -> image boxes.

    Args:
      offsets: (h, w, 4) P-net box offsets of one level.
      probs: (h, w) face probabilities.

    Returns:
      boxes (n, 4), scores (n,), offsets (n, 4), float32, in row-major cell order.
    """
    rows, cols = np.nonzero(probs >= np.float32(threshold))
    cells = np.stack([cols, rows], axis=1).astype(np.float32)
    start = np.float32(PROPOSAL_STRIDE) * cells
    factor = np.float32(scale)
    top_left = np.floor((start + np.float32(1)) / factor)
    bottom_right = np.floor((start + np.float32(PROPOSAL_CELL)) / factor)
    return np.concatenate([top_left, bottom_right], axis=1), probs[rows, cols], offsets[rows, cols]


def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float, mode: str = "union") -> np.ndarray:
    """Greedy non-maximum suppression; indices of the kept boxes, best first.

    mode 'union' is torchvision's `nms` (IoU with areas (x2 - x1) * (y2 - y1), stable
    descending order, suppress when IoU > threshold); 'min' is MTCNN's NumPy NMS
    ('Min': intersection over the smaller area, pixel-inclusive sizes x2 - x1 + 1,
    candidates in reverse `np.argsort` order, keep when the overlap <= threshold).
    """
    if mode not in ("union", "min"):
        raise ValueError(f"nms mode must be 'union' or 'min', not {mode!r}")
    inclusive = np.float32(1 if mode == "min" else 0)
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = (x2 - x1 + inclusive) * (y2 - y1 + inclusive)
    order = np.argsort(scores)[::-1] if mode == "min" else np.argsort(-scores, kind="stable")
    keep = []
    while order.size:
        best, rest = order[0], order[1:]
        w = np.maximum(
            np.float32(0),
            np.minimum(x2[best], x2[rest]) - np.maximum(x1[best], x1[rest]) + inclusive,
        )
        h = np.maximum(
            np.float32(0),
            np.minimum(y2[best], y2[rest]) - np.maximum(y1[best], y1[rest]) + inclusive,
        )
        inter = w * h
        with np.errstate(divide="ignore", invalid="ignore"):
            if mode == "min":
                overlap = inter / np.minimum(areas[best], areas[rest])
                keep_rest = overlap.astype(np.float64) <= threshold
            else:
                overlap = inter / (areas[best] + areas[rest] - inter)
                keep_rest = ~(
                    overlap.astype(np.float64) > threshold
                )  # a 0/0 overlap keeps, as in torchvision
        keep.append(best)
        order = rest[keep_rest]
    return np.asarray(keep, np.int64)


def regress(boxes: np.ndarray, offsets: np.ndarray, inclusive: bool) -> np.ndarray:
    """Moves each edge by its offset times the box's width or height.

    P-net's offsets scale by x2 - x1 (``inclusive=False``), R-net's and O-net's by
    x2 - x1 + 1 (``inclusive=True``), as in the reference.
    """
    one = np.float32(1 if inclusive else 0)
    width = boxes[:, 2] - boxes[:, 0] + one
    height = boxes[:, 3] - boxes[:, 1] + one
    sizes = np.stack([width, height, width, height], axis=1)
    return boxes + offsets * sizes


def square(boxes: np.ndarray) -> np.ndarray:
    """Each box made square around its centre, its side the longer of width and height."""
    width = boxes[:, 2] - boxes[:, 0]
    height = boxes[:, 3] - boxes[:, 1]
    side = np.maximum(width, height)
    half = np.float32(0.5)
    x1 = boxes[:, 0] + width * half - side * half
    y1 = boxes[:, 1] + height * half - side * half
    return np.stack([x1, y1, x1 + side, y1 + side], axis=1)


def crop_regions(boxes: np.ndarray, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Boxes -> (N, 4) int crop regions (top, left, height, width) and a (N,) mask of non-empty ones.

    The reference truncates each box to integers, clips it to the image and crops
    rows y1 - 1 .. y2 - 1 and columns x1 - 1 .. x2 - 1 (1-based, inclusive).
    """
    corners = np.trunc(boxes).astype(np.int32)
    left = np.maximum(corners[:, 0], 1) - 1
    top = np.maximum(corners[:, 1], 1) - 1
    right = np.minimum(corners[:, 2], width)
    bottom = np.minimum(corners[:, 3], height)
    regions = np.stack([top, left, bottom - top, right - left], axis=1)
    return regions, (regions[:, 2] > 0) & (regions[:, 3] > 0)


def landmark_points(boxes: np.ndarray, fractions: np.ndarray) -> np.ndarray:
    """O-net's (N, 10) landmark fractions (five x, then five y) -> (N, 5, 2) pixel (x, y)."""
    one = np.float32(1)
    width = (boxes[:, 2] - boxes[:, 0] + one)[:, None]
    height = (boxes[:, 3] - boxes[:, 1] + one)[:, None]
    xs = width * fractions[:, :5] + boxes[:, :1] - one
    ys = height * fractions[:, 5:] + boxes[:, 1:2] - one
    return np.stack([xs, ys], axis=-1)
