"""Attention family: Attention (23-25), RotaryEmbedding, LinearAttention, FlexAttention (preview)."""

from __future__ import annotations

import numpy as np

from ...ir.dtypes import to_numpy
from .. import native
from ..registry import ONYX_DOMAIN, binds, op
from .elementwise import fits


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


def scaled_attention(q, k, v, scale: float, mask=None, causal: bool = False) -> np.ndarray | None:
    """softmax(q @ k^T * scale + bias) @ v for float32 [.., heads, seq, size] q, k, v (one
    matmul with the scale folded into q, mask and softmax in place on the one score buffer);
    ``mask`` a bool (True: attend) or additive float array broadcasting to the scores;
    ``causal``: key j <= query i. None when a query row is fully masked or all its scores are
    far below zero (the caller's general path gives those)."""
    scores = np.matmul(q * q.dtype.type(scale), np.swapaxes(k, -1, -2))
    if mask is not None:
        if mask.dtype == np.bool_:
            np.copyto(scores, -np.inf, where=~mask)
        elif fits(scores.shape, mask.shape):
            scores += mask
        else:
            scores = scores + mask
    if causal:
        n_q, n_k = scores.shape[-2:]
        np.copyto(scores, -np.inf, where=np.tri(n_q, n_k, 0, dtype=bool) == 0)
    # softmax without its per-row max (numpy's reduction over short rows is slow): when no
    # score exceeds 60, exp cannot overflow, nor a row sum reach float32's limit; a row whose
    # sum is below 1e-30 (fully masked, or far below zero) goes to the caller's general path
    top = np.maximum.reduce(scores.reshape(-1))  # (NaN: not <= 60)
    if not top <= 60:
        top = np.maximum.reduce(scores, axis=-1, keepdims=True)
        if np.isneginf(top).any():
            return None
        scores -= top
    np.exp(scores, out=scores)
    # normalized after the product: the row sums by BLAS (a matrix-vector product, faster
    # than numpy's sum over short rows) divide the [.., seq, size] result, not the scores
    total = np.matmul(scores, np.ones(scores.shape[-1], scores.dtype))
    if not np.minimum.reduce(total.reshape(-1)) >= 1e-30:
        return None
    y = np.matmul(scores, v)
    y /= total[..., None]
    return y


def _plain(Q, K, V, attn_mask, past_key, nonpad, n_outputs, softcap, precision, windows) -> bool:
    """The common case scaled_attention serves: float32, no cache, no extras."""
    return (
        Q.dtype == np.float32
        and K.dtype == np.float32
        and V.dtype == np.float32
        and past_key is None
        and nonpad is None
        and n_outputs <= 3
        and not softcap
        and (precision is None or precision == 1)  # FLOAT
        and windows == (-1, -1)
        and (attn_mask is None or attn_mask.dtype in (np.bool_, np.float32))
    )


@op("Attention", since=23, threads="blas")
def attention(
    ctx,
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
    windows = (left_window_size, right_window_size)
    if _plain(
        Q,
        K,
        V,
        attn_mask,
        past_key,
        nonpad_kv_seqlen,
        ctx.n_outputs,
        softcap,
        softmax_precision,
        windows,
    ):
        q, k, v = _heads(Q, q_num_heads), _heads(K, kv_num_heads), _heads(V, kv_num_heads)
        if q.shape[1] == k.shape[1] and (attn_mask is None or attn_mask.shape[-1] == k.shape[2]):
            s = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
            y = None
            if attn_mask is None and Q.ndim == 4 and K.ndim == 4:
                y = native.heads_attention(q, k, v, float(s), bool(is_causal))
            if y is None:
                y = scaled_attention(q, k, v, s, attn_mask, bool(is_causal))
            if y is not None:
                return (_merge_heads(y) if Q.ndim == 3 else y), k, v
    return _attention(
        Q,
        K,
        V,
        attn_mask,
        past_key,
        past_value,
        nonpad_kv_seqlen,
        is_causal=is_causal,
        kv_num_heads=kv_num_heads,
        q_num_heads=q_num_heads,
        qk_matmul_output_mode=qk_matmul_output_mode,
        scale=scale,
        softcap=softcap,
        softmax_precision=softmax_precision,
        left_window_size=left_window_size,
        right_window_size=right_window_size,
    )


def _attention(
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


# --- ai.onyx HeadsAttention (AttentionFusion below opset 23) ------------------------------------


def _heads_attention(Q, K, V, scale: float, causal: bool, mask=None):
    """softmax(scale * Q K^T [+ mask] [causal]) V on 4-D [batch, heads, seq, size] Q, K, V: the
    native kernel (a mask per key), else one numpy score buffer (any additive float mask
    broadcasting as Add does), else the general path (fully masked rows)."""
    y = None
    if Q.dtype == np.float32:
        y = native.heads_attention(Q, K, V, float(scale), causal, mask)
    if y is None and Q.dtype == K.dtype == V.dtype == np.float32:
        y = scaled_attention(Q, K, V, scale, mask, causal)
    if y is None:
        if mask is not None and mask.shape[-1:] != K.shape[-2:-1]:  # (broadcast, as Add does:
            mask = np.broadcast_to(mask, (*mask.shape[:-1], K.shape[-2]))  # not -inf padding)
        y = _attention(Q, K, V, mask, scale=scale, is_causal=int(causal))[0]
    return y


@op("HeadsAttention", since=1, domain=ONYX_DOMAIN, threads="pool")
def heads_attention(Q, K, V, *, scale=1.0):
    """softmax(scale * Q K^T) V: the model-local function AttentionFusion writes where the
    model's opset has no Attention."""
    return _heads_attention(Q, K, V, scale, False)


@op("MaskedHeadsAttention", since=1, domain=ONYX_DOMAIN, threads="pool")
def masked_heads_attention(Q, K, V, M, *, scale=1.0):
    """softmax(scale * Q K^T + M) V, M an additive float mask (a padding mask per key: the
    native kernel's)."""
    return _heads_attention(Q, K, V, scale, False, M)


@op("CausalHeadsAttention", since=1, domain=ONYX_DOMAIN, threads="pool")
def causal_heads_attention(Q, K, V, *, scale=1.0):
    """The same with key j allowed for query i only where j <= i."""
    return _heads_attention(Q, K, V, scale, True)


def _packed_heads_attention(QKV, num_heads: int, scale: float, causal: bool, rotary=None):
    fast = native.packed_attention(QKV, num_heads, scale, None, False, causal, rotary)
    if fast is not None:  # (attention.c: q, k, v read in place from the projection's rows)
        return fast[0]
    b, s, width = QKV.shape
    q, k, v = (
        QKV[..., i * width // 3 : (i + 1) * width // 3]
        .reshape(b, s, num_heads, -1)
        .transpose(0, 2, 1, 3)
        for i in range(3)
    )
    if rotary is not None:  # (half tables [>= S, D / 2]: the full ones repeat them)
        cos, sin = (np.concatenate([t[:s], t[:s]], axis=-1) for t in rotary)
        q, k = rotate_half(q, cos, sin), rotate_half(k, cos, sin)
    y = _heads_attention(np.ascontiguousarray(q), k, v, scale, causal)
    return y.transpose(0, 2, 1, 3).reshape(b, s, width // 3)


@op("PackedHeadsAttention", since=1, domain=ONYX_DOMAIN, threads="pool")
def packed_heads_attention(QKV, *, num_heads, scale=1.0):
    """HeadsAttention of q, k, v side by side in QKV [B, S, 3 * H * D] (a fused projection's
    output), split into H heads, the result merged back to [B, S, H * D]."""
    return _packed_heads_attention(QKV, num_heads, scale, False)


@op("CausalPackedHeadsAttention", since=1, domain=ONYX_DOMAIN, threads="pool")
def causal_packed_heads_attention(QKV, *, num_heads, scale=1.0):
    """The same with key j allowed for query i only where j <= i."""
    return _packed_heads_attention(QKV, num_heads, scale, True)


def _bind_time_major(inputs, attrs, constant):
    """registry.binds' set-up of TimeMajorPackedHeadsAttention: the native task made once for
    QKV's shape and strides (others: the kernel as written)."""
    qkv = inputs[0]
    if qkv.__class__ is not np.ndarray or qkv.ndim != 3:
        return None
    num_heads, scale = attrs["num_heads"], float(attrs["scale"])
    fused = native.packed_attention_bound(qkv.transpose(1, 0, 2), num_heads, scale, False)
    if fused is None:
        return None

    def call(QKV):
        y = fused(QKV.transpose(1, 0, 2))
        if y is None:
            return time_major_packed_heads_attention(QKV, num_heads=num_heads, scale=scale)
        return y.transpose(1, 0, 2)

    call.held = fused
    return call


@binds(_bind_time_major)
@op("TimeMajorPackedHeadsAttention", since=1, domain=ONYX_DOMAIN, threads="pool")
def time_major_packed_heads_attention(QKV, *, num_heads, scale=1.0):
    """PackedHeadsAttention on a sequence-first projection QKV [S, B, 3 * H * D] (PyTorch's
    nn.MultiheadAttention), the result [S, B, H * D]."""
    y = _packed_heads_attention(QKV.transpose(1, 0, 2), num_heads, scale, False)
    return y.transpose(1, 0, 2)


@op("PackedRotaryHeadsAttention", since=1, domain=ONYX_DOMAIN, threads="pool")
def packed_rotary_heads_attention(QKV, cos, sin, *, num_heads, scale=1.0):
    """PackedHeadsAttention with q and k rotated first (RotateHalf at positions 0 .. S - 1 by
    the tables [>= S, D] that repeat cos, sin [>= S, D / 2] in both halves)."""
    return _packed_heads_attention(QKV, num_heads, scale, False, (cos, sin))


@op("CausalPackedRotaryHeadsAttention", since=1, domain=ONYX_DOMAIN, threads="pool")
def causal_packed_rotary_heads_attention(QKV, cos, sin, *, num_heads, scale=1.0):
    """The same with key j allowed for query i only where j <= i."""
    return _packed_heads_attention(QKV, num_heads, scale, True, (cos, sin))


# --- ai.onyx RotateHalf (RotateHalfFusion) ------------------------------------------------------


@op("RotateHalf", since=1, domain=ONYX_DOMAIN, threads="pool")
def rotate_half(X, cos, sin):
    """X * cos + concat(-X2, X1) * sin, X1 and X2 the halves of X's last axis: the rotary
    embedding as PyTorch exports it (cos, sin [S, D] tables over X's last two axes), with the
    chain's rounding."""
    fast = native.rotate_half_f32(X, cos, sin)
    if fast is not None:  # (attention.c: one pass)
        return fast
    h = X.shape[-1] // 2
    y = X * cos
    y[..., :h] -= X[..., h:] * sin[..., :h]  # (x1 c - x2 s: x1 c + (-x2) s exactly)
    y[..., h:] += X[..., :h] * sin[..., h:]
    return y


# --- ai.onyx Silu / SiluMul (SiluFusion: an LLM's gated MLP) ------------------------------------


def _silu(g: np.ndarray) -> np.ndarray:
    v = g.astype(np.float64 if g.dtype == np.float64 else np.float32)
    with np.errstate(over="ignore"):  # (e^-g overflowing: g / inf, a zero)
        return v / (1 + np.exp(-v))


@op("Silu", since=1, domain=ONYX_DOMAIN, elementwise=True, threads="pool")
def silu(X):
    """X * Sigmoid(X)."""
    fast = native.silu_f32(X)
    return fast if fast is not None else _silu(X).astype(X.dtype, copy=False)


@op("SiluMul", since=1, domain=ONYX_DOMAIN, elementwise=True, threads="pool")
def silu_mul(G, U):
    """G * Sigmoid(G) * U (U of G's shape): a gated MLP's activation and gate in one pass."""
    fast = native.silu_f32(G, U) if G.shape == U.shape else None
    if fast is not None:
        return fast
    return (_silu(G) * U).astype(G.dtype, copy=False)


# --- RotaryEmbedding -----------------------------------------------------------------------------


@op("RotaryEmbedding", since=23)
def rotary_embedding(
    X,
    cos_cache,
    sin_cache,
    position_ids=None,
    *,
    interleaved=0,
    num_heads=0,
    rotary_embedding_dim=0,
):
    X = np.asarray(X)
    if X.ndim == 3:  # [batch, seq, heads*size] -> [batch, seq, heads, size]
        b, s, hidden = X.shape
        x, head_axis = X.reshape(b, s, num_heads, hidden // num_heads), 2
    else:  # [batch, heads, seq, size]
        x, head_axis = X, 1
    rot = rotary_embedding_dim or x.shape[-1]
    cos, sin = np.asarray(cos_cache), np.asarray(sin_cache)
    if position_ids is not None:  # caches indexed by position: [batch, seq, rot/2]
        cos, sin = cos[position_ids], sin[position_ids]
    # broadcast the [batch, seq, rot/2] angles over the head axis
    cos, sin = np.expand_dims(cos, head_axis), np.expand_dims(sin, head_axis)
    x_rot = x[..., :rot]
    if interleaved:  # pairs (x0, x1), (x2, x3), ...
        x1, x2 = x_rot[..., 0::2], x_rot[..., 1::2]
    else:  # halves
        x1, x2 = x_rot[..., : rot // 2], x_rot[..., rot // 2 :]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        rotated = np.stack([real, imag], axis=-1).reshape(x_rot.shape)
    else:
        rotated = np.concatenate([real, imag], axis=-1)
    out = np.concatenate([rotated, x[..., rot:]], axis=-1).astype(X.dtype)
    return out.reshape(X.shape)


# --- LinearAttention -----------------------------------------------------------------------------


def _per_head(x: np.ndarray, n_heads: int, size: int) -> np.ndarray:
    """Packed gates [B, T, H*size], [B, T, H] or [B, T, 1] -> [B, T, H, size or 1]."""
    b, t, last = x.shape
    if last == n_heads * size:
        return x.reshape(b, t, n_heads, size)
    return np.broadcast_to(x.reshape(b, t, -1, 1), (b, t, n_heads, 1))


@op("LinearAttention", since=27)
def linear_attention(
    query,
    key,
    value,
    past_state=None,
    decay=None,
    beta=None,
    *,
    q_num_heads,
    kv_num_heads,
    update_rule="gated_delta",
    scale=0.0,
    chunk_size=64,  # a tuning hint for chunked kernels: the recurrence below is exact
):
    query = np.asarray(query)
    out_dtype, ct = query.dtype, _compute_dtype(query.dtype)
    b, t_len, _ = query.shape
    d_k = query.shape[-1] // q_num_heads
    d_v = value.shape[-1] // kv_num_heads
    q = query.astype(ct).reshape(b, t_len, kv_num_heads, q_num_heads // kv_num_heads, d_k)
    k = np.asarray(key, ct).reshape(b, t_len, kv_num_heads, d_k)
    v = np.asarray(value, ct).reshape(b, t_len, kv_num_heads, d_v)
    gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    if update_rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ValueError(f"LinearAttention: unknown update_rule {update_rule!r}")
    # exp(g): per key dimension [.., d_k, 1] or per head [.., 1, 1], scaling the state's rows
    g = np.exp(_per_head(np.asarray(decay, ct), kv_num_heads, d_k))[..., None] if gated else None
    rate = _per_head(np.asarray(beta, ct), kv_num_heads, 1) if delta else None
    s = 1 / np.sqrt(d_k) if scale == 0.0 else scale
    state_dtype = out_dtype if past_state is None else np.asarray(past_state).dtype
    S = (
        np.zeros((b, kv_num_heads, d_k, d_v), ct)
        if past_state is None
        else np.asarray(past_state, ct)
    )
    out = np.empty((b, t_len, kv_num_heads, q.shape[3], d_v), ct)
    for t in range(t_len):  # the recurrence is sequential in time; batch and heads vectorized
        if gated:
            S = g[:, t] * S
        k_t, v_t = k[:, t], v[:, t]  # [B, H, d_k], [B, H, d_v]
        if delta:
            # v - S^T k: what the (decayed) state predicts for k_t, corrected at rate beta
            v_t = rate[:, t] * (v_t - (k_t[..., None, :] @ S)[..., 0, :])
        S = S + k_t[..., :, None] * v_t[..., None, :]
        out[:, t] = s * (q[:, t] @ S)
    return (
        out.reshape(b, t_len, q_num_heads * d_v).astype(out_dtype),
        S.astype(state_dtype),
    )


# --- FlexAttention (ai.onnx.preview) -------------------------------------------------------------


@op("FlexAttention", since=1, domain="ai.onnx.preview")
def flex_attention(
    ctx, Q, K, V, *, scale=None, score_mod=None, prob_mod=None, softmax_precision=None
):
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    # scores and probabilities live in softmax_precision: float32 unless the inputs are double
    if softmax_precision is not None:
        ct = np.dtype(to_numpy(softmax_precision))
    else:
        ct = np.dtype(np.float64) if Q.dtype == np.float64 else np.dtype(np.float32)
    group = Q.shape[1] // K.shape[1]  # query head h reads kv head h // group
    k = np.repeat(K.astype(ct), group, axis=1)
    v = np.repeat(V.astype(ct), group, axis=1)
    s = 1 / np.sqrt(Q.shape[-1]) if scale is None else scale
    scores = np.matmul(Q.astype(ct), np.swapaxes(k, -1, -2)) * ct.type(s)
    if score_mod is not None:
        scores = np.asarray(ctx.run_graph(score_mod, [scores])[0])
    probs = _masked_softmax(scores)
    if prob_mod is not None:
        probs = np.asarray(ctx.run_graph(prob_mod, [probs])[0])
    return np.matmul(probs, v).astype(Q.dtype)
