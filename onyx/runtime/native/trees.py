"""Tree ensembles' descent and leaf sums (trees.c)."""

from __future__ import annotations

import ctypes

import numpy as np

from . import _core as core
from ._core import (
    _I64,
    _P,
    _PARALLEL_MACS,
    _addr,
    _element_cuts,
    _run,
    _ways,
    abi,
    range_of,
)


@abi("forest_task")
class _ForestTask(ctypes.Structure):
    _fields_ = [(name, _P) for name in ("x", "roots", "feature", "threshold", "child",
                                        "nan_outcome", "states")] + [
        (name, _I64) for name in ("nf", "trees", "depth", "is_double")
    ]  # fmt: skip


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
    task = _ForestTask(_addr(x), _addr(roots2), _addr(tables.feature), _addr(tables.threshold),
                       _addr(tables.child), _addr(tables.nan_outcome) if nan_rule else None,
                       _addr(states), x.shape[1], trees, depth,
                       int(x.dtype == np.float64))  # fmt: skip
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
    task = _ForestSumTask(_addr(states), _addr(weights), _addr(scores), trees, weights.shape[1],
                          int(weights.dtype == np.float64))  # fmt: skip
    _run(core.lib.forest_sum_range, task, _element_cuts(rows, 1, ways), ways)
    return scores


def bind(lib, isa: int) -> None:
    lib.forest_descend_range = range_of(lib, "forest_descend")
    lib.forest_sum_range = range_of(lib, "forest_sum")
