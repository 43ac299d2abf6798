"""Audio front-end ops that onyx's optimizer makes (optimizer/audio.py)."""

from __future__ import annotations

import numpy as np

from ..registry import op


def _part(x: np.ndarray, start, end, axis: int) -> np.ndarray:
    """Slice(x, start, end, axis) with step 1: Python's slice clamps as ONNX's Slice does
    (a negative bound counts from the end, then both are clamped to [0, dim])."""
    index = [slice(None)] * x.ndim
    index[axis] = slice(start.item(), end.item())
    return x[tuple(index)]


@op("SpectralMagnitude", since=1, domain="ai.onyx")
def spectral_magnitude(x, re_starts, re_ends, im_starts, im_ends, axes, eps):
    """Sqrt(Add(Add(Mul(re, re), Mul(im, im)), eps)), re and im Slices of x along axes[0]
    (step 1): an STFT's magnitude from its real and imaginary halves, its function body's
    operations in its order on the same dtype (the same bits), in one step and one buffer."""
    axis = axes.item()
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} out of range for a rank-{x.ndim} input")
    axis %= x.ndim
    re, im = _part(x, re_starts, re_ends, axis), _part(x, im_starts, im_ends, axis)
    if re.shape != im.shape or x.dtype != eps.dtype:  # (broadcasts, promotions: as the chain)
        return np.sqrt(np.add(np.add(re * re, im * im), eps))
    y = np.multiply(re, re)
    square = np.multiply(im, im)
    np.add(y, square, y)
    np.add(y, eps, y)
    return np.sqrt(y, y)
