"""A pure-PyTorch stand-in for torchvision's `batched_nms`.

facenet-pytorch's detector calls `torchvision.ops.batched_nms`, whose compiled
`torchvision::nms` op is missing from the CUDA-only torchvision wheel installed here.
This follows the CPU kernel's rules (areas (x2 - x1) * (y2 - y1), candidates by
descending score, a candidate suppressed when its IoU with a kept box exceeds the
threshold) and batched_nms's per-image coordinate offsets. tests/models/test_mtcnn.py checks
it against a brute-force NMS before patching it into facenet-pytorch.
"""

import torch


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Indices of the kept (N, 4) boxes, best first."""
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    order = torch.sort(scores, descending=True, stable=True).indices
    suppressed = torch.zeros(len(boxes), dtype=torch.bool)
    keep = []
    for position, i in enumerate(order.tolist()):
        if suppressed[i]:
            continue
        keep.append(i)
        rest = order[position + 1 :]
        w = (torch.minimum(x2[i], x2[rest]) - torch.maximum(x1[i], x1[rest])).clamp(min=0)
        h = (torch.minimum(y2[i], y2[rest]) - torch.maximum(y1[i], y1[rest])).clamp(min=0)
        inter = w * h
        iou = inter / (areas[i] + areas[rest] - inter)
        suppressed[rest[iou.double() > iou_threshold]] = (
            True  # the kernel compares float with double
        )
    return torch.tensor(keep, dtype=torch.long)


def batched_nms(
    boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float
) -> torch.Tensor:
    """NMS within each ``idxs`` group: boxes of different groups are shifted apart first."""
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.long)
    offsets = idxs.to(boxes) * (boxes.max() + 1)
    return nms(boxes + offsets[:, None], scores, iou_threshold)
