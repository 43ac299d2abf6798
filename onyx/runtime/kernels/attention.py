"""Attention family: Attention (23-25), RotaryEmbedding, LinearAttention, FlexAttention (preview)."""

from __future__ import annotations

import numpy as np

from ...ir.dtypes import to_numpy
from ..registry import op


def _compute_dtype(dtype) -> np.dtype:
    # half and bfloat16 inputs are computed in float32, then cast back
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _heads(x: np.ndarray, n_heads: int | None) -> np.ndarray:
    """[batch, seq, heads*size] -> [batch, heads, seq, size]; 4-D input passes through."""
    if x.ndim == 4:
        return x
    b, s, hidden = x.shape
    return x.reshape(b, s, n_heads, hidden // n_heads).transpose(0, 2, 1, 3)


def _merge_heads(x: np.ndarray) -> np.ndarray:
    b, h, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def _masked_softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; a row with no finite score (fully masked) becomes zeros."""
    top = scores.max(axis=-1, keepdims=True)
    dead = ~np.isfinite(top) & (top < 0)  # every key's bias was -inf
    e = np.exp(scores - np.where(dead, 0, top))
    e = np.where(dead, 0, e)
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total == 0, 1, total)


def _allowed_keys(q_len, k_len, offset, is_causal, left, right, nonpad):
    """Structural mask [batch or 1, 1, q, k]: causal frontier, sliding window, padding.

    ``offset`` [batch or 1] is the count of valid keys before the query block; the absolute
    position of query i is offset + i.
    """
    i = np.arange(q_len)[:, None]
    j = np.arange(k_len)[None, :]
    pos = np.asarray(offset).reshape(-1, 1, 1, 1) + i
    allowed = np.ones((1, 1, q_len, k_len), dtype=bool)
    if is_causal:
        allowed = allowed & (j <= pos)
    if left >= 0:
        allowed = allowed & (j >= pos - left)
    if right >= 0:
        allowed = allowed & (j <= pos + right)
    if nonpad is not None:
        allowed = allowed & (j < np.asarray(nonpad).reshape(-1, 1, 1, 1))
    return allowed


@op("Attention", since=23)
def attention(
    Q,
    K,
    V,
    attn_mask=None,
    past_key=None,
    past_value=None,
    nonpad_kv_seqlen=None,
    *,
    is_causal=0,
    kv_num_heads=None,
    q_num_heads=None,
    qk_matmul_output_mode=0,
    scale=None,
    softcap=0.0,
    softmax_precision=None,
    left_window_size=-1,
    right_window_size=-1,
):
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    out_dtype, ct = Q.dtype, _compute_dtype(Q.dtype)
    q = _heads(Q, q_num_heads).astype(ct)
    k = _heads(K, kv_num_heads)
    v = _heads(V, kv_num_heads)
    past_len = 0
    if past_key is not None:
        past_len = past_key.shape[2]
        k = np.concatenate([past_key, k.astype(past_key.dtype)], axis=2)
        v = np.concatenate([past_value, v.astype(past_value.dtype)], axis=2)
    present_key, present_value = k, v
    k, v = k.astype(ct), v.astype(ct)
    n_q_heads, n_kv_heads = q.shape[1], k.shape[1]
    if n_q_heads != n_kv_heads:  # GQA / MQA: each kv head serves a group of query heads
        k = np.repeat(k, n_q_heads // n_kv_heads, axis=1)
        v = np.repeat(v, n_q_heads // n_kv_heads, axis=1)

    q_len, total_len = q.shape[2], k.shape[2]
    s = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    # scale Q and K by sqrt(scale) each, as the spec does, before the matmul
    qk = np.matmul(q * ct.type(np.sqrt(s)), np.swapaxes(k * ct.type(np.sqrt(s)), -1, -2))
    qk_out = {0: qk}
    if softcap > 0:
        qk = softcap * np.tanh(qk / softcap)
    qk_out[1] = qk

    bias = np.zeros((1, 1, 1, 1), ct)
    if attn_mask is not None:
        mask = np.asarray(attn_mask)
        if mask.dtype == np.bool_:
            mask = np.where(mask, 0.0, -np.inf)
        mask = mask.astype(ct)
        if mask.shape[-1] < total_len:  # a short mask is padded with -inf (24+)
            pad = [(0, 0)] * (mask.ndim - 1) + [(0, total_len - mask.shape[-1])]
            mask = np.pad(mask, pad, constant_values=-np.inf)
        bias = bias + mask
    if past_key is not None or nonpad_kv_seqlen is None:
        offset = np.array([past_len])
    else:  # external cache: the valid keys before the query block, per batch entry
        offset = np.asarray(nonpad_kv_seqlen).astype(np.int64) - q_len
    allowed = _allowed_keys(
        q_len, total_len, offset, is_causal, left_window_size, right_window_size, nonpad_kv_seqlen
    )
    bias = np.where(allowed, bias, -np.inf)
    scores = qk + bias
    qk_out[2] = scores

    sm_dtype = ct if softmax_precision is None else to_numpy(softmax_precision)
    probs = _masked_softmax(scores.astype(sm_dtype).astype(ct) if sm_dtype != ct else scores)
    if sm_dtype != ct:
        probs = probs.astype(sm_dtype).astype(ct)
    qk_out[3] = probs
    y = np.matmul(probs, v)
    y = _merge_heads(y) if Q.ndim == 3 else y
    return (
        y.astype(out_dtype),
        present_key,
        present_value,
        qk_out[qk_matmul_output_mode].astype(out_dtype),
    )
