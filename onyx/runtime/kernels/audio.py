"""Audio front-end ops that onyx's optimizer makes (optimizer/audio.py)."""

from __future__ import annotations

import operator

import numpy as np

from ..registry import op
from .derived import derived


def _index(start, end, axis: int, ndim: int) -> tuple:
    """The index of Slice(x, start, end, axis) with step 1: Python's slice clamps as ONNX's
    Slice does (a negative bound counts from the end, then both are clamped to [0, dim])."""
    index = [slice(None)] * ndim
    index[axis] = slice(start.item(), end.item())
    return tuple(index)


def _indices(ndim: int, re_starts, re_ends, im_starts, im_ends, axes) -> tuple:
    axis = axes.item()
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} out of range for a rank-{ndim} input")
    axis %= ndim
    return _index(re_starts, re_ends, axis, ndim), _index(im_starts, im_ends, axis, ndim)


@op("SpectralMagnitude", since=1, domain="ai.onyx")
def spectral_magnitude(x, re_starts, re_ends, im_starts, im_ends, axes, eps):
    """Sqrt(Add(Add(Mul(re, re), Mul(im, im)), eps)), re and im Slices of x along axes[0]
    (step 1): an STFT's magnitude from its real and imaginary halves, its function body's
    operations in its order on the same dtype (the same bits), in one step and one buffer."""
    bounds = (re_starts, re_ends, im_starts, im_ends, axes)
    # kept per constant bounds (derived.py); the entry holds them, so their ids stay theirs
    key = ("magnitude", x.ndim, *map(id, bounds[1:]))
    kept = derived(re_starts, key, lambda: (bounds, *_indices(x.ndim, *bounds)))
    if not all(map(operator.is_, kept[0], bounds)):
        kept = (bounds, *_indices(x.ndim, *bounds))
    re, im = x[kept[1]], x[kept[2]]
    if re.shape != im.shape or x.dtype != eps.dtype:  # (broadcasts, promotions: as the chain)
        return np.sqrt(np.add(np.add(re * re, im * im), eps))
    y = np.multiply(re, re)
    square = np.multiply(im, im)
    np.add(y, square, y)
    np.add(y, eps, y)
    return np.sqrt(y, y)
