"""Summary statistics of a tensor for the viewer: a few numbers and a small histogram.

The page never holds a tensor's data (a 1 GB model's page stays small); only what is computed
here, plus the values themselves when a tensor has at most ``SMALL`` elements (shape constants,
axes, scales: what a reader wants to see).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: Tensors with at most this many elements show their values.
SMALL = 16
#: Histogram bins.
BINS = 24
#: Above this many elements mean/std/histogram come from an evenly strided sample (min, max and
#: the NaN count stay exact): a 1 GB weight must not need a float64 copy of itself.
SAMPLE_ABOVE = 1 << 24


def _num(x: float) -> float | str:
    """A float JSON can hold: NaN and infinities become strings."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(f"{x:.6g}")


def _as_numeric(arr: np.ndarray) -> np.ndarray | None:
    if arr.dtype.kind in "fiub":
        return arr
    try:  # bfloat16, float8 and the other ml_dtypes types
        return arr.astype(np.float32)
    except (TypeError, ValueError):
        return None


def _small_values(arr: np.ndarray) -> list:
    flat = arr.reshape(-1)
    if flat.dtype.kind in "fiu":
        return [_num(v) if flat.dtype.kind == "f" else int(v) for v in flat]
    if flat.dtype.kind == "b":
        return [bool(v) for v in flat]
    out = []
    for v in flat:
        s = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
        out.append(s if len(s) <= 40 else s[:37] + "...")
    return out


def tensor_stats(value: Any) -> dict[str, Any]:
    """shape, dtype, min, max, mean, std, NaN count and a histogram of an array-like value."""
    if isinstance(value, list):
        return {"kind": f"sequence of {len(value)}"}
    if isinstance(value, dict):
        return {"kind": f"map of {len(value)}"}
    if value is None:
        return {"kind": "empty optional"}
    arr = np.asarray(value)
    out: dict[str, Any] = {"shape": list(arr.shape), "dtype": str(arr.dtype)}
    if arr.size <= SMALL:
        out["values"] = _small_values(arr)
    num = _as_numeric(arr)
    if num is None or arr.size == 0:
        return out
    if num.dtype.kind == "b":
        num = num.view(np.uint8)
    flat = num.reshape(-1)
    sampled = flat if flat.size <= SAMPLE_ABOVE else flat[:: flat.size // (SAMPLE_ABOVE // 4)]
    if num.dtype.kind == "f":
        nan = int(np.count_nonzero(np.isnan(flat)))
        finite = sampled[np.isfinite(sampled)]
        out["nan"] = nan
        out["inf"] = int(np.count_nonzero(np.isinf(flat)))
        out["min"] = _num(np.nanmin(flat)) if nan < flat.size else "nan"
        out["max"] = _num(np.nanmax(flat)) if nan < flat.size else "nan"
    else:
        finite = sampled
        out["min"], out["max"] = int(flat.min()), int(flat.max())
    if finite.size:
        out["mean"] = _num(np.mean(finite, dtype=np.float64))
        out["std"] = _num(np.std(finite, dtype=np.float64))
        out["zeros"] = _num(np.count_nonzero(finite == 0) / finite.size)
        out.update(_histogram(finite))
    if sampled is not flat:
        out["sampled"] = int(sampled.size)
    return out


def _histogram(finite: np.ndarray) -> dict[str, Any]:
    lo, hi = float(finite.min()), float(finite.max())
    if not hi - lo > abs(lo) * 1e-12:  # one value (or too close to split): one bar
        return {"hist": [int(finite.size)], "hist_range": [_num(lo), _num(hi)]}
    counts, _ = np.histogram(finite.astype(np.float64, copy=False), bins=BINS, range=(lo, hi))
    return {"hist": [int(c) for c in counts], "hist_range": [_num(lo), _num(hi)]}
