"""Tree ensembles' descent and leaf sums (trees.c)."""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from . import _core as core
from ._core import (
    _I64,
    _P,
    _PARALLEL_MACS,
    _addr,
    _element_cuts,
    _input_addr,
    _run,
    _ways,
    abi,
    range_of,
)


@abi("forest_task")
class _ForestTask(ctypes.Structure):
    _fields_ = [
        (name, _P)
        for name in ("x", "roots", "feature", "threshold", "child", "nan_outcome", "states")
    ] + [(name, _I64) for name in ("nf", "trees", "depth", "is_double")]


@abi("forest_sum_task")
class _ForestSumTask(ctypes.Structure):
    _fields_ = [(name, _P) for name in ("states", "weights", "scores")] + [
        (name, _I64) for name in ("trees", "targets", "is_double")
    ]


#: Tree steps worth a second thread (a step is a few dependent loads, some ten multiply-adds).
_PARALLEL_TREE_STEPS = _PARALLEL_MACS // 8


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def forest_descend(x: np.ndarray, tables, roots2: np.ndarray, depth: int, nan_rule: bool):
    """The state each row of x (rows, features; float32 or float64, C-contiguous) reaches in
    each tree, [rows, trees] int64: ml/tree.py's _FastTables (``tables``: int64 feature and
    child, threshold of x's type, nan_outcome) walked ``depth`` levels from the doubled roots;
    ``nan_rule``: NaN takes nan_outcome (else the false branch). None without the library."""
    if core.lib is None or x.dtype not in _FLOATS or x.ndim != 2 or not x.flags.c_contiguous:
        return None
    rows, trees = x.shape[0], len(roots2)
    states = np.empty((rows, trees), np.int64)
    ways = _ways(rows * trees * depth, -(-rows // 8), _PARALLEL_TREE_STEPS)
    task = _ForestTask(
        _input_addr(x),
        _addr(roots2),
        _addr(tables.feature),
        _addr(tables.threshold),
        _addr(tables.child),
        _addr(tables.nan_outcome) if nan_rule else None,
        _addr(states),
        x.shape[1],
        trees,
        depth,
        int(x.dtype == np.float64),
    )
    _run(core.lib.forest_descend_range, task, _element_cuts(rows, 8, ways), ways)
    return states


def forest_sum(states: np.ndarray, weights: np.ndarray) -> np.ndarray | None:
    """scores[r] = the sum over trees t of weights[states[r, t]], added tree after tree in the
    weights' type (float32 or float64): numpy's running sum, to the bit. None without the
    library."""
    if core.lib is None or weights.dtype not in _FLOATS or not weights.flags.c_contiguous:
        return None
    rows, trees = states.shape
    if trees == 0:
        return None
    scores = np.empty((rows, weights.shape[1]), weights.dtype)
    ways = _ways(rows * trees * weights.shape[1], rows, _PARALLEL_MACS)
    task = _ForestSumTask(
        _addr(states),
        _addr(weights),
        _addr(scores),
        trees,
        weights.shape[1],
        int(weights.dtype == np.float64),
    )
    _run(core.lib.forest_sum_range, task, _element_cuts(rows, 1, ways), ways)
    return scores


#: trees.c's forest_binary rules (onyx_forest_small's modes): a two-class forest voting for
#: class 0 alone gives [1 - s, s], [1 - l(s), l(s)], [l(-s), l(s)] or [-s, s] (l: logistic)
FOREST_BINARY = (2, 3, 4, 5)


class ForestSums:
    """forest_descend then forest_sum for small batches (one thread), set up once per forest
    and weight table: the tables' addresses sit in kept task structs, so a call fills in the
    pointers of x, the states and the scores. The sums are forest_sum's, to the bit.

    Made by ``forest_sums``; holds the arrays whose addresses it keeps."""

    #: Rows x trees x levels a call takes (more: the pool's parallel path, via forest_descend).
    MAX_STEPS = _PARALLEL_TREE_STEPS

    def __init__(self, tables, roots2: np.ndarray, depth: int, weights: np.ndarray):
        self._arrays = (tables, roots2, weights)  # (the addresses below stay valid)
        self.dtype = tables.threshold.dtype
        self.trees, self.targets, self.depth = len(roots2), weights.shape[1], depth
        is_double = int(self.dtype == np.float64)
        # a NaN only ever differs from `v <= t` where nan_outcome says so: always pass it
        nan = _addr(tables.nan_outcome) if tables.any_nan_outcome else None
        self._descend = _ForestTask(
            None,
            _addr(roots2),
            _addr(tables.feature),
            _addr(tables.threshold),
            _addr(tables.child),
            nan,
            None,
            0,
            self.trees,
            depth,
            is_double,
        )
        self.score_dtype = weights.dtype
        self._sum = _ForestSumTask(
            None, _addr(weights), None, self.trees, self.targets, int(weights.dtype == np.float64)
        )
        self._descend_at = ctypes.addressof(self._descend)
        self._sum_at = ctypes.addressof(self._sum)

    def fits(self, x: np.ndarray) -> bool:
        """Whether this call may take x (rows of the tables' dtype, C-contiguous, few)."""
        return (
            core.lib is not None
            and x.dtype == self.dtype
            and x.flags.c_contiguous
            and x.shape[0] * self.trees * self.depth < self.MAX_STEPS
        )

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """scores [rows, targets] of x [rows, features] (``fits(x)`` holds): trees.c's
        onyx_forest_scores, one call (the kept tasks are only read: threads may share them)."""
        rows, nf = x.shape
        scores = np.empty((rows, self.targets), self.score_dtype)
        scores_of = core.lib.onyx_forest_scores
        if rows <= KEPT_ROWS and rows * self.trees * max(self.depth, 1) <= KEPT_STEPS:
            scores_of = core.keeping_gil("onyx_forest_scores")
        else:
            core.let_go[0] += 1  # (the GIL let go: concurrency.run_slot counts them)
        status = scores_of(self._descend_at, self._sum_at, _input_addr(x), rows, nf, _addr(scores))
        core.check(status, "forest_scores")
        return scores

    def classify(self, x: np.ndarray, base: np.ndarray, transform: int):
        """(best class [rows] int64, scores [rows, targets] float32) of x: the scores with
        ``base`` (float32, C-contiguous, at most targets) added, then ``transform`` (0 NONE,
        1 SOFTMAX) applied, in one call (trees.c's onyx_forest_classify; float32 weights)."""
        rows, nf = x.shape
        scores = np.empty((rows, self.targets), np.float32)
        best = np.empty(rows, np.int64)
        status = core.lib.onyx_forest_classify(
            self._descend_at, self._sum_at, _input_addr(x), rows, nf, _addr(scores),
            _addr(base) if len(base) else None, len(base), transform, _addr(best),
        )  # fmt: skip
        core.check(status, "forest_classify")
        return best, scores

    def small(self, nf: int, base: np.ndarray | None, transform: int) -> SmallCall | None:
        """A SmallCall for rows of nf features: the scores (transform -1) or classify's
        (scores, best) with ``base`` and ``transform`` (0 NONE, 1 SOFTMAX; float32 weights),
        or a two-class forest's (scores [rows, 2], best) by a FOREST_BINARY rule (one target,
        float32 weights, at most one base value), for as many rows as this call takes (at
        most SMALL_ROWS); None where it takes none."""
        steps = self.trees * max(self.depth, 1)
        max_rows = min(SMALL_ROWS, (self.MAX_STEPS - 1) // steps)
        if core.lib is None or max_rows < 1:
            return None
        classify, binary = transform >= 0, transform >= FOREST_BINARY[0]
        if binary and (self.targets != 1 or self.score_dtype != np.float32):
            return None
        fields = dict(task=self._descend_at, task2=self._sum_at, nf=nf, mode=transform)
        if classify and base is not None and len(base):
            fields.update(consts=_addr(base), n=len(base))
        return SmallCall("forest", fields, (self, base), 2 if binary else self.targets,
                         np.float32 if classify else self.score_dtype, classify,
                         4 * max_rows if binary else 0, max_rows,
                         kept_rows=min(KEPT_ROWS, KEPT_STEPS // steps))  # fmt: skip


def forest_sums(tables, roots2: np.ndarray, depth: int, weights: np.ndarray) -> ForestSums | None:
    """A ForestSums for these tables (of x's dtype) and weights (float32 or float64, summed in
    their type), or None without the library."""
    if (
        core.lib is None
        or weights.dtype not in _FLOATS
        or not weights.flags.c_contiguous
        or len(roots2) == 0
    ):
        return None
    return ForestSums(tables, roots2, depth, weights)


def svm_coupling(r: np.ndarray) -> np.ndarray | None:
    """libsvm's pairwise coupling (trees.c: onyx_svm_coupling) of r [n, k, k], float64, each
    row's P(i | i or j) at [i, j]: the class probabilities [n, k]. None without the library."""
    if core.lib is None:
        return None
    r = np.ascontiguousarray(r, np.float64)
    n, k = r.shape[:2]
    p, work = np.empty((n, k)), np.empty(k * k + k)
    status = core.lib.onyx_svm_coupling(_addr(r), _addr(p), n, k, _addr(work), _addr(work[k * k :]))
    core.check(status, "SVM coupling")
    return p


class CouplingPairs:
    """trees.c's onyx_svm_coupling_pairs for one classifier's pairs, set up once: the pairs' index arrays
    kept with their addresses, and a call's probabilities and work space one allocation (at
    one row, the wrapper's arrays and addresses cost more than the coupling). The same C
    function: its bits."""

    __slots__ = ("first", "second", "at", "k")

    def __init__(self, first: np.ndarray, second: np.ndarray, k: int):
        self.first = np.ascontiguousarray(first, np.int64)
        self.second = np.ascontiguousarray(second, np.int64)
        self.at = (_addr(self.first), _addr(self.second), len(self.first))
        self.k = k

    def __call__(self, pairwise: np.ndarray) -> np.ndarray:
        """The class probabilities [n, k] of pairwise [n, pairs] (float64, C-contiguous)."""
        k, n = self.k, pairwise.shape[0]
        # [p: n k | r: k k | Q: k k | Qp: k], doubles
        space = np.empty(n * k + 2 * k * k + k)
        p = _addr(space)
        first, second, pairs = self.at
        status = core.lib.onyx_svm_coupling_pairs(
            _addr(pairwise), first, second, n, pairs, k,
            p, p + 8 * n * k, p + 8 * (n * k + k * k), p + 8 * (n * k + 2 * k * k),
        )  # fmt: skip
        core.check(status, "SVM coupling")
        return space[: n * k].reshape(n, k)


def coupling_pairs(first: np.ndarray, second: np.ndarray, k: int) -> CouplingPairs | None:
    """A CouplingPairs for these pairs of k classes, or None without the library."""
    return CouplingPairs(first, second, k) if core.lib is not None else None


@abi("svm_task")
class _SvmTask(ctypes.Structure):
    _fields_ = (
        [
            (name, _P)
            for name in ("vectors", "weights", "rho", "prob_a", "prob_b", "first", "second")
        ]
        + [(name, _I64) for name in ("n_vectors", "nf", "pairs", "k", "kernel", "degree")]
        + [(name, ctypes.c_double) for name in ("gamma", "coef0")]
    )


#: SVMClassifier's kernel types, as trees.c numbers them
SVM_KERNELS = {"LINEAR": 0, "POLY": 1, "RBF": 2, "SIGMOID": 3}


class SvmClassify:
    """trees.c's onyx_svm_classify for one SVMClassifier (one-vs-one), set up once: a call
    on a few rows is one C call (kernel, decisions, votes, Platt scaling and coupling), where
    numpy's per-call cost made some twenty calls on one row most of the time. Holds the
    arrays whose addresses its task keeps."""

    __slots__ = ("_arrays", "_task", "_at", "width", "work", "nf")

    def __init__(self, vectors, weights, rho, prob_a, prob_b, first, second, k: int, kernel: str,
                 gamma: float, coef0: float, degree: int):  # fmt: skip
        vt = np.ascontiguousarray(np.asarray(vectors, np.float64).T)  # [nf, n_vectors]
        arrays = [vt] + [
            None if a is None else np.ascontiguousarray(a, dtype)
            for a, dtype in (
                (np.asarray(weights).T, np.float64), (rho, np.float64), (prob_a, np.float64),
                (prob_b, np.float64), (first, np.int64), (second, np.int64),
            )
        ]  # fmt: skip
        self._arrays = arrays
        nf, n_vectors = vt.shape
        pairs = len(arrays[5])
        self._task = _SvmTask(
            *[None if a is None else _addr(a) for a in arrays],
            n_vectors, nf, pairs, k, SVM_KERNELS[kernel], int(degree), float(gamma), float(coef0),
        )  # fmt: skip
        self._at = ctypes.addressof(self._task)
        self.nf = nf
        self.width = k if prob_a is not None else pairs
        self.work = n_vectors + pairs + k + 2 * k * k + k

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(best class index [rows] int64, probabilities [rows, k] or decisions [rows, pairs]
        float64) of x [rows, nf] float64, C-contiguous."""
        rows = x.shape[0]
        best = np.empty(rows, np.int64)
        space = np.empty(rows * self.width + self.work)
        at = _addr(space)
        status = core.lib.onyx_svm_classify(
            self._at, _input_addr(x), rows, _addr(best), at, at + 8 * rows * self.width
        )
        core.check(status, "SVMClassifier")
        return best, space[: rows * self.width].reshape(rows, self.width)

    def small(self, x_dtype: np.dtype, max_rows: int) -> SmallCall | None:
        """A SmallCall of this classifier for rows of float32 or float64 x: (the
        probabilities or decisions as float32, SVMClassifier's output type; best)."""
        if core.lib is None or x_dtype not in _FLOATS:
            return None
        widen = x_dtype == np.float32  # (x widened to float64 in the work space)
        work = 8 * ((max_rows * self.nf if widen else 0) + self.work)
        fields = dict(task=self._at, nf=self.nf, mode=int(widen))
        return SmallCall("svm", fields, (self,), self.width, np.float64, True, work, max_rows,
                         np.float32)  # fmt: skip


def svm_classify(*args, **kwargs) -> SvmClassify | None:
    """A SvmClassify (arguments as its constructor's), or None without the library."""
    return SvmClassify(*args, **kwargs) if core.lib is not None else None


class LinearClassify:
    """trees.c's onyx_linear_classify for one LinearClassifier: weights [features, classes]
    and intercepts float32, kept with their addresses; a call is the scores, the best class
    and NONE or SOFTMAX in one C call (at one row, numpy's product, argmax and softmax were
    some ten calls)."""

    __slots__ = ("_arrays", "_w", "_b", "classes", "nf", "transform")

    def __init__(self, weights: np.ndarray, intercepts: np.ndarray | None, transform: int):
        w = np.ascontiguousarray(weights, np.float32)
        b = None if intercepts is None else np.ascontiguousarray(intercepts, np.float32)
        self._arrays = (w, b)
        self.nf, self.classes = w.shape
        self._w, self._b = _addr(w), None if b is None else _addr(b)
        self.transform = transform

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(best class [rows] int64, scores [rows, classes] float32) of float32 x [rows, nf],
        C-contiguous."""
        rows = x.shape[0]
        scores = np.empty((rows, self.classes), np.float32)
        best = np.empty(rows, np.int64)
        status = core.lib.onyx_linear_classify(
            _input_addr(x), rows, self.nf, self._w, self._b, self.classes, self.transform,
            _addr(scores), _addr(best),
        )  # fmt: skip
        core.check(status, "LinearClassifier")
        return best, scores


def linear_classify(weights, intercepts, transform: int) -> LinearClassify | None:
    """A LinearClassify (arguments as its constructor's), or None without the library."""
    return LinearClassify(weights, intercepts, transform) if core.lib is not None else None


@abi("ml_call")
class _MlCall(ctypes.Structure):
    _fields_ = [(name, _P) for name in ("task", "task2", "consts", "out", "best", "work")] + [
        (name, _I64) for name in ("nf", "max_rows", "n", "mode")
    ]


#: Rows a SmallCall takes at most (each thread keeps outputs of this many rows).
SMALL_ROWS = 64
#: Rows up to which a SmallCall or a forest's scores keep the GIL while in C (a few
#: microseconds: core.keeping_gil)
KEPT_ROWS = 16
#: Rows x trees x levels up to which a forest's call keeps the GIL (besides KEPT_ROWS): a
#: forest of hundreds of deep trees scored on 16 rows held the GIL for as long as its rows
#: took, other threads stopped (a step takes nanoseconds: some microseconds at most)
KEPT_STEPS = 4096
#: Output elements up to which bins_one_hot keeps the GIL while in C
KEPT_BINS = 4096


class SmallCall:
    """One ai.onnx.ml kernel's call on at most ``max_rows`` rows, set up once: trees.c's
    onyx_<kind>_small(call, x, rows), three arguments ctypes passes as they are (a kept
    pointer, x's bytes, an int), where a kernel's own entry point takes ten, converted one by
    one, and each output's address cost as much again (at one row these were most of a
    kernel's time). Each thread writes into outputs of its own, kept with its copy of the
    call struct; a call returns copies of the rows written: (scores [rows, n], best class
    [rows] int64 or None).

    ``fields``: the ml_call fields the kernel reads (task, task2, consts, nf, n, mode);
    ``keep``: the arrays their addresses point into; ``work``: bytes of work space a thread
    needs."""

    __slots__ = ("_fn", "_kept", "_template", "_keep", "_local", "_out", "_best", "_work",
                 "max_rows", "_result", "kept_rows")  # fmt: skip

    def __init__(self, kind: str, fields: dict, keep, out_width: int, out_dtype, best: bool,
                 work: int = 0, max_rows: int = SMALL_ROWS, result_dtype=None,
                 kept_rows: int = KEPT_ROWS):  # fmt: skip
        self._fn = getattr(core.lib, f"onyx_{kind}_small")  # (no argtypes: passed as they are)
        self._kept = core.keeping_gil(f"onyx_{kind}_small")  # (calls of kept_rows rows)
        #: rows up to which a call keeps the GIL (KEPT_ROWS; a forest's, fewer by its work)
        self.kept_rows = kept_rows
        self._template = _MlCall(max_rows=max_rows, **fields)
        self._keep = keep  # (the addresses in fields stay valid)
        self._local = threading.local()
        self._out = (max_rows, out_width, np.dtype(out_dtype))
        self._best, self._work, self.max_rows = best, work, max_rows
        # (the scores handed back in this dtype: one conversion instead of a copy and one)
        self._result = None if result_dtype is None else np.dtype(result_dtype)

    def _thread(self) -> tuple:
        """This thread's (call pointer, views of its outputs by row count, what they keep),
        made at its first call."""
        rows, width, dtype = self._out
        out = np.zeros((rows, width), dtype)
        best = np.zeros(rows, np.int64) if self._best else None
        work = np.zeros(max(self._work, 1), np.uint8)
        call = _MlCall.from_buffer_copy(self._template)
        call.out, call.best, call.work = _addr(out), _addr(best), _addr(work)
        views = [(out[:n], None if best is None else best[:n]) for n in range(rows + 1)]
        state = self._local.state = (ctypes.c_void_p(ctypes.addressof(call)), views, (call, work))
        return state

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(scores, best) of x [rows, nf] (rows <= max_rows, nf and dtype the kernel's: the
        caller checks; any layout, its bytes are copied C-ordered)."""
        try:
            at, views, _ = self._local.state
        except AttributeError:
            at, views, _ = self._thread()
        rows = x.shape[0]
        if rows <= self.kept_rows:
            status = self._kept(at, x.tobytes(), rows)
        else:
            core.let_go[0] += 1  # (the GIL let go: concurrency.run_slot counts them)
            status = self._fn(at, x.tobytes(), rows)
        if status:
            core.check(status, "ml small call")
        out, best = views[rows]
        out = out.copy() if self._result is None else out.astype(self._result)
        return out, None if best is None else best.copy()


@abi("linear_chain")
class _LinearChain(ctypes.Structure):
    _fields_ = [(name, _P) for name in ("offset", "scale", "sub", "proj", "weights", "bias")] + [
        (name, _I64) for name in ("k", "norm")
    ]


#: Normalizer's norms, as trees.c numbers them
NORMS = {"MAX": 0, "L1": 1, "L2": 2}


#: the columns trees.c's LinearChain sums at once (its CHAIN_BLOCK)
_CHAIN_BLOCK = 16
#: the rows it takes at once (its CHAIN_ROWS)
_CHAIN_ROWS = 16


class LinearChain:
    """trees.c's onyx_linear_chain_small for one ai.onyx LinearChain on float32 rows of nf
    features: the Scaler (offset, scale [nf]), Sub (sub [nf]) and MatMul (proj [nf, k])
    present, then LinearClassifier (weights [k, C], bias [C], its NONE or SOFTMAX; or, C 1
    of two labels, 2 NONE or 3 LOGISTIC: scores [1 - p, p]; 4: LOGISTIC of each score) and a Normalizer (norm, or
    None), one C call a run. A call returns (best class [rows] int64,
    scores [rows, C] float32)."""

    __slots__ = ("_arrays", "_chain", "_small", "_template", "nf")

    def __init__(self, nf: int, offset, scale, sub, proj, weights, bias, transform: int,
                 norm: str | None):  # fmt: skip
        def f32(a):
            return None if a is None else np.ascontiguousarray(a, np.float32)

        k, classes = np.shape(weights)
        if proj is not None:  # (its rows zero-padded to whole blocks: trees.c's CHAIN_BLOCK)
            padded = np.zeros((nf, -(-k // _CHAIN_BLOCK) * _CHAIN_BLOCK), np.float32)
            padded[:, :k] = proj
            proj = padded
        arrays = [f32(a) for a in (offset, scale, sub, proj, weights, bias)]
        self._arrays = arrays
        self._chain = _LinearChain(
            *[None if a is None else _addr(a) for a in arrays], k, -1 if norm is None else NORMS[norm]
        )  # fmt: skip
        fields = dict(task=ctypes.addressof(self._chain), nf=nf, n=classes, mode=transform)
        work = 4 * (_CHAIN_ROWS * (nf + k + 1) + classes)
        width = 2 if transform in (2, 3) else classes  # (one set of weights: [1 - p, p])
        self._small = SmallCall("linear_chain", fields, (self,), width, np.float32, True, work)
        self._template = (_MlCall(max_rows=0, **fields), work)
        self.nf = nf

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(best, scores) of float32 x [rows, nf] (any layout: its bytes are copied)."""
        rows = x.shape[0]
        if rows <= SMALL_ROWS:
            scores, best = self._small(x)
            return best, scores
        template, work = self._template
        scores = np.empty((rows, 2 if template.mode in (2, 3) else template.n), np.float32)
        best = np.empty(rows, np.int64)
        space = np.empty(work, np.uint8)
        call = _MlCall.from_buffer_copy(template)
        call.out, call.best, call.work, call.max_rows = (
            _addr(scores),
            _addr(best),
            _addr(space),
            rows,
        )
        status = core.lib.onyx_linear_chain_small(ctypes.byref(call), x.tobytes(), rows)
        core.check(status, "LinearChain")
        return best, scores


def linear_chain(*args, **kwargs) -> LinearChain | None:
    """A LinearChain (arguments as its constructor's), or None without the library."""
    return LinearChain(*args, **kwargs) if core.lib is not None else None


def bins_one_hot(cols: np.ndarray, edges: np.ndarray, ones: np.ndarray) -> np.ndarray | None:
    """BinsOneHot's one-hot rows [rows, n (k + 1)] float32 of cols [rows, n] against edges
    [n, k] (both float32 or both float64) with the ones column [rows, 1] float32 (trees.c's
    onyx_bins_one_hot: the chain's ArgMax rules); None without the library or for other
    layouts."""
    if (
        core.lib is None
        or cols.dtype not in _FLOATS
        or edges.dtype != cols.dtype
        or not (cols.flags.c_contiguous and edges.flags.c_contiguous and ones.flags.c_contiguous)
    ):
        return None
    (rows, n), k = cols.shape, edges.shape[1]
    out = np.empty((rows, n * (k + 1)), np.float32)
    one_hot = core.lib.onyx_bins_one_hot
    if out.size <= KEPT_BINS:
        one_hot = core.keeping_gil("onyx_bins_one_hot")
    status = one_hot(
        _input_addr(cols), _input_addr(edges), _input_addr(ones), rows, n, k,
        int(cols.dtype == np.float64), _addr(out),
    )  # fmt: skip
    core.check(status, "BinsOneHot")
    return out


def normalize_rows(x: np.ndarray, norm: str) -> np.ndarray | None:
    """Normalizer of float32 x [rows, C] (C-contiguous, C <= 128) by ``norm``: trees.c's
    onyx_normalize_rows, numpy's sums (its bits). None without the library or else."""
    if (
        core.lib is None
        or x.dtype != np.float32
        or x.ndim != 2
        or not 1 <= x.shape[1] <= 128
        or not x.flags.c_contiguous
    ):
        return None
    rows, c = x.shape
    space = np.empty(rows * c + c, np.float32)
    at = _addr(space)
    status = core.lib.onyx_normalize_rows(
        _input_addr(x), rows, c, NORMS[norm], at, at + 4 * rows * c
    )
    core.check(status, "Normalizer")
    return space[: rows * c].reshape(rows, c)


#: Elements up to which argmax_rows and sorted_position serve a call (larger: numpy's, which
#: lets the GIL go, so that other threads run meanwhile; trees.c packs sizes under 4096)
KEPT_ELEMENTS = 4095
#: Code points a string may have in sorted_position (trees.c's packing)
KEPT_WIDTH = 1 << 16
_SEARCH_KINDS = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int64): 2}


class _KeptOut(threading.local):
    """Each thread's output of argmax_rows and sorted_position, as a pointer ctypes passes
    as it is (taking an array's address, or converting typed arguments, cost more than
    numpy's whole call; x goes as its bytes)."""

    def __init__(self) -> None:
        self.out = np.empty(KEPT_ELEMENTS, np.intp)
        self.at = ctypes.c_void_p(_addr(self.out))


_kept_out = _KeptOut()


def argmax_rows(x: np.ndarray) -> np.ndarray | None:
    """x.argmax(axis=1) of a small float32 or float64 x [rows, cols >= 1] (trees.c's
    onyx_argmax_small, keeping the GIL); None without the library or else."""
    if core.lib is None or x.dtype not in _FLOATS or x.ndim != 2:
        return None
    rows, cols = x.shape
    if not cols or x.size >= KEPT_ELEMENTS:  # (elements, not each side: rows * cols of them)
        return None
    kept = _kept_out
    shape = rows << 13 | cols << 1 | (x.dtype.itemsize == 8)
    status = core.keeping_gil("onyx_argmax_small")(x.tobytes(), shape, kept.at)
    if status:
        core.check(status, "argmax")
    return kept.out[:rows].copy()


def sorted_position(keys: np.ndarray, x: np.ndarray) -> np.ndarray | None:
    """np.searchsorted(keys, x) of the sorted 1-D ``keys`` and a small x of their dtype
    (float32, float64, int64, or both str) (trees.c's onyx_search_small, keeping the GIL);
    None without the library or else."""
    if core.lib is None or x.size >= KEPT_ELEMENTS or keys.size >= KEPT_ELEMENTS:
        return None
    if not (keys.dtype.isnative and x.dtype.isnative):
        return None  # (big-endian '>U' strings: trees.c reads native code points)
    if keys.dtype.kind == "U" and x.dtype.kind == "U":
        kind, wk, wx = 3, keys.dtype.itemsize // 4, x.dtype.itemsize // 4
        if not (0 < wk < KEPT_WIDTH and 0 < wx < KEPT_WIDTH):
            return None  # (empty strings' dtype, <U0)
    elif keys.dtype == x.dtype and keys.dtype in _SEARCH_KINDS:
        kind, wk, wx = _SEARCH_KINDS[keys.dtype], 0, 0
    else:
        return None
    kept = _kept_out
    status = core.keeping_gil("onyx_search_small")(
        keys.tobytes(), keys.size | kind << 13 | wk << 15, x.tobytes(), x.size | wx << 13, kept.at
    )
    if status:
        core.check(status, "searchsorted")
    return kept.out[: x.size].reshape(x.shape).copy()


def bind(lib, isa: int) -> None:
    for small in (lib.onyx_argmax_small, lib.onyx_search_small):
        small.restype = ctypes.c_int  # (no argtypes: bytes, C ints and a pointer, as they are)
    lib.onyx_normalize_rows.restype = ctypes.c_int
    lib.onyx_normalize_rows.argtypes = [_P, _I64, _I64, _I64, _P, _P]
    lib.onyx_bins_one_hot.restype = ctypes.c_int
    lib.onyx_bins_one_hot.argtypes = [_P, _P, _P, _I64, _I64, _I64, _I64, _P]
    lib.onyx_linear_classify.restype = ctypes.c_int
    lib.onyx_linear_classify.argtypes = [_P, _I64, _I64, _P, _P, _I64, _I64, _P, _P]
    lib.onyx_forest_classify.restype = ctypes.c_int
    lib.onyx_forest_classify.argtypes = [_P, _P, _P, _I64, _I64, _P, _P, _I64, _I64, _P]
    lib.onyx_svm_classify.restype = ctypes.c_int
    lib.onyx_svm_classify.argtypes = [_P, _P, _I64, _P, _P, _P]
    lib.onyx_svm_coupling_pairs.restype = ctypes.c_int
    lib.onyx_svm_coupling_pairs.argtypes = [_P, _P, _P, _I64, _I64, _I64, _P, _P, _P, _P]
    lib.onyx_svm_coupling.restype = ctypes.c_int
    lib.onyx_svm_coupling.argtypes = [_P, _P, _I64, _I64, _P, _P]
    lib.onyx_forest_scores.restype = ctypes.c_int
    lib.onyx_forest_scores.argtypes = [_P, _P, _P, _I64, _I64, _P]
    lib.forest_descend_range = range_of(lib, "forest_descend")
    lib.forest_sum_range = range_of(lib, "forest_sum")


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
