"""Transformer normalizations and small activations of onnxruntime's contrib set.

RMS norms (SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization), BERT's fused
embedding (EmbedLayerNormalization), and the diffusion / CLIP activations (BiasAdd,
BiasSplitGelu, QuickGelu). Statistics are computed in float32 (float64 for double inputs),
as onnxruntime's CPU kernels do; half inputs are cast back at the end.
"""

from __future__ import annotations

import numpy as np

from .. import native
from ..registry import op
from .activation import _sigmoid
from .elementwise import erf_gelu as _gelu
from .elementwise import upcast
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
    return (a * _gelu(b, out=b)).astype(x.dtype, copy=False)


@op("QuickGelu", since=1, domain=MS, elementwise=True)
def quick_gelu(x, *, alpha=1.702):
    v = upcast(x)
    return (v * _sigmoid(v * v.dtype.type(alpha))).astype(x.dtype, copy=False)
