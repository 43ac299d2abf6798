"""The sigmoid, hard sigmoid and hard swish written into a given array, that the activation
kernels, FusedConv / FusedGemm's activations and the RNN gates share. Apart from activation.py
so that a CNN whose activations are all fused into its convs (fused.py) does not read and run
every activation kernel for these three."""

from __future__ import annotations

import numpy as np

from .. import native
from .low_floats import upcast

#: Elements up to which sigmoid_into(x) (no ``out``) chains fresh arrays: a ufunc writing into
#: a given array costs numpy about 0.5 us more than one allocating its result, the whole
#: pass on a few elements (a FusedGemm's one logit: 1.6 us instead of 3.4-4.7); from some
#: hundreds of elements on the passes in place are as fast, and allocate once.
SMALL_SIGMOID = 64


def sigmoid_into(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """1 / (1 + exp(-x)) into ``out`` (a fresh array when None; may be x itself), in in-place
    passes, accurate relative to the result everywhere; where exp(-x) overflows to inf the
    result is 0, the limit. The one sigmoid of the kernels (Sigmoid, FusedConv/FusedGemm's
    activation, the RNN gates, ...). Callers that may overflow silence numpy's warning."""
    # -1 * x and 1 / e are bit for bit np.negative and np.reciprocal, whose loops are not
    # vectorized; outputs are positional (numpy parses them faster than out=: RNN steps)
    if out is None and x.__class__ is np.ndarray and 0 < x.ndim and x.size <= SMALL_SIGMOID:
        t = x.dtype.type  # (the same four operations on fresh arrays: see SMALL_SIGMOID)
        return np.divide(t(1), np.add(np.exp(np.multiply(x, t(-1))), t(1)))
    if out is None:
        out = np.asarray(np.multiply(x, x.dtype.type(-1)))
    else:
        np.multiply(x, out.dtype.type(-1), out)
    np.exp(out, out)
    np.add(out, out.dtype.type(1), out)
    return np.divide(out.dtype.type(1), out, out)


def hard_sigmoid_into(x: np.ndarray, alpha, beta, out: np.ndarray | None = None) -> np.ndarray:
    """max(0, min(1, alpha * x + beta)) into ``out`` (a fresh array when None; may be x): the
    one hard sigmoid of the kernels (HardSigmoid, FusedConv/FusedGemm, the RNN gates)."""
    if out is None:
        return _clip01(np.asarray(np.multiply(x, alpha)) + beta)
    np.multiply(x, alpha, out)
    np.add(out, beta, out)
    return np.clip(out, 0, 1, out)


def _clip01(y: np.ndarray) -> np.ndarray:
    """np.clip(y, 0, 1) in place (y is a fresh array): one clip, where min / max with a scalar
    bound take numpy's unvectorized loop."""
    if type(y) is not np.ndarray or not y.ndim:
        return np.clip(y, 0, 1)
    return np.clip(y, 0, 1, out=y)


def _hard_swish(x: np.ndarray) -> np.ndarray:
    y = native.hardswish_f32(x) if x.size >= 1024 else None  # (one pass instead of four)
    if y is not None:
        return y
    t = x / 6
    t += 0.5
    t = _clip01(t)
    t *= x
    return t


def hard_swish(x: np.ndarray) -> np.ndarray:
    """What the HardSwish kernel returns (ConvHardSwish's fallback applies it too)."""
    return np.asarray(_hard_swish(upcast(x))).astype(x.dtype, copy=False)
