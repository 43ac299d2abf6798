"""LinearClassifier and LinearRegressor."""

from __future__ import annotations

import numpy as np

from ... import native
from ...native.trees import linear_chain as native_linear_chain
from ...registry import ONYX_DOMAIN, array_attributes, op
from ..derived import prepared
from ._common import as_2d, class_labels, logistic, probit, regression_transform, row_argmax
from ._common import post_transform as apply_transform
from .preprocess import bound_scaler, normalizer

ML = "ai.onnx.ml"
#: post_transforms trees.c's onyx_linear_classify applies (the others: numpy)
_NATIVE_TRANSFORMS = {"NONE": 0, "SOFTMAX": 1}
#: ... and trees.c's LinearChain for one set of weights of two labels (binary_scores' p)
_NATIVE_BINARY = {"NONE": 2, "LOGISTIC": 3}
#: ... and of several classes (4: the logistic of each score)
_CHAIN_TRANSFORMS = {**_NATIVE_TRANSFORMS, "LOGISTIC": 4}
_UNSET = object()


def _linear_scores(x, coefficients, intercepts) -> np.ndarray:
    x = as_2d(x).astype(np.float32)
    weights = np.asarray(coefficients, np.float32).reshape(-1, x.shape[1])
    scores = x @ weights.T
    if intercepts is not None and len(intercepts):
        scores += np.asarray(intercepts, np.float32)
    return scores


def _bound(kernel, attrs: dict):
    """A linear kernel bound to its node (derived.prepared): its coefficients and intercepts
    as float32 arrays once, not per call (the same products)."""
    attrs = dict(attrs)
    if attrs.get("coefficients") is not None:
        attrs["coefficients"] = np.asarray(attrs["coefficients"], np.float32)
    if attrs.get("intercepts") is not None:
        attrs["intercepts"] = np.asarray(attrs["intercepts"], np.float32)
    return lambda x: kernel(x, **attrs)


def binary_scores(score: np.ndarray, transform: str) -> np.ndarray:
    """One score per row for two classes -> two columns, as onnxruntime writes them.

    The spec does not say; onnxruntime puts [1 - p, p] with p = logistic(s) for LOGISTIC and
    [1 - s, s] with the raw score otherwise. (For PROBIT it writes the probits of all rows
    into the first rows, a layout bug we do not copy: we give [1 - p, p], p = probit(s).)
    """
    if transform == "LOGISTIC":
        score = logistic(score)
    elif transform == "PROBIT":
        score = probit(score)
    return np.stack([1.0 - score, score], axis=1)


def _bound_classifier(attrs: dict):
    """LinearClassifier bound to its node: the labels and float32 weights once, and a call of
    several classes served without the kernel's general steps (the same operations)."""
    general = _bound(linear_classifier, attrs)
    labels = class_labels(attrs.get("classlabels_ints"), attrs.get("classlabels_strings"))
    coefficients = np.asarray(attrs["coefficients"], np.float32)
    intercepts = attrs.get("intercepts")
    intercepts = np.asarray(intercepts, np.float32) if intercepts is not None else None
    transform = attrs.get("post_transform", "NONE")
    weights_t: dict = {}  # features -> the weights [classes, features] transposed (a view)
    fast: dict = {}  # features -> native.LinearClassify (None: numpy serves them)

    def call(x):
        if x.__class__ is not np.ndarray or x.ndim != 2 or not x.shape[1]:
            return general(x)
        w_t = weights_t.get(x.shape[1])
        if w_t is None:
            w_t = weights_t[x.shape[1]] = coefficients.reshape(-1, x.shape[1]).T
        if w_t.shape[1] < 2 or len(labels) < w_t.shape[1]:
            return general(x)  # (one set of weights: the sign's rule)
        if x.dtype == np.float32 and x.flags.c_contiguous and native.available():
            task = fast.get(x.shape[1], _UNSET)
            if task is _UNSET:
                code = _NATIVE_TRANSFORMS.get(transform)
                task = fast[x.shape[1]] = None if code is None else native.linear_classify(
                    w_t, intercepts if intercepts is not None and len(intercepts) else None, code
                )  # fmt: skip
            if task is not None:
                best, scores = task(x)
                return labels[best], scores
        scores = np.matmul(x.astype(np.float32, copy=False), w_t)
        if intercepts is not None and len(intercepts):
            scores += intercepts
        label = labels[row_argmax(scores)]
        return label, apply_transform(scores, transform).astype(np.float32, copy=False)

    return call


@op("LinearClassifier", since=1, domain=ML, threads="blas")
@array_attributes(coefficients=np.float32)
@prepared(_bound_classifier)
def linear_classifier(
    x,
    *,
    post_transform="NONE",
    classlabels_ints=None,
    classlabels_strings=None,
    multi_class=0,
    intercepts=None,
    coefficients,
):
    labels = class_labels(classlabels_ints, classlabels_strings)
    scores = _linear_scores(x, coefficients, intercepts)
    if scores.shape[1] == 1:
        # One set of weights: its sign picks the second (positive) or first class.
        if len(labels) == 2:
            positive, negative = labels[1], labels[0]
        else:
            positive, negative = ("1", "0") if labels.dtype == object else (1, 0)
        label = np.where(scores[:, 0] > 0, positive, negative).astype(labels.dtype)
        if len(labels) == 2:
            return label, binary_scores(scores[:, 0], post_transform).astype(np.float32)
        return label, apply_transform(scores, post_transform).astype(np.float32)
    label = labels[row_argmax(scores)]
    return label, apply_transform(scores, post_transform).astype(np.float32)


@op("LinearRegressor", since=1, domain=ML, threads="blas")
@array_attributes(coefficients=np.float32)
@prepared(lambda attrs: _bound(linear_regressor, attrs))
def linear_regressor(x, *, targets=1, intercepts=None, coefficients=None, post_transform="NONE"):
    scores = _linear_scores(x, coefficients, intercepts)
    return regression_transform(scores, post_transform).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# LinearChain: a scikit-learn linear pipeline's chain as one kernel (optimizer/linear_chain.py)

#: LinearClassifier's attributes (the chain's node carries them under the same names)
_CLASSIFIER_ATTRS = (
    "post_transform", "classlabels_ints", "classlabels_strings", "multi_class", "intercepts",
    "coefficients",
)  # fmt: skip


def _bound_chain(attrs: dict):
    """LinearChain bound to its node: the separate kernels' bound calls (numpy's path), and
    for float32 rows trees.c's whole chain in one call, made at the first run from its
    constant inputs (kept while the run passes the same arrays)."""
    classify = _bound_classifier({k: attrs.get(k) for k in _CLASSIFIER_ATTRS})
    has_scaler = attrs.get("offset") is not None or attrs.get("scale") is not None
    scaler = bound_scaler(attrs) if has_scaler else None
    norm = attrs.get("norm")
    labels = class_labels(attrs.get("classlabels_ints"), attrs.get("classlabels_strings"))
    plain = labels.dtype == np.int64 and np.array_equal(labels, np.arange(len(labels)))
    kept: list = [None, None, _UNSET]  # sub, proj, their native.LinearChain (None: numpy)

    def call(x, sub=None, proj=None):
        if x.__class__ is np.ndarray and x.dtype == np.float32 and x.ndim == 2:
            chain = kept[2]
            if chain is _UNSET or sub is not kept[0] or proj is not kept[1]:
                chain = _native_chain(attrs, scaler is not None, norm, x, sub, proj)
                kept[:] = sub, proj, chain
            if chain is not None and x.shape[1] == chain.nf and native.available():
                best, scores = chain(x)
                return (best if plain else labels[best]), scores
        y = x if scaler is None else scaler(x)
        if sub is not None:
            y = np.subtract(y, sub)
        if proj is not None:
            y = np.matmul(y, proj)
        label, scores = classify(y)
        return label, scores if norm is None else normalizer(scores, norm=norm)

    return call


def _native_chain(attrs: dict, has_scaler: bool, norm, x, sub, proj):
    """The native.LinearChain of this node for x's width, or None where the library is off
    or the chain is none it computes (LinearClassifier's native conditions)."""
    nf = x.shape[1]
    k = nf if proj is None else (proj.shape[-1] if proj.ndim == 2 else 0)
    coefficients = np.asarray(attrs["coefficients"], np.float32)
    classes = coefficients.size // k if k else 0
    transform = _CHAIN_TRANSFORMS.get(attrs.get("post_transform", "NONE"))
    labels = attrs.get("classlabels_strings") or attrs.get("classlabels_ints") or []
    if classes == 1 and len(labels) == 2 and norm is None:  # (the sign's rule: [1 - p, p])
        transform = _NATIVE_BINARY.get(attrs.get("post_transform", "NONE"))
    elif classes < 2:
        return None
    if (
        not native.available()
        or not nf
        or transform is None
        or coefficients.size != classes * k
        or len(labels) < classes
        or (proj is not None and proj.shape != (nf, k))
        or (sub is not None and sub.size not in (1, nf))
        or (norm is not None and classes > 128)
    ):
        return None

    def row(a, fill):  # (an attribute or constant broadcast over the features)
        a = np.asarray(a if a is not None and len(a) else [fill], np.float32).reshape(-1)
        return np.broadcast_to(a, nf) if a.size in (1, nf) else None

    offset, scale = (row(attrs.get("offset"), 0.0), row(attrs.get("scale"), 1.0)) if has_scaler else (None, None)  # fmt: skip
    if has_scaler and (offset is None or scale is None):
        return None
    intercepts = attrs.get("intercepts")
    bias = (
        np.asarray(intercepts, np.float32) if intercepts is not None and len(intercepts) else None
    )
    if bias is not None and bias.size != classes:
        return None
    sub_row = None if sub is None else np.broadcast_to(np.asarray(sub, np.float32).reshape(-1), nf)
    weights = coefficients.reshape(classes, k).T
    return native_linear_chain(nf, offset, scale, sub_row, proj, weights, bias, transform, norm)


# (optimizer/linear_chain.py's four variants: with or without the MatMul and the Normalizer)
@op("LinearChain", since=1, domain=ONYX_DOMAIN, threads="blas")
@array_attributes(coefficients=np.float32)
@op("LinearChainNorm", since=1, domain=ONYX_DOMAIN, threads="blas")
@op("LinearChainProj", since=1, domain=ONYX_DOMAIN, threads="blas")
@op("LinearChainProjNorm", since=1, domain=ONYX_DOMAIN, threads="blas")
@prepared(_bound_chain)
def linear_chain(
    x,
    sub=None,
    proj=None,
    *,
    offset=None,
    scale=None,
    post_transform="NONE",
    classlabels_ints=None,
    classlabels_strings=None,
    multi_class=0,
    intercepts=None,
    coefficients,
    norm=None,
):
    """[Scaler] -> [Sub(sub)] -> [MatMul(proj)] -> LinearClassifier -> [Normalizer]: the
    stages present (a Scaler where offset or scale is set, a Normalizer where norm is)."""
    attrs = {k: v for k, v in locals().items() if k not in ("x", "sub", "proj")}
    return _bound_chain(attrs)(x, sub, proj)
