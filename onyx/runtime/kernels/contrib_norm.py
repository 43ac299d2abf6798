"""Transformer normalizations, activations and products of onnxruntime's contrib set (float).

RMS norms (SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization), BERT's fused
embedding (EmbedLayerNormalization), the diffusion / CLIP activations (BiasAdd, BiasSplitGelu,
QuickGelu), and what onnxruntime's transformer optimizer fuses: Gelu, BiasGelu, FastGelu,
SkipLayerNormalization, FusedMatMul (the quantized contrib ops are contrib.py's). Statistics are
computed in float32 (float64 for double inputs), as onnxruntime's CPU kernels do; half inputs
are cast back at the end.
"""

from __future__ import annotations

import math

import numpy as np

from .. import native
from ..registry import binds, op
from .activation import _sigmoid
from .elementwise import _F32, _P32, _Q32, erf_gelu, upcast
from .linalg import gemm_matmul
from .normalization import layer_norm_last

MS = "com.microsoft"


def _work(x: np.ndarray) -> np.ndarray:
    """x as a fresh float32 (float64 for double) array the caller may overwrite."""
    return np.array(x, dtype=np.float64 if x.dtype == np.float64 else np.float32)


def _rms_normalize(v: np.ndarray, axes: tuple[int, ...], epsilon: float):
    """v / sqrt(mean(v^2 over axes) + epsilon), in place; returns (v, inv_std_var kept dims)."""
    n = int(np.prod([v.shape[a] for a in axes]))
    f = v.dtype.type
    if axes == (v.ndim - 1,):  # (one dot per row: no squared copy)
        ms = np.einsum("...i,...i->...", v, v)[..., None]
    else:
        ms = np.sum(v * v, axis=axes, keepdims=True)
    ms *= f(1 / n)
    ms += f(epsilon)
    inv = np.sqrt(ms, out=ms)
    np.divide(1, inv, out=inv)
    v *= inv
    return v, inv


@op("SimplifiedLayerNormalization", since=1)
def simplified_layer_normalization(X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """RMSNorm: X / sqrt(mean(X^2) + epsilon) * scale over the axes from ``axis`` on.

    onnxruntime registers it in the ONNX domain (the LLaMA exports and the GenAI builder
    write it there); the statistics are in float32 whatever stash_type says, as there."""
    axis = axis + X.ndim if axis < 0 else axis
    fast = native.rms_norm_f32(X, None, None, scale, epsilon) if axis == X.ndim - 1 else None
    if fast is not None:  # (attention.c: one pass per row)
        return fast[0], fast[1]
    v, inv = _rms_normalize(_work(X), tuple(range(axis, X.ndim)), epsilon)
    v *= upcast(scale)
    return v.astype(X.dtype, copy=False), inv


op("SimplifiedLayerNormalization", since=1, domain=MS)(simplified_layer_normalization)


@op("SkipSimplifiedLayerNormalization", since=1, domain=MS)
def skip_simplified_layer_normalization(x, skip, gamma, bias=None, *, epsilon=1e-12):
    """RMSNorm of input + skip (+ bias) over the last axis, times gamma.

    Outputs: the result, a mean (zeros: the RMS norm has none; onnxruntime writes zeros),
    1/rms (float32, last axis kept), and the sum itself."""
    fast = native.rms_norm_f32(x, skip, bias, gamma, epsilon)
    if fast is not None:  # (attention.c: the sum and the norm in one pass per row)
        y, inv, total = fast
        return y, np.zeros_like(inv), inv, total
    total = np.add(x, skip, dtype=np.float64 if x.dtype == np.float64 else np.float32)
    if bias is not None:
        total += upcast(bias)
    v, inv = _rms_normalize(total.copy(), (total.ndim - 1,), epsilon)
    v *= upcast(gamma)
    mean = np.zeros_like(inv)
    return v.astype(x.dtype, copy=False), mean, inv, total.astype(x.dtype, copy=False)


@op("EmbedLayerNormalization", since=1, domain=MS)
def embed_layer_normalization(
    input_ids,
    segment_ids,
    word_embedding,
    position_embedding,
    segment_embedding=None,
    gamma=None,
    beta=None,
    mask=None,
    position_ids=None,
    *,
    epsilon=1e-12,
    mask_index_type=1,
):
    """BERT's embedding: word[ids] + position[pos] (+ segment[segment_ids]), layer-normalized.

    Outputs: the normalized embedding [B, S, hidden], the mask index (the count of non-zero
    mask entries per batch row, zeros without a mask, as onnxruntime computes it) and the sum
    before normalization."""
    batch, seq = input_ids.shape
    for name, ids, table in (
        ("input_ids", input_ids, word_embedding),
        ("segment_ids", segment_ids, segment_embedding),
    ):
        if ids is not None and table is not None and ids.size:
            if ids.min() < 0 or ids.max() >= table.shape[0]:
                raise ValueError(f"{name} out of range [0, {table.shape[0]})")
    total = _embedding_sum(
        input_ids, segment_ids, word_embedding, position_embedding, segment_embedding, position_ids
    )
    y, _, _ = layer_norm_last(total, upcast(gamma), None if beta is None else upcast(beta), epsilon)
    if mask is None:
        mask_index = np.zeros(batch, np.int32)
    else:
        mask_index = np.count_nonzero(mask, axis=1).astype(np.int32)
    dtype = word_embedding.dtype
    return y.astype(dtype, copy=False), mask_index, total.astype(dtype, copy=False)


def _embedding_sum(ids, segment_ids, word, position, segment, position_ids) -> np.ndarray:
    """word[ids] + position[positions] (+ segment[segment_ids]) as a fresh float32 (float64)
    array, added in that order. Float32 tables: one gather into the result and the rest
    added in place (the default positions 0 .. S - 1 a view of the table, broadcast)."""
    batch, seq = ids.shape
    if position_ids is None:
        positions = np.arange(seq)[None, :]
    else:
        positions = np.broadcast_to(position_ids, (batch, seq))
    if word.dtype != np.float32 or position.dtype != np.float32:
        total = _work(word[ids])
        total += upcast(position[positions])
        if segment_ids is not None and segment is not None:
            total += upcast(segment[segment_ids])
        return total
    total = np.take(word, ids, axis=0)  # (fresh: the caller's to overwrite)
    if position_ids is None and seq <= position.shape[0]:
        total += position[:seq]
    else:
        total += position[positions]
    if segment_ids is not None and segment is not None:
        total += upcast(np.take(segment, segment_ids, axis=0))
    return total


@op("BiasAdd", since=1, domain=MS)
def bias_add(x, bias, skip):
    y = np.add(x, bias, dtype=np.float32)
    y += upcast(skip)
    return y.astype(x.dtype, copy=False)


@op("BiasSplitGelu", since=1, domain=MS)
def bias_split_gelu(x, bias):
    """(x + bias) split in halves [a, b] along the last axis: a * Gelu(b) (erf form)."""
    v = np.add(x, bias, dtype=np.float32)
    half = v.shape[-1] // 2
    a, b = v[..., :half], np.ascontiguousarray(v[..., half:])
    return (a * erf_gelu(b, out=b)).astype(x.dtype, copy=False)


@op("QuickGelu", since=1, domain=MS, elementwise=True)
def quick_gelu(x, *, alpha=1.702):
    v = upcast(x)
    return (v * _sigmoid(v * v.dtype.type(alpha))).astype(x.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# BERT's fused activations, SkipLayerNormalization and FusedMatMul


def _in_dtype(fn, x: np.ndarray, *args) -> np.ndarray:
    return np.asarray(fn(upcast(x), *args)).astype(x.dtype, copy=False)


def _plus_bias(x: np.ndarray, bias) -> np.ndarray:
    """x (+ bias) as a fresh array of float32 or float64, which the caller may write into."""
    v = upcast(x)
    if bias is not None:
        return np.add(v, upcast(bias))
    return v.astype(np.float32 if v.dtype != np.float64 else v.dtype, copy=True)


def _fast_gelu_inplace(v: np.ndarray) -> np.ndarray:
    """The tanh approximation 0.5 * v * (1 + tanh(sqrt(2/pi) * (v + 0.044715 v^3))) with the
    constants of onnxruntime's docs, overwriting v."""
    f = v.dtype.type
    inner = v * v
    inner *= f(0.035677408136300125)  # 0.044715 * sqrt(2 / pi)
    inner += f(0.7978845608028654)  # sqrt(2 / pi)
    inner *= v
    np.tanh(inner, out=inner)
    inner += 1
    inner *= f(0.5)
    v *= inner
    return v


#: erf_gelu's scale, as erf32 receives it
_GELU_SCALE = _F32(1 / math.sqrt(2))  # (math: a ufunc on a Python float is slow at import)


@op("Gelu", since=1, domain=MS, elementwise=True)
def contrib_gelu(x):
    return erf_gelu(upcast(x)).astype(x.dtype, copy=False)


@op("BiasGelu", since=1, domain=MS)
def bias_gelu(a, b):
    fused = native.bias_gelu_f32(a, b, _GELU_SCALE, _P32, _Q32)
    if fused is not None:  # (elementwise.c: the add and erf32's GELU in one pass, its bits)
        return fused
    v = _plus_bias(a, b)
    return erf_gelu(v, out=v).astype(a.dtype, copy=False)


@op("FastGelu", since=1, domain=MS, elementwise=True)
def fast_gelu(x, bias=None):
    return _fast_gelu_inplace(_plus_bias(x, bias)).astype(x.dtype, copy=False)


def _bind_skip_layer_norm(inputs, attrs, constant):
    x, skip, gamma, beta, bias = (tuple(inputs) + (None,) * 5)[:5]
    if x.__class__ is not np.ndarray or x.shape != skip.shape:
        return None
    if x.dtype != np.float32 or skip.dtype != np.float32:
        return None
    epsilon = attrs["epsilon"]
    fused = native.skip_layer_norm_bound(x, gamma, beta, bias, epsilon)
    if fused is None:
        return None

    def call(x, skip, gamma, beta=None, bias=None):
        done = fused(x, skip)  # (None: strided, the kernel as written)
        if done is None:
            return skip_layer_normalization(x, skip, gamma, beta, bias, epsilon=epsilon)
        return done

    return call


@binds(_bind_skip_layer_norm, constants=(2, 3, 4))
@op("SkipLayerNormalization", since=1, domain=MS)
def skip_layer_normalization(x, skip, gamma, beta=None, bias=None, *, epsilon=1e-12):
    """LayerNorm over the last axis of input + skip (+ bias), then * gamma (+ beta).

    Outputs: the result, the mean and 1/std (float32, last axis kept as 1), and the sum itself.
    """
    if x.dtype == np.float32:  # (norms.c: the sum and the norm in one pass a row, their bits)
        fused = native.skip_layer_norm_f32(x, skip, gamma, beta, bias, epsilon)
        if fused is not None:
            return fused
    total = np.add(x, skip, dtype=np.float32)
    if bias is not None:
        total += upcast(bias)
    # (gamma and beta are 1-D [hidden] by the spec)
    y, mean, inv_std = layer_norm_last(
        total, upcast(gamma), beta if beta is None else upcast(beta), epsilon
    )
    return y.astype(x.dtype, copy=False), mean, inv_std, total.astype(x.dtype, copy=False)


def _fused_operand(m: np.ndarray, trans: int, trans_batch: int) -> np.ndarray:
    if m.ndim < 2:
        return m
    if trans_batch and m.ndim > 2:
        # the first dimension moves behind the batch dims: [d0, d1..dn-2, dn-1] -> [d1.., d0, dn-1]
        m = np.moveaxis(m, 0, -2)
    if trans:
        m = np.swapaxes(m, -1, -2)
    return m


@op("FusedMatMul", since=1, domain=MS, threads="blas")
def fused_mat_mul(a, b, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    a_ = _fused_operand(upcast(a), transA, transBatchA)
    b_ = _fused_operand(upcast(b), transB, transBatchB)
    y = np.asarray(gemm_matmul(a_, b_))
    if alpha != 1:
        y *= y.dtype.type(alpha)  # a fresh array: scaled in place
    return y.astype(a.dtype, copy=False)
