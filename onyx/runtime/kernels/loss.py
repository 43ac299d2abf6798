"""Losses: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss."""

from __future__ import annotations

import numpy as np

from ..registry import op


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    # half-precision inputs are reduced in float32, then cast back
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _nll(log_prob, target, weight, ignore_index, reduction) -> np.ndarray:
    """loss[n, d...] = -log_prob[n, target[n, d...], d...] * weight[target], zero where ignored."""
    out_dtype = log_prob.dtype
    x = log_prob.astype(_compute_dtype(out_dtype))
    target = np.asarray(target).astype(np.int64)
    keep = np.ones(target.shape, dtype=bool) if ignore_index is None else target != ignore_index
    safe = np.where(keep, target, 0)  # ignored labels may lie outside [0, C)
    picked = np.take_along_axis(x, safe[:, None], axis=1)[:, 0]
    w = np.ones_like(picked) if weight is None else np.asarray(weight, x.dtype)[safe]
    w = np.where(keep, w, 0)
    loss = -picked * w
    if reduction == "none":
        return loss.astype(out_dtype)
    if reduction == "sum":
        return np.asarray(loss.sum(), dtype=out_dtype)
    if reduction == "mean":
        return np.asarray(loss.sum() / w.sum(), dtype=out_dtype)
    raise ValueError(f"unknown reduction {reduction!r}")


@op("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(
    input, target, weight=None, *, ignore_index=None, reduction="mean"
):
    return _nll(np.asarray(input), target, weight, ignore_index, reduction)


@op("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(
    scores, labels, weights=None, *, ignore_index=None, reduction="mean"
):
    scores = np.asarray(scores)
    x = scores.astype(_compute_dtype(scores.dtype))
    shifted = x - x.max(axis=1, keepdims=True)
    log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = _nll(log_prob, labels, weights, ignore_index, reduction).astype(scores.dtype)
    return loss, log_prob.astype(scores.dtype)
