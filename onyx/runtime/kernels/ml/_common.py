"""Helpers shared by the ai.onnx.ml kernels: score post-transforms and class labels."""

from __future__ import annotations

import numpy as np

from ... import native
from ...concurrency import _other_threads as other_threads  # (run_slot's own test)

# (other_threads: threads started besides the main one, a C call. Alone, numpy's argmax and
# searchsorted are the cheaper calls: a one-row argmax 0.2 us against trees.c's 1.5 us, and
# its GIL release wakes nobody; the GIL-keeping calls serve runs with other threads about.
# Both give the same bits.)

#: post_transform names, in the order of TreeEnsemble's integer encoding.
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def logistic(x: np.ndarray) -> np.ndarray:
    # 1 / (1 + exp(-|x|)) never overflows; mirror it for negative x.
    v = 1.0 / (1.0 + np.exp(-np.abs(x)))
    return np.where(x < 0, 1.0 - v, v)


#: Rows from which a reduction over a few columns (2 to 7: a classifier's classes) runs as
#: column-wise ufuncs: numpy's reduce over a short last axis pays its inner loop's set-up
#: once per row (3.7 us for the max of 100 rows of 3)
COLUMN_ROWS = 16


def _by_columns(x: np.ndarray) -> bool:
    return x.ndim == 2 and x.shape[0] >= COLUMN_ROWS and 2 <= x.shape[1] <= 7


def row_max(x: np.ndarray) -> np.ndarray:
    """x.max(axis=-1, keepdims=True) (NaN propagates either way)."""
    if not _by_columns(x):
        return np.maximum.reduce(x, axis=-1, keepdims=True)
    m = np.maximum(x[:, 0:1], x[:, 1:2])
    for c in range(2, x.shape[1]):
        np.maximum(m, x[:, c : c + 1], out=m)
    return m


def row_argmax(x: np.ndarray) -> np.ndarray:
    """x.argmax(axis=1) of a 2-D x; for a small float x, trees.c's, which keeps the GIL:
    numpy's argmax (like its searchsorted, take and fancy indexing) lets the GIL go at every
    call, whatever its size, and in a small scikit-learn model's run of tens of microseconds
    each release woke a thread waiting for the GIL, which took it from the run
    (docs/reliability.md, "Runs that keep the GIL"). Comparisons in numpy keep it too but
    cost a one-row run 5-10 us more."""
    best = native.argmax_rows(x) if other_threads() else None
    return x.argmax(axis=1) if best is None else best


def row_sum(x: np.ndarray) -> np.ndarray:
    """x.sum(axis=-1, keepdims=True), its bits: numpy adds fewer than 8 terms one after the
    other, left to right, as the columns are added here."""
    if not _by_columns(x):
        return np.add.reduce(x, axis=-1, keepdims=True)
    s = np.add(x[:, 0:1], x[:, 1:2])
    for c in range(2, x.shape[1]):
        s += x[:, c : c + 1]
    return s


def softmax(x: np.ndarray) -> np.ndarray:
    # (the ufuncs' reduce is what x.max and x.sum call, without their Python wrappers: a
    # one-row call is mostly those)
    e = np.subtract(x, row_max(x))
    np.exp(e, out=e)
    e /= row_sum(e)
    return e


def softmax_zero(x: np.ndarray) -> np.ndarray:
    """Softmax over the non-zero scores only; zero scores stay zero.

    onnxruntime treats |x| <= 1e-7 as zero; the maximum is still taken over every score.
    """
    nonzero = np.abs(x) > 1e-7
    e = np.where(nonzero, np.exp(x - x.max(axis=-1, keepdims=True)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total != 0)


def probit(x: np.ndarray) -> np.ndarray:
    """sqrt(2) * erfinv(2x - 1), the inverse of the standard normal CDF.

    The spec names PROBIT without a formula; onnxruntime (and onnx's reference) evaluate erfinv
    with Winitzki's closed-form approximation in float32, so we do the same to match them.
    """
    y = (2.0 * np.asarray(x, dtype=np.float32) - 1.0).astype(np.float32)
    sign = np.where(y < 0, np.float32(-1), np.float32(1))
    t = (1 - y) * (1 + y)
    with np.errstate(divide="ignore", invalid="ignore"):
        log = np.log(t)
        v = np.float32(2 / (3.14159 * 0.147)) + np.float32(0.5) * log
        v2 = np.float32(1 / 0.147) * log
        erfinv = sign * np.sqrt(-v + np.sqrt(v * v - v2))
    return np.float32(np.sqrt(2.0)) * erfinv


TRANSFORMS = {
    "NONE": lambda x: x,
    "SOFTMAX": softmax,
    "LOGISTIC": logistic,
    "SOFTMAX_ZERO": softmax_zero,
    "PROBIT": probit,
}


def post_transform(scores: np.ndarray, name: str | int) -> np.ndarray:
    """Apply a post_transform (given by name, or by TreeEnsemble's integer code) along the last axis."""
    if not isinstance(name, str):
        name = POST_TRANSFORMS[int(name)]
    try:
        return TRANSFORMS[name](scores)
    except KeyError:
        raise ValueError(f"unknown post_transform {name!r}") from None


def class_labels(ints: list[int] | None, strings: list[str] | None) -> np.ndarray:
    """The classlabels_* attribute as an int64 or object (str) array."""
    if strings:
        return np.array(strings, dtype=object)
    return np.asarray(ints if ints is not None else [], dtype=np.int64)


def as_2d(x: np.ndarray) -> np.ndarray:
    """[C] -> [1, C]; [N, ...] -> [N, F] (the ml ops read a batch of feature rows)."""
    x = np.asarray(x)
    if x.ndim == 0:
        return x.reshape(1, 1)
    if x.ndim == 1:
        return x.reshape(1, -1)
    if x.ndim == 2:
        return x
    return x.reshape(x.shape[0], -1 if x.size else int(np.prod(x.shape[1:])))  # (0 rows too)


def regression_transform(scores: np.ndarray, name: str | int) -> np.ndarray:
    """post_transform of regression scores [N, T]: onnxruntime leaves a single target alone
    except for PROBIT (no softmax of one value, and no LOGISTIC either)."""
    if not isinstance(name, str):
        name = POST_TRANSFORMS[int(name)]
    if scores.shape[-1] == 1 and name != "PROBIT":
        return scores
    return post_transform(scores, name)
