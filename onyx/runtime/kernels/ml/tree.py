"""Tree ensembles: TreeEnsemble (v5), TreeEnsembleClassifier and TreeEnsembleRegressor (v1, v3, v5).

Every encoding is compiled into one flat *forest*: each node (interior or leaf) is a state, a
leaf loops onto itself, and all rows of all trees descend together, one vectorized gather per
level, over blocks of rows small enough to stay in cache. The leaves reached are then looked up
in a dense [state, target] weight table and aggregated over the trees.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from ....utils import unique
from ... import native
from ...native import trees as native_trees
from ...registry import array_attributes, op
from ..derived import from_attributes, prepared
from ._common import (
    as_2d,
    class_labels,
    logistic,
    probit,
    regression_transform,
)
from ._common import post_transform as apply_transform

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER, LEAF = range(8)
MODES = {
    "BRANCH_LEQ": LEQ,
    "BRANCH_LT": LT,
    "BRANCH_GTE": GTE,
    "BRANCH_GT": GT,
    "BRANCH_EQ": EQ,
    "BRANCH_NEQ": NEQ,
    "BRANCH_MEMBER": MEMBER,
    "LEAF": LEAF,
}
COMPARE = {
    LEQ: np.less_equal,
    LT: np.less,
    GTE: np.greater_equal,
    GT: np.greater,
    EQ: np.equal,
    NEQ: np.not_equal,
}
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
_BLOCK = 1 << 18  # (rows x trees) per block: the working set stays in cache


class Forest:
    """A tree ensemble's nodes as arrays of states. (A plain class: a dataclass compiles its
    methods when the module is imported, ~0.6 ms of a tree model's cold start.)"""

    def __init__(
        self,
        roots: np.ndarray,  # state of each tree's root
        feature: np.ndarray,  # [S] feature index (0 at leaves)
        threshold: np.ndarray,  # [S]
        mode: np.ndarray,  # [S] uint8, LEAF at leaves
        true_child: np.ndarray,  # [S] (a leaf points to itself)
        false_child: np.ndarray,  # [S]
        tracks_true: np.ndarray,  # [S] bool: NaN takes the true branch
        depth: int,  # longest root-to-leaf path
        member_sets: list[np.ndarray] | None = None,  # per BRANCH_MEMBER state, in order
    ):
        self.roots, self.feature, self.threshold, self.mode = roots, feature, threshold, mode
        self.true_child, self.false_child, self.tracks_true = true_child, false_child, tracks_true
        self.depth, self.member_sets = depth, member_sets
        self.tables: dict = {}  # compute dtype -> _FastTables
        self.votes: dict = {}  # id(has) -> (has, every leaf votes)

    @property
    def n_trees(self) -> int:
        return len(self.roots)

    # Facts a forest compiled once per node (see from_attributes) answers on every call.
    @cached_property
    def max_feature(self) -> int:
        return int(self.feature.max(initial=0))

    @cached_property
    def float32_thresholds(self) -> bool:
        """Every threshold is a float32 value (a FLOATS attribute read as doubles): then
        comparing float32 rows in float32 decides as comparing them in double does."""
        t = self.threshold
        return t.dtype == np.float32 or bool((t.astype(np.float32) == t).all())

    @cached_property
    def all_fast(self) -> bool:
        """Every split is <=, <, >= or >: the _FastTables descent applies."""
        return bool(np.isin(self.mode, (LEQ, LT, GTE, GT, LEAF)).all())

    def every_leaf_votes(self, has: np.ndarray) -> bool:
        """Whether every leaf has a weight for every target in ``has`` (a predictor's [S, C]
        table, kept with its forest: a check over all states, as long as the descent)."""
        known = self.votes.get(id(has))
        if known is None or known[0] is not has:
            known = self.votes[id(has)] = (has, bool(has[self.mode == LEAF].all()))
        return known[1]

    def every_row_votes(self, has: np.ndarray) -> bool:
        """Whether every row gets a vote for every target in ``has``: each target has a tree
        all of whose leaves vote for it (a gradient-boosted model: a tree per class and round).
        Computed once, from which tree each state belongs to."""
        if self.every_leaf_votes(has):
            return True
        owner = np.full(len(self.mode), -1, np.int64)
        owner[self.roots] = np.arange(self.n_trees)
        inner = self.mode != LEAF
        for _ in range(self.depth):
            known = np.flatnonzero((owner >= 0) & inner)
            owner[self.true_child[known]] = owner[known]
            owner[self.false_child[known]] = owner[known]
        leaves = np.flatnonzero((owner >= 0) & ~inner)
        votes = np.zeros((self.n_trees, has.shape[1]), np.int64)
        np.add.at(votes, owner[leaves], has[leaves])
        n_leaves = np.bincount(owner[leaves], minlength=self.n_trees)
        return bool((votes == n_leaves[:, None]).any(axis=0).all())

    def fast_tables(self, dtype) -> _FastTables:
        tables = self.tables.get(dtype)
        if tables is None:
            tables = self.tables[dtype] = _FastTables(self, dtype)
        return tables


def _depth(roots, true_child, false_child, leaf) -> int:
    """Levels to descend, by a vectorized breadth-first walk (one step per level)."""
    frontier, depth = unique(roots), 0
    while True:
        frontier = frontier[~leaf[frontier]]
        if frontier.size == 0:
            return depth
        depth += 1
        if depth > len(leaf):
            raise ValueError("tree ensemble: the node links contain a cycle")
        frontier = unique(np.concatenate([true_child[frontier], false_child[frontier]]))


#: mode name (str or the bytes of a STRINGS attribute) -> code
_MODE_CODES = {**MODES, **{name.encode(): code for name, code in MODES.items()}}


def mode_codes(modes) -> np.ndarray:
    if isinstance(modes, np.ndarray) and modes.dtype.kind in "iu":  # TreeEnsemble v5: uint8 tensor
        return modes.astype(np.uint8)
    # a dict lookup per node: np.unique over the strings took 1 ms a tree, and an
    # IsolationForest has one ensemble per tree
    try:
        return np.fromiter((_MODE_CODES[m] for m in modes), np.uint8, count=len(modes))
    except KeyError as e:
        name = e.args[0].decode() if isinstance(e.args[0], bytes) else e.args[0]
        raise ValueError(f"tree ensemble: unknown node mode {name!r}") from None


def _floats(values) -> np.ndarray:
    """A FLOATS attribute (float32), or a `*_as_tensor` array as it is."""
    if isinstance(values, np.ndarray):
        return values.reshape(-1)
    return np.asarray(values if values is not None else [], np.float32)


def _pick(floats, tensor, dtype=np.float32) -> np.ndarray | None:
    """An attribute given either as FLOATS or as its double `*_as_tensor` twin."""
    if tensor is not None:
        return np.asarray(tensor).reshape(-1)
    if floats is not None:
        return np.asarray(floats, dtype=dtype)
    return None


class _NodeIndex:
    """(tree id, node id) -> position in the nodes_* attributes."""

    def __init__(self, treeids, nodeids):
        self.width = int(nodeids.max()) + 1 if nodeids.size else 1
        key = treeids * self.width + nodeids
        self.order = np.argsort(key, kind="stable")
        self.keys = key[self.order]

    def __call__(self, treeids, nodeids) -> np.ndarray:
        key = np.asarray(treeids, np.int64) * self.width + np.asarray(nodeids, np.int64)
        i = np.minimum(np.searchsorted(self.keys, key), len(self.keys) - 1)
        if not np.array_equal(self.keys[i], key) or np.any(nodeids >= self.width):
            raise ValueError("tree ensemble: a (tree id, node id) reference names no node")
        return self.order[i]


def _forest_v1(
    treeids, nodeids, featureids, values, modes, truenodeids, falsenodeids, tracks_true
) -> tuple[Forest, _NodeIndex]:
    """Compile the TreeEnsembleClassifier/Regressor encoding (v1-v5); returns the node index too."""
    treeids = np.asarray(treeids, np.int64)
    nodeids = np.asarray(nodeids, np.int64)
    n = len(nodeids)
    mode = mode_codes(modes)
    leaf = mode == LEAF
    index = _NodeIndex(treeids, nodeids)
    states = np.arange(n)
    true_child, false_child = states.copy(), states.copy()
    inner = ~leaf
    true_child[inner] = index(treeids[inner], np.asarray(truenodeids, np.int64)[inner])
    false_child[inner] = index(treeids[inner], np.asarray(falsenodeids, np.int64)[inner])
    # A root is the node of its tree that no other node points to.
    referenced = np.zeros(n, bool)
    referenced[true_child[inner]] = referenced[false_child[inner]] = True
    roots = np.flatnonzero(~referenced)
    roots = roots[np.argsort(treeids[roots], kind="stable")]
    tracks = np.zeros(n, bool)
    if tracks_true is not None and len(tracks_true):  # (a list or an array)
        tracks[:] = np.asarray(tracks_true, bool)
    feature = np.where(leaf, 0, np.asarray(featureids, np.int64))
    forest = Forest(
        roots=roots,
        feature=feature,
        threshold=np.asarray(values).reshape(-1)[:n],
        mode=mode,
        true_child=true_child,
        false_child=false_child,
        tracks_true=tracks,
        depth=_depth(roots, true_child, false_child, leaf),
    )
    return forest, index


def _forest_v5(
    tree_roots,
    featureids,
    splits,
    modes,
    truenodeids,
    trueleafs,
    falsenodeids,
    falseleafs,
    tracks_true,
    membership_values,
    n_leaves,
) -> Forest:
    """Compile TreeEnsemble's encoding: interior nodes are states [0, n), leaves [n, n + L)."""
    n = len(featureids)
    total = n + n_leaves
    true_child = np.arange(total)
    false_child = np.arange(total)
    true_child[:n] = np.asarray(truenodeids, np.int64) + n * np.asarray(trueleafs, np.int64)
    false_child[:n] = np.asarray(falsenodeids, np.int64) + n * np.asarray(falseleafs, np.int64)
    mode = np.full(total, LEAF, np.uint8)
    mode[:n] = mode_codes(np.asarray(modes).reshape(-1))
    splits = np.asarray(splits).reshape(-1)
    threshold = np.zeros(total, splits.dtype)
    threshold[:n] = splits
    feature = np.zeros(total, np.int64)
    feature[:n] = featureids
    tracks = np.zeros(total, bool)
    if tracks_true is not None and len(tracks_true):  # (a list or an array)
        tracks[:n] = np.asarray(tracks_true, bool)
    member_sets = None
    n_member = int(np.count_nonzero(mode == MEMBER))
    if n_member:
        # One set per BRANCH_MEMBER node, in node order, each closed by a NaN.
        values = np.asarray(membership_values, np.float64).reshape(-1)
        member_sets = np.split(values, np.flatnonzero(np.isnan(values)) + 1)[:n_member]
        member_sets = [s[~np.isnan(s)] for s in member_sets]
    roots = np.asarray(tree_roots, np.int64)
    return Forest(
        roots=roots,
        feature=feature,
        threshold=threshold,
        mode=mode,
        true_child=true_child,
        false_child=false_child,
        tracks_true=tracks,
        depth=_depth(roots, true_child, false_child, mode == LEAF),
        member_sets=member_sets,
    )


# ---------------------------------------------------------------------------------------------
# Descent


def _compute_dtype(x: np.ndarray, threshold: np.ndarray):
    # As C++ compares them: a double on either side makes it a double comparison, else float.
    return np.float64 if np.float64 in (x.dtype, threshold.dtype) else np.float32


class _FastTables:
    """Tables for ensembles whose splits are all <=, <, >=, >: each becomes `x <= t'` by
    adjusting the threshold (x < t  <=>  x <= prev(t)) and swapping the children (>=, >).

    Tables are indexed by 2*state; child[2*s + b] is 2*(next state) for outcome b of `x <= t'`.
    """

    def __init__(self, f: Forest, dtype):
        s = len(f.mode)
        thr = f.threshold.astype(dtype)
        strict = (f.mode == LT) | (f.mode == GTE)
        thr = np.where(strict, np.nextafter(thr, dtype(-np.inf)), thr)
        swapped = (f.mode == GTE) | (f.mode == GT)
        # (int64, as the native descent reads them; what numpy takes as indices too)
        self.feature = np.zeros(2 * s, np.int64)
        self.feature[::2] = f.feature
        self.threshold = np.zeros(2 * s, dtype)
        self.threshold[::2] = thr
        self.roots2 = np.ascontiguousarray(2 * f.roots, np.int64)
        self.child = np.empty(2 * s, np.int64)
        self.child[1::2] = 2 * np.where(swapped, f.false_child, f.true_child)
        self.child[::2] = 2 * np.where(swapped, f.true_child, f.false_child)
        # A NaN makes every comparison false; send it where the spec says instead.
        self.nan_outcome = np.zeros(2 * s, bool)
        self.nan_outcome[::2] = f.tracks_true ^ swapped
        self.any_nan_outcome = bool(self.nan_outcome.any())


def _descend_fast(t: _FastTables, f: Forest, x: np.ndarray) -> np.ndarray:
    nb, nf = x.shape
    has_nan = t.any_nan_outcome and bool(np.isnan(x).any())
    states = native.forest_descend(x, t, t.roots2, f.depth, has_nan)  # (trees.c)
    if states is not None:
        return states
    flat = x.reshape(-1)
    row_offset = (np.arange(nb, dtype=np.intp) * nf)[:, None]
    s2 = np.repeat((2 * f.roots)[None, :], nb, axis=0)
    fi = np.empty_like(s2)
    xv = np.empty(s2.shape, x.dtype)
    thr = np.empty(s2.shape, x.dtype)
    b = np.empty(s2.shape, bool)
    for _ in range(f.depth):
        np.take(t.feature, s2, out=fi)
        fi += row_offset
        np.take(flat, fi, out=xv)
        np.take(t.threshold, s2, out=thr)
        np.less_equal(xv, thr, out=b)
        if has_nan:
            b = np.where(np.isnan(xv), t.nan_outcome[s2], b)
        s2 += b
        np.take(t.child, s2, out=s2)
    return s2 >> 1


def _membership(f: Forest, states: np.ndarray, xv: np.ndarray) -> np.ndarray:
    """Whether each value lies in the set of its BRANCH_MEMBER state (vectorized over pairs)."""
    member_states = np.flatnonzero(f.mode == MEMBER)
    values = unique(np.concatenate(f.member_sets)) if f.member_sets else np.zeros(0)
    if values.size == 0:
        return np.zeros(xv.shape, bool)
    # Key each (set, value) pair by set number and the value's rank among all member values.
    keys = unique(
        np.concatenate(
            [k * values.size + np.searchsorted(values, s) for k, s in enumerate(f.member_sets)]
        )
    )
    set_of = np.searchsorted(member_states, states)
    rank = np.minimum(np.searchsorted(values, xv), values.size - 1)
    query = set_of * values.size + rank
    found = np.searchsorted(keys, query)
    found = keys[np.minimum(found, keys.size - 1)] == query
    return found & (values[rank] == xv)


def _descend_general(f: Forest, x: np.ndarray) -> np.ndarray:
    """Any mix of modes (==, !=, set membership): evaluate each node's own comparison."""
    nb, nf = x.shape
    flat = x.reshape(-1)
    row_offset = (np.arange(nb, dtype=np.intp) * nf)[:, None]
    threshold = f.threshold.astype(x.dtype)
    s = np.repeat(f.roots[None, :], nb, axis=0)
    for _ in range(f.depth):
        xv = flat[f.feature[s] + row_offset]
        thr, mode = threshold[s], f.mode[s]
        cond = np.zeros(s.shape, bool)
        for code, compare in COMPARE.items():
            at = mode == code
            if at.any():
                cond[at] = compare(xv[at], thr[at])
        at = mode == MEMBER
        if at.any():
            cond[at] = _membership(f, s[at], xv[at])
        cond |= f.tracks_true[s] & np.isnan(xv)
        s = np.where(cond, f.true_child[s], f.false_child[s])
    return s


def _leaves(f: Forest, x: np.ndarray):
    """Yield (row slice, reached leaf state [rows, trees]) over blocks of rows."""
    x = as_2d(x)
    dtype = _compute_dtype(x, f.threshold)
    x = np.ascontiguousarray(x, dtype=dtype)
    if f.max_feature >= x.shape[1]:
        raise ValueError(f"tree ensemble: a node reads feature {f.max_feature}, X has {x.shape[1]}")
    fast = f.all_fast
    tables = f.fast_tables(dtype) if fast else None
    block = max(1, _BLOCK // max(1, f.n_trees))
    for start in range(0, x.shape[0], block):
        xb = x[start : start + block]
        states = _descend_fast(tables, f, xb) if fast else _descend_general(f, xb)
        yield slice(start, start + len(xb)), states


def _aggregate(f: Forest, x, weights, has, aggregate: str) -> tuple[np.ndarray, np.ndarray]:
    """Scores [N, C] and whether any tree gave each target a weight [N, C].

    weights/has: [S, C] tables of the leaf weights and their presence. Trees are accumulated one
    after the other in the weights' precision (float32 unless given as doubles), the order and
    precision onnxruntime uses, so that near-ties pick the same class.
    """
    n = as_2d(x).shape[0]
    n_targets = weights.shape[1]
    scores = np.zeros((n, n_targets), weights.dtype)
    present = np.zeros((n, n_targets), bool)
    every_leaf_votes = f.every_row_votes(has)
    combine = {"MIN": np.fmin, "MAX": np.fmax}.get(aggregate, np.add)
    if aggregate in ("MIN", "MAX"):
        weights = np.where(has, weights, np.nan)  # fmin/fmax skip the NaN of a missing weight
    if f.n_trees == 0:
        return scores, present
    for rows, states in _leaves(f, x):
        acc = native.forest_sum(states, weights) if combine is np.add else None
        if acc is None:
            acc = weights[states[:, 0]]
            for t in range(1, states.shape[1]):
                combine(acc, weights[states[:, t]], out=acc)
        scores[rows] = acc
        present[rows] = True if every_leaf_votes else has[states].any(axis=1)
    if not every_leaf_votes:  # (else every entry is present: nothing to clear)
        scores[~present] = 0.0
    if aggregate == "AVERAGE":
        scores /= max(f.n_trees, 1)
    return scores, present


class _Sums:
    """_aggregate for one predictor's weight tables: x -> (scores, present), present None
    when every target of every row has a vote. A small batch of a forest whose splits are all
    <, <=, >, >= and whose every leaf votes for every target takes native.ForestSums, set up
    once per compute dtype: the same descent and sums, without the per-call set-up."""

    def __init__(self, forest: Forest, weights, has, aggregate: str):
        self.forest, self.weights, self.has, self.aggregate = forest, weights, has, aggregate
        self.simple = (
            aggregate in ("SUM", "AVERAGE")
            and forest.n_trees > 0
            and forest.all_fast
            and forest.every_row_votes(has)
        )
        self.native: dict = {}  # x's dtype -> native.ForestSums or None

    def __call__(self, x) -> tuple[np.ndarray, np.ndarray | None]:
        if self.simple and x.__class__ is np.ndarray and x.ndim == 2:
            sums = self._fitting_sums(x)
            if sums is not None:
                scores = sums(x)
                if self.aggregate == "AVERAGE":
                    scores /= self.forest.n_trees
                return scores, None
        return _aggregate(self.forest, x, self.weights, self.has, self.aggregate)

    def classify(self, x, base: np.ndarray, transform: str):
        """(best class, scores) of a classifier's SUM, its ``base`` added and ``transform``
        applied, in one native call (NONE or SOFTMAX, float32 weights, every leaf voting for
        every class); None where __call__ and numpy serve x."""
        code = self._finish_code(base, _NATIVE_FINISH.get(transform))
        if code is None or x.__class__ is not np.ndarray or x.ndim != 2:
            return None
        sums = self._fitting_sums(x)
        return None if sums is None else sums.classify(x, base, code)

    def small_classifier(self, x: np.ndarray, base: np.ndarray, transform: str | int):
        """The native.SmallCall serving classify(x, base, transform) for a few rows of x's
        dtype and width in one short call (an int transform: a FOREST_BINARY rule), or None
        where classify's conditions fail."""
        code = transform if isinstance(transform, int) else _NATIVE_FINISH.get(transform)
        code = self._finish_code(base, code)
        if code is None or self.forest.max_feature >= x.shape[1]:
            return None
        sums = self.native.get(x.dtype, _UNSET)
        if sums is _UNSET:
            sums = self._native_sums(x.dtype)
        return None if sums is None else sums.small(x.shape[1], base, code)

    def _finish_code(self, base: np.ndarray, code: int | None) -> int | None:
        """``code`` where the native sums can finish this ensemble (every leaf voting for
        every class, summed, float32 weights, ``base`` no longer than their classes), else None."""
        if (
            code is None
            or not self.simple
            or self.aggregate != "SUM"
            or self.weights.dtype != np.float32
            or len(base) > self.weights.shape[1]
        ):
            return None
        return code

    def _fitting_sums(self, x: np.ndarray):
        """The native.ForestSums that serves 2-D x (kept per dtype), or None where it does not."""
        sums = self.native.get(x.dtype, _UNSET)
        if sums is _UNSET:
            sums = self._native_sums(x.dtype)
        if sums is None or not sums.fits(x) or self.forest.max_feature >= x.shape[1]:
            return None
        return sums

    def _native_sums(self, dtype: np.dtype):
        """The native.ForestSums for rows of ``dtype``, kept; None where the descent compares
        in another type (or without the library)."""
        f = self.forest
        if dtype == np.float32 and f.float32_thresholds:
            compute = dtype
        else:
            compute = np.dtype(_compute_dtype(np.empty(0, dtype), f.threshold))
        sums = None
        if compute == dtype:
            t = f.fast_tables(dtype.type)
            sums = native.forest_sums(t, t.roots2, f.depth, self.weights)
        if sums is not None or native.available():  # (not while switched off)
            self.native[dtype] = sums
        return sums


_UNSET = object()
#: post_transforms trees.c's onyx_forest_classify applies
_NATIVE_FINISH = {"NONE": 0, "SOFTMAX": 1}


def _all_present(present, scores) -> np.ndarray:
    return np.ones(scores.shape, bool) if present is None else present


def _weight_table(n_states, targets, positions, weights, n_targets, aggregate):
    weights = np.asarray(weights)
    dtype = np.float64 if weights.dtype == np.float64 else np.float32
    table = np.zeros((n_states, n_targets), dtype)
    has = np.zeros((n_states, n_targets), bool)
    targets = np.asarray(targets, np.int64)
    if aggregate in ("MIN", "MAX"):
        # Several weights on one leaf and target each count as a separate vote.
        table[:] = np.inf if aggregate == "MIN" else -np.inf
        (np.minimum if aggregate == "MIN" else np.maximum).at(table, (positions, targets), weights)
    else:
        np.add.at(table, (positions, targets), weights.astype(dtype))
    has[positions, targets] = True
    table[~has] = 0.0
    return table, has


# ---------------------------------------------------------------------------------------------
# TreeEnsemble (v5)


@op("TreeEnsemble", since=5, domain="ai.onnx.ml")
@prepared(lambda attrs: _tree_ensemble_model(**attrs))
def tree_ensemble(
    x,
    *,
    aggregate_function=1,
    post_transform=0,
    tree_roots,
    nodes_hitrates=None,
    nodes_missing_value_tracks_true=None,
    nodes_modes,
    leaf_weights,
    leaf_targetids,
    nodes_falsenodeids,
    n_targets=None,
    nodes_trueleafs,
    nodes_featureids,
    nodes_splits,
    nodes_falseleafs,
    nodes_truenodeids,
    membership_values=None,
):
    attrs = _locals_but_x(locals())
    return from_attributes(tuple(attrs.values()), lambda: _tree_ensemble_model(**attrs))(x)


def _tree_ensemble_model(
    *,
    aggregate_function,
    post_transform,
    tree_roots,
    nodes_modes,
    leaf_weights,
    leaf_targetids,
    nodes_falsenodeids,
    n_targets,
    nodes_trueleafs,
    nodes_featureids,
    nodes_splits,
    nodes_falseleafs,
    nodes_truenodeids,
    membership_values,
    nodes_missing_value_tracks_true,
    **_,
):
    """TreeEnsemble's attributes compiled into a predictor x -> scores."""
    leaf_weights = np.asarray(leaf_weights).reshape(-1)
    forest = _forest_v5(
        tree_roots,
        nodes_featureids,
        nodes_splits,
        nodes_modes,
        nodes_truenodeids,
        nodes_trueleafs,
        nodes_falsenodeids,
        nodes_falseleafs,
        nodes_missing_value_tracks_true,
        membership_values,
        len(leaf_weights),
    )
    aggregate = AGGREGATES[aggregate_function]
    n_targets = (
        int(n_targets) if n_targets is not None else int(max(leaf_targetids, default=-1)) + 1
    )
    n_nodes = len(nodes_featureids)
    positions = n_nodes + np.arange(len(leaf_weights))
    weights, has = _weight_table(
        n_nodes + len(leaf_weights), leaf_targetids, positions, leaf_weights, n_targets, aggregate
    )

    sums = _Sums(forest, weights, has, aggregate)

    def predict(x):
        scores, _ = sums(x)
        return regression_transform(scores, post_transform).astype(x.dtype)

    return predict


# ---------------------------------------------------------------------------------------------
# TreeEnsembleRegressor (v1, v3; v5 is the deprecated v3)

#: The FLOATS, STRINGS and INTS attributes the v1/v3 kernels take as arrays (registry.array_attributes), each
#: in the dtype their list became: thresholds as np.asarray(list) makes them (float64; v3's
#: _pick narrows either to float32), weights and base values float32 (_floats, _pick), the
#: modes as their bytes, the ids int64 (np.asarray(list, np.int64) each).
_ARRAYS = {
    "nodes_values": np.float64,
    "target_weights": np.float32,
    "class_weights": np.float32,
    "base_values": np.float32,
    "nodes_hitrates": np.float32,  # (read by none: as an array it costs nothing)
    "nodes_modes": object,  # (their bytes: mode_codes reads either)
    **dict.fromkeys(
        (
            "nodes_treeids",
            "nodes_nodeids",
            "nodes_featureids",
            "nodes_truenodeids",
            "nodes_falsenodeids",
            "nodes_missing_value_tracks_true",
            "class_treeids",
            "class_nodeids",
            "class_ids",
            "target_treeids",
            "target_nodeids",
            "target_ids",
        ),
        np.int64,
    ),  # fmt: skip
}


def _regressor(x, attrs: dict) -> np.ndarray:
    """The regressor of these attributes (compiled once per node) applied to x."""
    return from_attributes(tuple(attrs.values()), lambda: _regressor_model(**_picked(attrs)))(x)


def _regressor_model(
    *,
    aggregate_function,
    post_transform,
    n_targets,
    nodes_nodeids,
    target_nodeids,
    nodes_treeids,
    nodes_featureids,
    nodes_values,
    target_weights,
    nodes_falsenodeids,
    base_values,
    nodes_missing_value_tracks_true,
    nodes_modes,
    nodes_truenodeids,
    target_treeids,
    target_ids,
    **_,
):
    forest, index = _forest_v1(
        nodes_treeids,
        nodes_nodeids,
        nodes_featureids,
        nodes_values,
        nodes_modes,
        nodes_truenodeids,
        nodes_falsenodeids,
        nodes_missing_value_tracks_true,
    )
    target_ids = np.asarray(target_ids if target_ids is not None else [], np.int64)
    n_targets = int(n_targets) if n_targets is not None else int(target_ids.max(initial=-1)) + 1
    positions = index(np.asarray(target_treeids, np.int64), np.asarray(target_nodeids, np.int64))
    weights, has = _weight_table(
        len(forest.mode),
        target_ids,
        positions,
        _floats(target_weights),
        n_targets,
        aggregate_function,
    )
    if n_targets == 1:
        # onnxruntime's single-target path lets a leaf without a weight vote 0 (matters to MIN/MAX).
        has[forest.mode == LEAF] = True
    base = None
    if base_values is not None and len(base_values):
        base = _floats(base_values).astype(weights.dtype)  # (scores come in this dtype)

    sums = _Sums(forest, weights, has, aggregate_function)

    def predict(x):
        scores, _ = sums(x)
        if base is not None:
            scores += base
        return regression_transform(scores, post_transform).astype(np.float32)

    return predict


@op("TreeEnsembleRegressor", since=1, domain="ai.onnx.ml")
@array_attributes(**_ARRAYS)
@prepared(lambda attrs: _regressor_model(**_picked(attrs)))
def tree_ensemble_regressor(
    x,
    *,
    aggregate_function="SUM",
    post_transform="NONE",
    n_targets=None,
    nodes_nodeids=None,
    target_nodeids=None,
    nodes_treeids=None,
    nodes_featureids=None,
    nodes_values=None,
    target_weights=None,
    nodes_falsenodeids=None,
    nodes_hitrates=None,
    base_values=None,
    nodes_missing_value_tracks_true=None,
    nodes_modes=None,
    nodes_truenodeids=None,
    target_treeids=None,
    target_ids=None,
):
    return _regressor(x, _locals_but_x(locals()))


@op("TreeEnsembleRegressor", since=3, domain="ai.onnx.ml")
@array_attributes(**_ARRAYS)
@prepared(lambda attrs: _regressor_model(**_picked(attrs)))
def tree_ensemble_regressor_3(
    x,
    *,
    aggregate_function="SUM",
    post_transform="NONE",
    n_targets=None,
    nodes_nodeids=None,
    target_nodeids=None,
    nodes_treeids=None,
    nodes_featureids=None,
    nodes_values=None,
    nodes_values_as_tensor=None,
    target_weights=None,
    target_weights_as_tensor=None,
    nodes_falsenodeids=None,
    nodes_hitrates=None,
    nodes_hitrates_as_tensor=None,
    base_values=None,
    base_values_as_tensor=None,
    nodes_missing_value_tracks_true=None,
    nodes_modes=None,
    nodes_truenodeids=None,
    target_treeids=None,
    target_ids=None,
):
    return _regressor(x, _locals_but_x(locals()))


def _locals_but_x(names: dict) -> dict:
    return {k: v for k, v in names.items() if k != "x"}


def _picked(attrs: dict) -> dict:
    """attrs with each FLOATS attribute replaced by its double `*_as_tensor` twin if given."""
    out = {k: v for k, v in attrs.items() if not k.endswith("_as_tensor")}
    for name in ("nodes_values", "target_weights", "class_weights", "base_values"):
        if name + "_as_tensor" in attrs:
            out[name] = _pick(attrs[name], attrs[name + "_as_tensor"])
    return out


# ---------------------------------------------------------------------------------------------
# TreeEnsembleClassifier (v1, v3; v5 is the deprecated v3)


def _classifier(x, attrs: dict):
    """The classifier of these attributes (compiled once per node) applied to x."""
    return from_attributes(tuple(attrs.values()), lambda: _classifier_model(**_picked(attrs)))(x)


def _classifier_model(
    *,
    post_transform,
    classlabels_int64s,
    classlabels_strings,
    nodes_nodeids,
    nodes_treeids,
    nodes_featureids,
    nodes_values,
    nodes_falsenodeids,
    base_values,
    nodes_missing_value_tracks_true,
    nodes_modes,
    nodes_truenodeids,
    class_treeids,
    class_nodeids,
    class_ids,
    class_weights,
    **_,
):
    labels = class_labels(classlabels_int64s, classlabels_strings)
    forest, index = _forest_v1(
        nodes_treeids,
        nodes_nodeids,
        nodes_featureids,
        nodes_values,
        nodes_modes,
        nodes_truenodeids,
        nodes_falsenodeids,
        nodes_missing_value_tracks_true,
    )
    class_ids = np.asarray(class_ids if class_ids is not None else [], np.int64)
    class_weights = _floats(class_weights)
    n_classes = len(labels)
    positions = index(np.asarray(class_treeids, np.int64), np.asarray(class_nodeids, np.int64))
    weights, has = _weight_table(
        len(forest.mode), class_ids, positions, class_weights, max(n_classes, 1), "SUM"
    )
    binary_case = unique(class_ids).size == 1
    base = _floats(base_values).astype(weights.dtype)  # (scores come in this dtype)

    sums = _Sums(forest, weights, has, "SUM")
    base32 = np.ascontiguousarray(base) if base.dtype == np.float32 else None
    # two classes, every vote for class 0 (skl2onnx's binary forests): its column's sums and
    # _binary's rule for them in one native call (_binary's numpy steps cost a one-row call
    # far more than the trees)
    binary_rule = None
    if n_classes == 2 and class_ids.size and not class_ids.any() and base32 is not None:
        if len(base) <= 1 and post_transform != "PROBIT":
            rules = dict(zip([(True, False), (True, True), (False, True), (False, False)],
                             native_trees.FOREST_BINARY))  # fmt: skip
            # (weights all >= 0, LOGISTIC): as _binary's branches
            binary_rule = rules[bool(np.all(class_weights >= 0)), post_transform == "LOGISTIC"]
            single = _Sums(forest, np.ascontiguousarray(weights[:, :1]), has[:, :1].copy(), "SUM")

    small: dict = {}  # x's (dtype, width) -> its native.SmallCall (None: none serves it)
    last = [None, -1, None]  # the last x's dtype and width, and small's entry for them
    binary_small: dict = {}  # as small, for binary_rule's calls
    plain = labels.dtype == np.int64 and np.array_equal(labels, np.arange(n_classes))

    def predict(x):
        if binary_rule is not None and x.__class__ is np.ndarray and x.ndim == 2:
            call = binary_small.get((x.dtype, x.shape[1]), _UNSET)
            if call is _UNSET:
                call = binary_small[x.dtype, x.shape[1]] = single.small_classifier(
                    x, base32, binary_rule
                )
            if call is not None and x.shape[0] <= call.max_rows and native.available():
                scores, best = call(x)
                return (best if plain else labels[best]), scores
        if n_classes > 2 and base32 is not None:
            if x.__class__ is np.ndarray and x.ndim == 2:
                if x.dtype is not last[0] or x.shape[1] != last[1]:  # (else: last[2] serves)
                    call = small.get((x.dtype, x.shape[1]), _UNSET)
                    if call is _UNSET:
                        call = small[x.dtype, x.shape[1]] = sums.small_classifier(
                            x, base32, post_transform
                        )
                    last[:] = x.dtype, x.shape[1], call
                call = last[2]
                if call is not None and x.shape[0] <= call.max_rows and native.available():
                    scores, best = call(x)
                    return (best if plain else labels[best]), scores
            fast = sums.classify(x, base32, post_transform)
            if fast is not None:
                return labels[fast[0]], fast[1]
        scores, present = sums(x)
        if n_classes > 2 or n_classes < 2:
            if len(base):
                scores[:, : len(base)] += base
            if present is not None:
                present[:, : len(base)] = True
                # Classes no tree voted for (and without a base value) cannot win.
                scores_of_voted = np.where(present, scores, -np.inf)
            else:
                scores_of_voted = scores
            best = scores_of_voted.argmax(axis=1)
            scores = apply_transform(scores, post_transform)
            return labels[best], scores.astype(np.float32, copy=False)  # (scores are its own)
        present = _all_present(present, scores)
        return _binary(scores, present, base, labels, post_transform, binary_case, class_weights)

    return predict


def _binary(scores, present, base, labels, transform, binary_case, class_weights):
    """Two classes, following onnxruntime's conventions where the spec says nothing.

    A model may vote for a single class only: that score then decides, and the other column is
    derived from it (1 - p for non-negative weights, -s otherwise).
    """
    s0, s1 = scores[:, 0].copy(), scores[:, 1].copy()
    has0, has1 = present[:, 0], present[:, 1]
    if len(base) >= 2:
        # onnxruntime: with votes for class 1 it keeps base[1] + score0 and its negation
        # (it assumes base[0] == base[1]); otherwise both base values are added.
        s1 = np.where(has1, base[1] + s0, s1 + base[1])
        s0 = np.where(has1, -s1, s0 + base[0])
        two_columns = np.ones(len(s0), bool)
    else:
        if len(base) == 1:
            s0 = s0 + base[0]
        two_columns = has1.copy()
    # onnxruntime reports 0 for a class no tree voted for, whatever its base value.
    s0, s1 = np.where(has0, s0, 0.0), np.where(has1, s1, 0.0)
    positive = np.where(two_columns & has1, s1, s0)
    all_positive = bool(np.all(class_weights >= 0))
    win = positive > (0.5 if binary_case and all_positive else 0.0)
    if binary_case or labels.dtype == object:
        label = np.where(win, labels[1], labels[0]).astype(labels.dtype)
    else:  # onnxruntime answers 1 / 0 here, not the class labels
        label = win.astype(np.int64)

    z = np.zeros((len(s0), 2))
    both = np.stack([s0, s1], axis=1)
    z[two_columns] = apply_transform(both[two_columns], transform)
    one = ~two_columns
    if one.any():
        s = s0[one]
        if transform == "PROBIT":
            z[one, 0] = probit(s)
        elif binary_case and all_positive and transform == "LOGISTIC":
            z[one] = np.stack([1.0 - logistic(s), logistic(s)], axis=1)
        elif binary_case and all_positive:
            z[one] = np.stack([1.0 - s, s], axis=1)
        elif binary_case and transform == "LOGISTIC":
            z[one] = np.stack([logistic(-s), logistic(s)], axis=1)
        elif binary_case:
            z[one] = np.stack([-s, s], axis=1)
        else:
            z[one, 0] = s
    return label, z.astype(np.float32)


@op("TreeEnsembleClassifier", since=1, domain="ai.onnx.ml")
@array_attributes(**_ARRAYS)
@prepared(lambda attrs: _classifier_model(**_picked(attrs)))
def tree_ensemble_classifier(
    x,
    *,
    post_transform="NONE",
    classlabels_int64s=None,
    classlabels_strings=None,
    nodes_nodeids=None,
    nodes_treeids=None,
    nodes_featureids=None,
    nodes_values=None,
    nodes_falsenodeids=None,
    nodes_hitrates=None,
    base_values=None,
    nodes_missing_value_tracks_true=None,
    nodes_modes=None,
    nodes_truenodeids=None,
    class_treeids=None,
    class_nodeids=None,
    class_ids=None,
    class_weights=None,
):
    return _classifier(x, _locals_but_x(locals()))


@op("TreeEnsembleClassifier", since=3, domain="ai.onnx.ml")
@array_attributes(**_ARRAYS)
@prepared(lambda attrs: _classifier_model(**_picked(attrs)))
def tree_ensemble_classifier_3(
    x,
    *,
    post_transform="NONE",
    classlabels_int64s=None,
    classlabels_strings=None,
    nodes_nodeids=None,
    nodes_treeids=None,
    nodes_featureids=None,
    nodes_values=None,
    nodes_values_as_tensor=None,
    nodes_falsenodeids=None,
    nodes_hitrates=None,
    nodes_hitrates_as_tensor=None,
    base_values=None,
    base_values_as_tensor=None,
    nodes_missing_value_tracks_true=None,
    nodes_modes=None,
    nodes_truenodeids=None,
    class_treeids=None,
    class_nodeids=None,
    class_ids=None,
    class_weights=None,
    class_weights_as_tensor=None,
):
    return _classifier(x, _locals_but_x(locals()))
