"""Calibration: run onyx on sample inputs and collect each wanted tensor's range.

method "minmax" keeps the smallest and largest value seen; "entropy" and "percentile" build a
histogram of |x| per tensor and clip the range at the threshold that minimizes the KL
divergence between the float and the quantized distributions (TensorRT's entropy calibration,
as onnxruntime's) or at a percentile of |x|. Values are fetched from one session per model
with graph optimizations off, so every intermediate value of the graph can be asked for.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from .. import ir
from ..errors import InvalidArgument
from .progress import Progress

METHODS = ("minmax", "entropy", "percentile")
HIST_BINS = 2048
#: Levels of the quantized histogram the KL search compares against (onnxruntime's default).
QUANT_BINS = 128
DEFAULT_PERCENTILE = 99.999


def read_feeds(data: Any) -> list[dict[str, np.ndarray]]:
    """Calibration feeds from a list/iterable of {input: array}, an .npz file (one feed) or a
    folder of .npz files (one feed each, in name order)."""
    if data is None:
        raise InvalidArgument("static quantization needs calibration data (feeds or npz folder)")
    if isinstance(data, str | os.PathLike):
        path = os.fspath(data)
        if os.path.isdir(path):
            files = sorted(glob.glob(os.path.join(path, "*.npz")))
            if not files:
                raise InvalidArgument(f"calibration folder {path!r} holds no .npz files")
        elif os.path.isfile(path):
            files = [path]
        else:
            raise InvalidArgument(f"calibration data {path!r}: no such file or folder")
        return [dict(np.load(f)) for f in files]
    if isinstance(data, dict):
        return [data]
    feeds = list(data)
    for i, f in enumerate(feeds):
        if not isinstance(f, dict):
            raise InvalidArgument(f"calibration sample {i} is a {type(f).__name__}, not a dict")
    if not feeds:
        raise InvalidArgument("calibration data is empty")
    return feeds


class Range:
    """min/max and (for histogram methods) a histogram of |x| on [0, edge] that doubles its
    span when a larger value arrives (bins merge pairwise, so counts are never re-guessed)."""

    __slots__ = ("lo", "hi", "hist", "edge")

    def __init__(self):
        self.lo, self.hi = np.inf, -np.inf
        self.hist: np.ndarray | None = None
        self.edge = 0.0

    def add(self, x: np.ndarray, histogram: bool) -> None:
        if x.size == 0:
            return
        x = np.asarray(x, np.float32)
        self.lo = min(self.lo, float(x.min()))
        self.hi = max(self.hi, float(x.max()))
        if histogram:
            self._add_hist(np.abs(x).ravel())

    def _add_hist(self, a: np.ndarray) -> None:
        top = float(a.max())
        if self.hist is None:
            self.edge = top if top > 0 else 1.0
            self.hist = np.zeros(HIST_BINS, np.int64)
        while top > self.edge:  # double the span: merge bin pairs into the lower half
            self.hist = np.concatenate(
                [self.hist.reshape(-1, 2).sum(1), np.zeros(HIST_BINS // 2, np.int64)]
            )
            self.edge *= 2
        counts, _ = np.histogram(a, bins=HIST_BINS, range=(0.0, self.edge))
        self.hist += counts

    def limits(self, method: str, percentile: float = DEFAULT_PERCENTILE) -> tuple[float, float]:
        if not np.isfinite(self.lo):
            return 0.0, 0.0
        if method == "minmax" or self.hist is None or self.hist.sum() == 0:
            return self.lo, self.hi
        if method == "percentile":
            cdf = np.cumsum(self.hist) / self.hist.sum()
            t = (int(np.searchsorted(cdf, percentile / 100.0)) + 1) * self.edge / HIST_BINS
        else:
            t = kl_threshold(self.hist, self.edge)
        return max(self.lo, -t), min(self.hi, t)


def kl_threshold(hist: np.ndarray, edge: float) -> float:
    """The clipping threshold of |x| whose quantization to QUANT_BINS levels loses least
    information (KL divergence of the clipped reference from its quantized version)."""
    hist = hist.astype(np.float64)
    last = int(np.nonzero(hist)[0][-1]) + 1 if hist.any() else QUANT_BINS
    if last <= QUANT_BINS:
        return last * edge / len(hist)
    best, best_i = np.inf, last
    step = max(1, (last - QUANT_BINS) // 128)  # a bounded number of candidates
    for i in range(QUANT_BINS, last + 1, step):
        ref = hist[:i].copy()
        ref[-1] += hist[i:].sum()  # outliers clip into the last bin
        kl = _kl_of_quantized(ref, hist[:i])
        if kl < best:
            best, best_i = kl, i
    return best_i * edge / len(hist)


def _kl_of_quantized(ref: np.ndarray, clipped: np.ndarray) -> float:
    """KL(ref || ref merged into QUANT_BINS groups and spread back over each group's non-empty
    bins)."""
    n = len(ref)
    edges = np.linspace(0, n, QUANT_BINS + 1).astype(int)
    nonzero = clipped != 0
    sums = np.add.reduceat(clipped, edges[:-1])
    counts = np.add.reduceat(nonzero.astype(np.float64), edges[:-1])
    per_bin = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
    q = np.where(nonzero, np.repeat(per_bin, np.diff(edges)), 0.0)
    qs = q.sum()
    if qs == 0:
        return np.inf
    p, q = ref / ref.sum(), q / qs
    mask = p > 0
    q = np.where(mask & (q == 0), 1e-12, q)
    return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))


def calibrate(
    model: ir.Model,
    feeds: Iterable[dict[str, np.ndarray]],
    names: list[str],
    method: str = "minmax",
    percentile: float = DEFAULT_PERCENTILE,
    progress: bool = True,
) -> dict[str, tuple[float, float]]:
    """{value name: (rmin, rmax)} over the feeds, running ``model`` with onyx."""
    if method not in METHODS:
        raise InvalidArgument(
            f"unknown calibration method {method!r} (one of {', '.join(METHODS)})"
        )
    ranges = {n: Range() for n in names}
    histogram = method != "minmax"
    feeds = list(feeds)
    bar = Progress(len(feeds), "calibrating", enabled=progress)
    for values in _run_all(model, feeds, names):
        for n, x in values.items():
            if isinstance(x, np.ndarray) and x.dtype.kind == "f":
                ranges[n].add(x, histogram)
        bar.step()
    return {n: r.limits(method, percentile) for n, r in ranges.items()}


def _run_all(model: ir.Model, feeds: list[dict], names: list[str]) -> Iterator[dict]:
    from ..runtime.session import InferenceSession, SessionOptions

    options = SessionOptions()
    options.graph_optimization_level = 0  # every value stays observable
    sess = InferenceSession(model, options)
    inputs = {v.name for v in model.graph.inputs}
    fetched = [n for n in names if n not in inputs]
    for feed in feeds:
        feed = {k: v for k, v in feed.items() if k in inputs}
        out = dict(zip(fetched, sess.run(fetched, feed))) if fetched else {}
        out.update({n: feed[n] for n in names if n in inputs and n in feed})
        yield out
