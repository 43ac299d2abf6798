"""SVMClassifier and SVMRegressor (libsvm's conventions: one-vs-one votes, Platt scaling and
pairwise coupling of the probabilities)."""

from __future__ import annotations

from functools import cached_property, reduce
from operator import add, mul

import numpy as np

from ... import native
from ...registry import array_attributes, op
from ..derived import from_attributes, prepared
from ._common import as_2d, class_labels, logistic, probit
from ._common import post_transform as apply_transform

ML = "ai.onnx.ml"


def _dot(x, sv):
    return np.matmul(x, sv.T)


def _sq_distance(x, sv):
    d = (x * x).sum(axis=1)[:, None] + (sv * sv).sum(axis=1)[None, :] - 2.0 * np.matmul(x, sv.T)
    d = np.maximum(d, 0.0)
    # the expansion makes inf - inf of an infinite feature: such rows take the direct sum, an
    # infinite distance (the RBF kernel 0, as onnxruntime computes it)
    odd = ~np.isfinite(x).all(axis=1)
    if odd.any():
        d[odd] = ((x[odd][:, None, :] - sv[None, :, :]) ** 2).sum(axis=2)
    return d


KERNELS = {
    "LINEAR": lambda x, sv, gamma, coef0, degree: _dot(x, sv),
    "POLY": lambda x, sv, gamma, coef0, degree: (gamma * _dot(x, sv) + coef0) ** degree,
    "RBF": lambda x, sv, gamma, coef0, degree: np.exp(-gamma * _sq_distance(x, sv)),
    "SIGMOID": lambda x, sv, gamma, coef0, degree: np.tanh(gamma * _dot(x, sv) + coef0),
}


def _kernel(kernel_type: str, kernel_params, x: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """K(x_n, v_m) for every row and vector, [N, M], in float64."""
    if kernel_type not in KERNELS:
        raise ValueError(f"SVM: unknown kernel_type {kernel_type!r}")
    gamma, coef0, degree = (list(kernel_params or []) + [0.0, 0.0, 0.0])[:3]
    return KERNELS[kernel_type](x, vectors, gamma, coef0, int(degree))


#: rows up to which the coupling runs row by row on Python floats: numpy's per-call cost made
#: one row's few hundred tiny operations 0.5 ms
_SCALAR_ROWS = 4
#: rows up to which trees.c's one-call path serves a classifier (more: numpy's products on
#: BLAS, which parallelize)
NATIVE_ROWS = 16
_UNSET = object()


def _pairwise_coupling(r: np.ndarray) -> np.ndarray:
    """Class probabilities from pairwise ones r[n, i, j] ~ P(i | i or j) (Wu, Lin & Weng 2004,
    method 2, as libsvm solves it): minimize p'Qp subject to sum(p) = 1, all rows at once.
    (trees.c's loops where the library is: the same operations in the same order.)"""
    p = native.svm_coupling(r)
    if p is not None:
        return p
    if r.shape[0] <= _SCALAR_ROWS:
        return np.array([_coupling_row(row.tolist()) for row in r]).reshape(r.shape[:2])
    n, k = r.shape[:2]
    rt = r.transpose(0, 2, 1)
    q = -rt * r  # Q[i, j] = -r[j, i] * r[i, j]
    # sum_j r[j, i]^2 over j != i (r[i, i] is 0: adding its 0.0 changes no bits)
    q[:, np.arange(k), np.arange(k)] = _sequential_sums(rt * rt)
    p = np.full((n, k), 1.0 / k)
    eps = 0.005 / k
    active = np.ones(n, bool)
    for _ in range(max(100, k)):
        qp = _sequential_sums(q * p[:, None, :])
        pqp = _sequential_sums(p * qp)
        active &= np.abs(qp - pqp[:, None]).max(axis=1) >= eps
        if not active.any():
            break
        a = active
        for t in range(k):  # libsvm's coordinate-wise update, vectorized over the rows
            diff = (pqp[a] - qp[a, t]) / q[a, t, t]
            p[a, t] += diff
            scale = 1.0 + diff
            pqp[a] = (pqp[a] + diff * (diff * q[a, t, t] + 2 * qp[a, t])) / scale / scale
            qp[a] = (qp[a] + diff[:, None] * q[a, t, :]) / scale[:, None]
            p[a] /= scale[:, None]
    return p


def _sequential_sums(terms: np.ndarray) -> np.ndarray:
    """Sums over the last axis added left to right, as libsvm's C loops add them (numpy's
    sum and einsum add in pairs and blocks: other bits from 8 terms on); accumulate is
    sequential by definition."""
    return np.add.accumulate(terms, axis=-1)[..., -1]


def _coupling_row(r: list) -> list:
    """One row of _pairwise_coupling in libsvm's own order of operations (its C loops).

    Sums are reduce(add, ..., 0.0), left to right: Python's built-in sum() compensates float
    sums from 3.12 on (other bits than libsvm's and onnxruntime's); reduce over map() also
    spares a list and a frame per sum."""
    k = len(r)
    q = [[-r[j][i] * r[i][j] for j in range(k)] for i in range(k)]
    for t in range(k):
        q[t][t] = reduce(add, [r[j][t] * r[j][t] for j in range(k) if j != t], 0.0)
    p = [1.0 / k] * k
    eps = 0.005 / k
    for _ in range(max(100, k)):
        qp = [reduce(add, map(mul, row, p), 0.0) for row in q]
        pqp = reduce(add, map(mul, p, qp), 0.0)
        # (libsvm's test: no error at least eps; a NaN error counts as none, as in its C)
        if not any([abs(v - pqp) >= eps for v in qp]):
            break
        for t in range(k):
            qt = q[t]
            diff = (pqp - qp[t]) / qt[t]
            p[t] += diff
            scale = 1.0 + diff
            pqp = (pqp + diff * (diff * qt[t] + 2 * qp[t])) / scale / scale
            qp = [(a + diff * b) / scale for a, b in zip(qp, qt)]
            p = [v / scale for v in p]
    return p


def sigmoid_probability(decision, prob_a, prob_b):
    # Platt scaling as libsvm applies it: P = 1 / (1 + exp(A * f + B)), clipped away from 0 and
    # 1 (in place, np.clip's maximum then minimum without its wrapper)
    p = np.multiply(decision, prob_a)
    p += prob_b
    np.exp(p, out=p)
    p += 1.0
    np.divide(1.0, p, out=p)
    np.maximum(p, 1e-7, out=p)
    return np.minimum(p, 1 - 1e-7, out=p)


def _bound_classifier(attrs: dict):
    """SVMClassifier bound to its node (derived.prepared): its compiled _Classifier."""
    model = _Classifier(**attrs)
    small: dict = {}  # x's (dtype, width) -> its native.SmallCall (None: none serves it)

    def call(x):
        if x.__class__ is np.ndarray and x.ndim == 2:
            task = small.get((x.dtype, x.shape[1]), _UNSET)
            if task is _UNSET:
                task = small[x.dtype, x.shape[1]] = model.small_task(x)
            if task is not None and x.shape[0] <= task.max_rows and native.available():
                scores, best = task(x)
                return (best if model.plain_labels else model.labels[best]), scores
        return model(as_2d(x).astype(np.float64))

    return call


@op("SVMClassifier", since=1, domain=ML, threads="blas")
@array_attributes(support_vectors=np.float64, coefficients=np.float64)
@prepared(_bound_classifier)
def svm_classifier(
    x,
    *,
    classlabels_ints=None,
    classlabels_strings=None,
    rho=None,
    prob_a=None,
    prob_b=None,
    coefficients=None,
    support_vectors=None,
    vectors_per_class=None,
    post_transform="NONE",
    kernel_params=None,
    kernel_type="LINEAR",
):
    attrs = {k: v for k, v in locals().items() if k != "x"}
    model = from_attributes(tuple(attrs.values()), lambda: _Classifier(**attrs))
    return model(as_2d(x).astype(np.float64))


class _Classifier:
    """SVMClassifier's attributes compiled once per node: the support vectors as an array, and
    the one-vs-one decisions as one matrix product (pair p weighs class i's vectors by row j-1
    of the dual coefficients and class j's by row i), so that serving a row costs a few numpy
    calls rather than a Python loop over the pairs."""

    def __init__(
        self,
        *,
        classlabels_ints,
        classlabels_strings,
        rho,
        prob_a,
        prob_b,
        coefficients,
        support_vectors,
        vectors_per_class,
        post_transform,
        kernel_params,
        kernel_type,
    ):
        if kernel_type not in KERNELS:
            raise ValueError(f"SVM: unknown kernel_type {kernel_type!r}")
        self.labels = class_labels(classlabels_ints, classlabels_strings)
        self.k = k = max(len(self.labels), 1)
        self.post_transform, self.kernel_type = post_transform, kernel_type
        self.kernel_params = kernel_params
        coefficients = np.asarray(coefficients, np.float64)
        self.rho = np.asarray(rho if rho else [0.0], np.float64)
        self.prob_a = np.asarray(prob_a, np.float64) if prob_a else None
        self.prob_b = np.asarray(prob_b, np.float64) if prob_b else None
        self.linear = not vectors_per_class
        if self.linear:  # one weight vector per class, scored with the kernel and rho[0]
            self.vectors = coefficients.reshape(k, -1)
            return
        counts = np.asarray(vectors_per_class, np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)])
        self.vectors = np.asarray(support_vectors, np.float64).reshape(starts[-1], -1)
        dual = coefficients.reshape(k - 1, starts[-1])
        self.pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
        self.weights = np.zeros((starts[-1], len(self.pairs)))
        self.vote_i = np.zeros((len(self.pairs), k), np.int64)
        self.vote_j = np.zeros((len(self.pairs), k), np.int64)
        for p, (i, j) in enumerate(self.pairs):
            si, sj = slice(starts[i], starts[i + 1]), slice(starts[j], starts[j + 1])
            self.weights[si, p], self.weights[sj, p] = dual[j - 1, si], dual[i, sj]
            self.vote_i[p, i] = self.vote_j[p, j] = 1
        self.rho = self.rho[: len(self.pairs)]

    def _coupled(self, pairwise: list) -> list:
        """_coupling_row of one row's pairwise probabilities, r built as _pairwise_coupling
        builds it."""
        k = self.k
        r = [[0.0] * k for _ in range(k)]
        for p, (i, j) in zip(pairwise, self.pairs):
            r[i][j], r[j][i] = p, 1.0 - p
        return _coupling_row(r)

    @cached_property
    def pair_index(self) -> tuple[np.ndarray, np.ndarray]:
        """The pairs' classes i and j, as index arrays (int64: trees.c reads them)."""
        return tuple(np.array([pair[side] for pair in self.pairs], np.int64) for side in (0, 1))

    @cached_property
    def coupling(self):
        """trees.c's coupling of the pairs' probabilities, set up for these pairs (None
        without the library)."""
        return native.coupling_pairs(*self.pair_index, self.k)

    @cached_property
    def squared_norms(self) -> np.ndarray:
        return (self.vectors * self.vectors).sum(axis=1)

    @cached_property
    def rbf(self) -> tuple[float, np.ndarray, np.ndarray]:
        """gamma, the vectors' squared norms and -2 V' (a transposed view, as V' was: BLAS
        sums another layout in another order): -2 (x V') as one product, the same bits (a
        power of two scales every term exactly)."""
        gamma = (list(self.kernel_params or []) + [0.0])[0]
        return gamma, self.squared_norms, (self.vectors * -2.0).T

    def _vote(self, decisions: list) -> int:
        """The class with the most one-vs-one votes of one row (the first of a tie, argmax's)."""
        votes = [0] * self.k
        for (i, j), d in zip(self.pairs, decisions):
            votes[i if d > 0 else j] += 1  # (a NaN decision votes for j, as ~(d > 0) does)
        return votes.index(max(votes))

    @cached_property
    def vote_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """votes = positive @ (vote_i - vote_j) + the column sums of vote_j (a negative
        decision votes for j): integer counts, as positive @ vote_i + ~positive @ vote_j."""
        return self.vote_i - self.vote_j, self.vote_j.sum(axis=0)

    def rbf_kernel(self, x: np.ndarray) -> np.ndarray:
        """exp(-gamma max(|x|^2 + |v|^2 - 2 x.v, 0)) in place: the formula's operations in its
        order, without its temporaries."""
        gamma, norms, minus_two_vt = self.rbf
        d = np.add(np.add.reduce(x * x, axis=1)[:, None], norms[None, :])
        d += np.matmul(x, minus_two_vt)
        np.maximum(d, 0.0, out=d)
        odd = ~np.isfinite(x).all(axis=1)
        if odd.any():  # (the direct sum, as _sq_distance: an infinite feature, kernel 0)
            d[odd] = ((x[odd][:, None, :] - self.vectors[None, :, :]) ** 2).sum(axis=2)
        np.multiply(d, -gamma, out=d)
        return np.exp(d, out=d)

    @cached_property
    def native_task(self):
        """trees.c's whole one-vs-one path for a few rows (None without the library)."""
        gamma, coef0, degree = (list(self.kernel_params or []) + [0.0, 0.0, 0.0])[:3]
        first, second = self.pair_index
        return native.svm_classify(
            self.vectors, self.weights, self.rho, self.prob_a, self.prob_b, first, second,
            self.k, self.kernel_type, gamma, coef0, int(degree),
        )  # fmt: skip

    @cached_property
    def plain_labels(self) -> bool:
        """Whether the labels are 0..k-1 (int64): a best class is its label."""
        labels = self.labels
        return labels.dtype == np.int64 and np.array_equal(labels, np.arange(len(labels)))

    def small_task(self, x: np.ndarray):
        """The native.SmallCall serving a few rows of x's dtype and width in one short call,
        where __call__'s native path would serve them with nothing to do after it (Platt
        scaling without a post_transform); else None."""
        if self.linear or self.prob_a is None or self.post_transform != "NONE":
            return None
        if not native.available() or self.native_task is None or x.shape[1] != self.native_task.nf:
            return None
        return self.native_task.small(x.dtype, NATIVE_ROWS)

    def _native(self, x: np.ndarray):
        """(best class [rows], probabilities or decisions) from trees.c, or None where numpy
        serves x (many rows, the linear mode, no library, features other than the vectors')."""
        if self.linear or x.shape[0] > NATIVE_ROWS or not native.available():
            return None
        task = self.native_task
        if task is None or x.shape[1] != task.nf or not x.flags.c_contiguous:
            return None
        return task(x)

    def __call__(self, x: np.ndarray):
        labels, transform = self.labels, self.post_transform
        fast = self._native(x)
        if fast is not None:
            best, scores = fast
            if self.prob_a is not None:
                return labels[best], apply_transform(scores, transform).astype(np.float32)
            return self._decided(x, scores, best)
        if self.kernel_type == "RBF":  # the vectors' squared norms once, not per call
            kernel = self.rbf_kernel(x)
        else:
            kernel = _kernel(self.kernel_type, self.kernel_params, x, self.vectors)
        if self.linear:
            scores = kernel + self.rho[0]
            label = labels[np.argmax(scores, axis=1)] if len(labels) else np.argmax(scores, 1)
            return label, apply_transform(scores, transform).astype(np.float32)
        decisions = np.matmul(kernel, self.weights)
        decisions += self.rho
        if x.shape[0] <= _SCALAR_ROWS:  # (a few rows: counted on Python ints at once)
            best = np.array([self._vote(row) for row in decisions.tolist()], np.intp)
        else:
            votes_for, base_votes = self.vote_tables
            best = np.add(np.matmul(decisions > 0, votes_for), base_votes).argmax(axis=1)
        if self.prob_a is not None:
            pairwise = sigmoid_probability(decisions, self.prob_a, self.prob_b)
            if x.shape[0] <= _SCALAR_ROWS and not native.available():  # (r as lists at once)
                probabilities = np.array([self._coupled(row) for row in pairwise.tolist()])
                probabilities = probabilities.reshape(x.shape[0], self.k)
                return labels[best], apply_transform(probabilities, transform).astype(np.float32)
            coupling = self.coupling
            if coupling is not None and native.available():
                probabilities = coupling(pairwise)
            else:  # (r built in numpy: its bits, as trees.c builds it)
                first, second = self.pair_index
                r = np.zeros((x.shape[0], self.k, self.k))
                r[:, first, second] = pairwise
                r[:, second, first] = np.subtract(1.0, pairwise, out=pairwise)
                probabilities = _pairwise_coupling(r)
            return labels[best], apply_transform(probabilities, transform).astype(np.float32)
        return self._decided(x, decisions, best)

    def _decided(self, x: np.ndarray, decisions: np.ndarray, best: np.ndarray):
        """The labels and scores of the one-vs-one decisions without Platt scaling."""
        labels, transform = self.labels, self.post_transform
        if self.k == 2:
            # onnxruntime writes a binary decision d as [-d, d] (and labels by the vote).
            scores = np.concatenate([-decisions, decisions], axis=1)
            if transform == "LOGISTIC":
                scores = logistic(scores)
            elif transform == "PROBIT":
                scores = np.stack([probit(decisions[:, 0]), np.zeros(len(x))], axis=1)
            return labels[best], scores.astype(np.float32)
        return labels[best], apply_transform(decisions, transform).astype(np.float32)


@op("SVMRegressor", since=1, domain=ML, threads="blas")
@array_attributes(support_vectors=np.float64, coefficients=np.float64)
def svm_regressor(
    x,
    *,
    rho=None,
    coefficients=None,
    n_supports=0,
    one_class=0,
    support_vectors=None,
    post_transform="NONE",
    kernel_params=None,
    kernel_type="LINEAR",
):
    x = as_2d(x).astype(np.float64)
    coefficients = np.asarray(coefficients, np.float64)
    rho0 = rho[0] if rho else 0.0
    if n_supports > 0:
        vectors = np.asarray(support_vectors, np.float64).reshape(n_supports, -1)
        score = _kernel(kernel_type, kernel_params, x, vectors) @ coefficients + rho0
    else:  # linear mode: the coefficients are the weights of the features
        score = _kernel(kernel_type, kernel_params, x, coefficients.reshape(1, -1))[:, 0] + rho0
    if one_class:
        score = np.where(score > 0, 1.0, -1.0)
    elif post_transform == "PROBIT":
        score = probit(score)
    return score.reshape(-1, 1).astype(np.float32)
