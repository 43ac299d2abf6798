"""Detection: NonMaxSuppression."""

from __future__ import annotations

import numpy as np

from ..registry import op


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """Boxes -> [y_min, x_min, y_max, x_max]; corner pairs may come in any diagonal order."""
    if center_point_box:
        xc, yc, w, h = np.moveaxis(boxes, -1, 0)
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    y1, x1, y2, x2 = np.moveaxis(boxes, -1, 0)
    return np.stack(
        [np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1
    )


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Intersection over union of one corner box with each of [n, 4] corner boxes."""
    top_left = np.maximum(box[:2], others[:, :2])
    bottom_right = np.minimum(box[2:], others[:, 2:])
    inter = np.prod(np.clip(bottom_right - top_left, 0, None), axis=-1)
    union = np.prod(box[2:] - box[:2]) + np.prod(others[:, 2:] - others[:, :2], axis=-1) - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def _select(corners, scores, max_boxes: int, iou_threshold: float, score_threshold) -> list[int]:
    """Greedy selection for one batch and class, highest score first."""
    candidates = np.arange(len(scores))
    if score_threshold is not None:
        # onnxruntime keeps boxes whose score is strictly above the threshold
        candidates = candidates[scores > score_threshold]
    # stable: among equal scores the lower box index wins
    candidates = candidates[np.argsort(-scores[candidates], kind="stable")]
    boxes = corners[candidates]
    alive = np.ones(len(candidates), dtype=bool)
    selected: list[int] = []
    # each pick suppresses the later candidates overlapping it: O(n) per pick, no n x n matrix
    while len(selected) < max_boxes and alive.any():
        i = int(np.argmax(alive))
        selected.append(int(candidates[i]))
        alive &= _iou(boxes[i], boxes) <= iou_threshold
        alive[: i + 1] = False
    return selected


@op("NonMaxSuppression", since=10)
def non_max_suppression(
    boxes,
    scores,
    max_output_boxes_per_class=None,
    iou_threshold=None,
    score_threshold=None,
    *,
    center_point_box=0,
):
    max_boxes = (
        0
        if max_output_boxes_per_class is None
        else int(np.asarray(max_output_boxes_per_class).reshape(-1)[0])
    )
    iou_thr = 0.0 if iou_threshold is None else float(np.asarray(iou_threshold).reshape(-1)[0])
    score_thr = (
        None if score_threshold is None else float(np.asarray(score_threshold).reshape(-1)[0])
    )
    corners = _corners(np.asarray(boxes, dtype=np.float32), center_point_box)
    scores = np.asarray(scores, dtype=np.float32)
    rows = []
    if max_boxes > 0:
        for b in range(scores.shape[0]):
            for c in range(scores.shape[1]):
                for i in _select(corners[b], scores[b, c], max_boxes, iou_thr, score_thr):
                    rows.append((b, c, i))
    return np.array(rows, dtype=np.int64).reshape(-1, 3)
