"""The attention family of onnxruntime's contrib ops, as its CPU kernels compute them.

Attention (BERT / GPT-2 fusions: one packed QKV projection, a 2 x B x H x P x D past),
MultiHeadAttention (projected Q, K, V; cross attention), QAttention (Attention on an 8-bit
projection), GroupQueryAttention (LLMs: grouped KV heads, a KV cache addressed by
``seqlens_k``, local windows, softcap, rotary inside) and RotaryEmbedding.

Masks follow onnxruntime: Attention and MultiHeadAttention add ``mask_filter_value``
(-10000 by default, not -inf) for each masked key and again for each key past the causal
frontier, so a fully masked row is a softmax over penalized scores, not zeros.
GroupQueryAttention normalizes each row over its allowed keys only, and those outside get a
probability of exactly 0.
"""

from __future__ import annotations

import numpy as np

from .. import native
from ..registry import op
from .elementwise import upcast
from .linalg import packed_matmul
from .quantized_matmul import integer_matmul

MS = "com.microsoft"


# ---------------------------------------------------------------------------------------------
# Shared pieces


def _bnsh(x: np.ndarray, n_heads: int) -> np.ndarray:
    """[B, S, H * D] -> [B, H, S, D] (a view)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, n_heads, hidden // n_heads).transpose(0, 2, 1, 3)


def _merged(y: np.ndarray) -> np.ndarray:
    """[B, H, S, D] -> [B, S, H * D]."""
    b, h, s, d = y.shape
    return y.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def _scores(q: np.ndarray, k: np.ndarray, scale: float) -> np.ndarray:
    """scale * q @ k^T as [B, Hq, S, T] for q [B, Hq, S, D] and k [B, Hkv, T, D]: each group of
    Hq / Hkv query heads reads one KV head (as one matmul, without repeating K)."""
    b, hq, s, d = q.shape
    hkv = k.shape[1]
    grouped = q.reshape(b, hkv, (hq // hkv) * s, d)
    scores = np.matmul(grouped, np.swapaxes(k, -1, -2))
    scores *= np.float32(scale)
    return scores.reshape(b, hq, s, k.shape[2])


def _weighted(probs: np.ndarray, v: np.ndarray) -> np.ndarray:
    """probs [B, Hq, S, T] @ v [B, Hkv, T, Dv] -> [B, Hq, S, Dv], grouped as _scores."""
    b, hq, s, t = probs.shape
    hkv = v.shape[1]
    y = np.matmul(probs.reshape(b, hkv, (hq // hkv) * s, t), v)
    return y.reshape(b, hq, s, v.shape[-1])


def _softmax_rows(scores: np.ndarray, sink: np.ndarray | None = None) -> np.ndarray:
    """Softmax over the last axis, in place. -inf scores get 0; a row with no finite score
    becomes zeros. ``sink`` [Hq] (or [1]) adds exp(sink) to each head's denominator (a smooth
    softmax: the row may give less than all of its weight)."""
    top = np.max(scores, axis=-1, keepdims=True)
    if sink is not None:
        sink = sink.reshape(1, -1, 1, 1).astype(scores.dtype)
        top = np.maximum(top, sink)
    top = np.where(np.isfinite(top), top, 0).astype(scores.dtype)
    scores -= top
    np.exp(scores, out=scores)
    total = np.sum(scores, axis=-1, keepdims=True)
    if sink is not None:
        total = total + np.exp(sink - top)
    total[total == 0] = 1
    scores /= total
    return scores


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: int) -> np.ndarray:
    """Rotary embedding of x [..., S, D] by angles cos / sin [.., S, rot / 2] (broadcast over
    the leading axes); dims past rot pass through."""
    rot = cos.shape[-1] * 2
    out = np.array(x, dtype=np.float32)
    part = out[..., :rot]
    if interleaved:  # pairs (x0, x1), (x2, x3), ...
        x1, x2 = part[..., 0::2].copy(), part[..., 1::2].copy()
        part[..., 0::2] = x1 * cos - x2 * sin
        part[..., 1::2] = x2 * cos + x1 * sin
    else:  # halves
        x1, x2 = part[..., : rot // 2].copy(), part[..., rot // 2 :].copy()
        part[..., : rot // 2] = x1 * cos - x2 * sin
        part[..., rot // 2 :] = x2 * cos + x1 * sin
    return out


# ---------------------------------------------------------------------------------------------
# RotaryEmbedding (com.microsoft)


@op("RotaryEmbedding", since=1, domain=MS)
def rotary_embedding(
    input,
    position_ids,
    cos_cache,
    sin_cache,
    *,
    interleaved=0,
    num_heads=0,
    rotary_embedding_dim=0,
    is_packed_batching=0,
    scale=1.0,
):
    """RoPE on [B, S, H * D] or [B, H, S, D] input. position_ids [1] is an offset (position
    offset + s for every row), [B, S] gives each token's position."""
    if is_packed_batching:
        raise ValueError("RotaryEmbedding: is_packed_batching is not supported")
    x = np.asarray(input)
    half = cos_cache.shape[1]
    rot = rotary_embedding_dim or 2 * half
    if x.ndim == 3:
        b, s, hidden = x.shape
        head = hidden // num_heads if num_heads else rot
        heads = x.reshape(b, s, hidden // head, head).transpose(0, 2, 1, 3)
    else:
        b, _, s, _ = x.shape
        heads = x
    pos = np.asarray(position_ids).astype(np.int64)
    if pos.size == 1:
        pos = np.broadcast_to(pos.reshape(1, 1) + np.arange(s), (b, s))
    cos = upcast(cos_cache)[pos][:, None, :, : rot // 2]  # [B, 1, S, rot / 2]
    sin = upcast(sin_cache)[pos][:, None, :, : rot // 2]
    y = _rotate(heads, cos, sin, interleaved)
    if x.ndim == 3:
        y = y.transpose(0, 2, 1, 3).reshape(x.shape)
    return y.astype(x.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# Attention, MultiHeadAttention, QAttention: additive masks of mask_filter_value


def _padding_penalty(mask, batch: int, q_len: int, total: int, filter_value: float):
    """A key mask in onnxruntime's formats as an additive [B, 1, S or 1, T] float32 array:
    [B] valid lengths (right padding), [2B] ends then starts (left padding), [B, T] or
    [B, S, T] raw 0 / 1 masks; masked keys get ``filter_value``."""
    if mask is None:
        return None
    mask = np.asarray(mask)
    j = np.arange(total)
    f = np.float32(filter_value)
    if mask.ndim == 1 and mask.shape[0] == batch:
        keep = j[None, :] < mask[:, None]
    elif mask.ndim == 1 and mask.shape[0] == 2 * batch:
        end, start = mask[:batch, None], mask[batch:, None]
        keep = (j[None, :] < end) & (j[None, :] >= start)
    elif mask.ndim == 2:
        if mask.shape[1] != total:
            raise ValueError(f"a [B, {mask.shape[1]}] mask for {total} keys")
        keep = mask != 0
    elif mask.ndim == 3:
        return np.where(mask != 0, np.float32(0), f)[:, None, :, :]
    else:  # (Megatron's 4-D masks included: onnxruntime's CPU kernel refuses them too)
        raise ValueError(f"mask of shape {mask.shape} is not one of onnxruntime's formats")
    return np.where(keep, np.float32(0), f)[:, None, None, :]


def _causal_penalty(q_len: int, total: int, filter_value: float) -> np.ndarray:
    """[S, T]: filter_value where key j lies past query i's position (past + i)."""
    past = total - q_len
    i = np.arange(q_len)[:, None]
    j = np.arange(total)[None, :]
    return np.where(j > past + i, np.float32(filter_value), np.float32(0))


def _clamped(scores: np.ndarray) -> np.ndarray:
    """Scores pushed past the lowest float by a penalty stay at the lowest float."""
    return np.maximum(scores, np.finfo(np.float32).min, out=scores)


def _attend_additive(q, k, v, scale, penalties, attention_bias=None, want_raw=False) -> tuple:
    """softmax(scale * q @ k^T + sum(penalties) + attention_bias) @ v, and the scores before
    the softmax when ``want_raw``."""
    scores = _scores(q, k, scale)
    for p in penalties:
        if p is not None:
            scores += p
    if attention_bias is not None:
        scores += upcast(attention_bias)
    raw = _clamped(scores).copy() if want_raw else None
    probs = _softmax_rows(scores)
    return _weighted(probs, v), raw


def _with_past(k, v, past_k, past_v):
    if past_k is None:
        return k, v
    return (
        np.concatenate([upcast(past_k), k], axis=2),
        np.concatenate([upcast(past_v), v], axis=2),
    )


@op("Attention", since=1, domain=MS, threads="blas")
def attention(
    ctx,
    input,
    weights,
    bias=None,
    mask_index=None,
    past=None,
    attention_bias=None,
    past_sequence_length=None,
    *,
    num_heads,
    qkv_hidden_sizes=None,
    unidirectional=0,
    scale=0.0,
    mask_filter_value=-10000.0,
    do_rotary=0,
    past_present_share_buffer=0,
    rotary_embedding_dim=0,
):
    """BERT / GPT-2 attention with the Q, K, V projections packed in one weight."""
    if do_rotary:
        raise ValueError("Attention: do_rotary is not supported on CPU (as in onnxruntime)")
    if past_present_share_buffer:  # (a CUDA decoding layout: onnxruntime's CPU kernel refuses it)
        raise ValueError("Attention: past_present_share_buffer is not supported on CPU")
    x = upcast(input).astype(np.float32, copy=False)
    # (gemm_f32.c: the packed weight, once per session, the bias added in its epilogue)
    qkv = packed_matmul(x, weights, bias if bias is None or bias.dtype == np.float32 else None)
    if qkv is None:
        qkv = np.matmul(x, upcast(weights).astype(np.float32, copy=False))
        if bias is not None:
            qkv += upcast(bias)
    elif bias is not None and bias.dtype != np.float32:
        qkv += upcast(bias)
    return _attention_from_qkv(
        ctx,
        input.dtype,
        qkv,
        mask_index,
        past,
        attention_bias,
        num_heads,
        qkv_hidden_sizes,
        unidirectional,
        scale,
        mask_filter_value,
    )


def _attention_from_qkv(
    ctx,
    dtype,
    qkv,
    mask_index,
    past,
    attention_bias,
    num_heads,
    qkv_hidden_sizes,
    unidirectional,
    scale,
    mask_filter_value,
) -> tuple:
    batch, q_len, width = qkv.shape
    sizes = list(qkv_hidden_sizes) if qkv_hidden_sizes else [width // 3] * 3
    if sum(sizes) != width:
        raise ValueError(f"qkv_hidden_sizes {sizes} do not add up to the weights' {width} columns")
    if past is None and attention_bias is None and not unidirectional:
        fast = _native_attention(ctx, qkv, sizes, mask_index, num_heads, scale, mask_filter_value)
        if fast is not None:
            return tuple(None if x is None else x.astype(dtype, copy=False) for x in fast)
    q = _bnsh(qkv[..., : sizes[0]], num_heads)
    k = _bnsh(qkv[..., sizes[0] : sizes[0] + sizes[1]], num_heads)
    v = _bnsh(qkv[..., sizes[0] + sizes[1] :], num_heads)
    past_k, past_v = (None, None) if past is None else (past[0], past[1])
    k, v = _with_past(k, v, past_k, past_v)
    present = np.stack([k, v]) if ctx.n_outputs > 1 else None
    total = k.shape[2]
    s = scale or 1 / np.sqrt(q.shape[-1])
    penalties = [_padding_penalty(mask_index, batch, q_len, total, mask_filter_value)]
    if unidirectional:
        penalties.append(_causal_penalty(q_len, total, mask_filter_value))
    y, _ = _attend_additive(q, k, v, s, penalties, attention_bias)
    out = _merged(y).astype(dtype, copy=False)
    return out, None if present is None else present.astype(dtype, copy=False)


def _native_attention(ctx, qkv, sizes, mask_index, num_heads: int, scale, filter_value):
    """A BERT layer's attention (no past, no bias, not causal, a key padding mask or none) on
    attention.c's step: (y, present) or None. The padding penalties are the numpy path's,
    added to the scores per key."""
    batch, q_len, _ = qkv.shape
    if sizes[0] != sizes[1] or sizes[0] != sizes[2] or sizes[0] % num_heads:
        return None
    key_bias = _key_bias(mask_index, batch, q_len, filter_value)
    if key_bias is False:
        return None
    if not scale:
        scale = float(1 / np.sqrt(sizes[0] // num_heads))
    return native.packed_attention(qkv, num_heads, scale, key_bias, ctx.n_outputs > 1)


def _key_bias(mask, batch: int, q_len: int, filter_value: float):
    """The padding penalties of a key mask as [B, T] float32 (_padding_penalty's values), None
    without a mask, False for a mask per query. The exporters' [B, T] 0 / 1 mask directly: one
    numpy call, where the general formats take several."""
    if mask is None:
        return None
    if mask.ndim == 2 and mask.shape == (batch, q_len):
        return np.where(mask != 0, np.float32(0), np.float32(filter_value))
    penalty = _padding_penalty(mask, batch, q_len, q_len, filter_value)
    if penalty.shape[2] != 1:  # (a [B, S, T] mask: per query)
        return False
    return penalty.reshape(batch, q_len)


@op("QAttention", since=1, domain=MS)
def q_attention(
    ctx,
    input,
    weight,
    bias,
    input_scale,
    weight_scale,
    mask_index=None,
    input_zero_point=None,
    weight_zero_point=None,
    past=None,
    *,
    num_heads,
    unidirectional=0,
    scale=0.0,
    mask_filter_value=-10000.0,
    do_rotary=0,
    past_present_share_buffer=0,
):
    """Attention whose packed projection is an 8-bit product: (x - x_zp) @ (W - W_zp) in
    int32, times input_scale * weight_scale (per tensor or per column), plus bias."""
    acc = integer_matmul(input, weight, input_zero_point, weight_zero_point)
    k = np.float32(np.asarray(input_scale).reshape(-1)[0]) * upcast(np.asarray(weight_scale))
    qkv = acc.astype(np.float32) * k.astype(np.float32)
    qkv += upcast(bias)
    return _attention_from_qkv(
        ctx,
        np.asarray(bias).dtype,
        qkv,
        mask_index,
        past,
        None,
        num_heads,
        None,
        unidirectional,
        scale,
        mask_filter_value,
    )


@op("MultiHeadAttention", since=1, domain=MS, threads="blas")
def multi_head_attention(
    ctx,
    query,
    key=None,
    value=None,
    bias=None,
    key_padding_mask=None,
    attention_bias=None,
    past_key=None,
    past_value=None,
    past_sequence_length=None,
    cache_indirection=None,
    *,
    num_heads,
    unidirectional=0,
    scale=0.0,
    mask_filter_value=-10000.0,
):
    """Attention of projected Q, K, V ([B, S, H * D] each; packed QKV [B, S, H, 3, D]; packed KV
    [B, L, H, 2, D]; or K, V already [B, H, L, D], cross attention's cached projections)."""
    if cache_indirection is not None:
        raise ValueError("MultiHeadAttention: cache_indirection (beam search) is not supported")
    dtype = query.dtype
    qf = upcast(query).astype(np.float32, copy=False)
    bias_f = None if bias is None else upcast(bias).astype(np.float32)
    if qf.ndim == 5:  # packed QKV
        b, s, h, _, d = qf.shape
        q, k, v = (qf[:, :, :, i].reshape(b, s, h * d) for i in range(3))
        bias_q, bias_k, bias_v = _bias_parts(bias_f, h * d, h * d)
        q, k, v = _plus(q, bias_q), _plus(k, bias_k), _plus(v, bias_v)
        q, k, v = _bnsh(q, h), _bnsh(k, h), _bnsh(v, h)
    else:
        hidden = qf.shape[-1]
        kf = upcast(key).astype(np.float32, copy=False)
        if kf.ndim == 5:  # packed KV [B, L, H, 2, D]
            b, length, h, _, d = kf.shape
            kf, vf = (
                kf[:, :, :, 0].reshape(b, length, h * d),
                kf[:, :, :, 1].reshape(b, length, h * d),
            )
        else:
            vf = upcast(value).astype(np.float32, copy=False)
        bias_q, bias_k, bias_v = _bias_parts(
            bias_f, hidden, kf.shape[-1] if kf.ndim == 3 else hidden
        )
        q = _bnsh(_plus(qf, bias_q), num_heads)
        if kf.ndim == 4:  # already [B, H, L, D]
            k, v = kf, vf
        else:
            k, v = _bnsh(_plus(kf, bias_k), num_heads), _bnsh(_plus(vf, bias_v), num_heads)
    k, v = _with_past(k, v, past_key, past_value)
    batch, _, q_len, _ = q.shape
    total = k.shape[2]
    s = scale or 1 / np.sqrt(q.shape[-1])
    penalties = [_padding_penalty(key_padding_mask, batch, q_len, total, mask_filter_value)]
    if unidirectional:  # (onnxruntime's MultiHeadAttention: the lowest float, not the filter)
        penalties.append(_causal_penalty(q_len, total, np.finfo(np.float32).min))
    y, raw = _attend_additive(q, k, v, s, penalties, attention_bias, ctx.n_outputs > 3)
    outputs = (
        _merged(y).astype(dtype, copy=False),
        k.astype(dtype, copy=False),
        v.astype(dtype, copy=False),
    )
    return outputs if raw is None else (*outputs, raw.astype(dtype, copy=False))


def _bias_parts(bias, q_size: int, k_size: int):
    if bias is None:
        return None, None, None
    return bias[:q_size], bias[q_size : q_size + k_size], bias[q_size + k_size :]


def _plus(x: np.ndarray, b) -> np.ndarray:
    return x if b is None else x + b


# ---------------------------------------------------------------------------------------------
# GroupQueryAttention

#: KV-cache buffers whose owner lets GroupQueryAttention write each step's rows in place and
#: hand the buffer itself back as present (onnxruntime-genai's past_present_share_buffer, where
#: its loop binds past and present to one buffer): data address -> (the array, its nbytes).
#: Only onyx.genai's loop registers its buffers (share_kv_buffers), for one generation.
_SHARED_KV: dict[int, tuple[np.ndarray, int]] = {}
#: The same buffers by id (a feed that is a view of one is found by its base).
_SHARED_BY_ID: dict[int, np.ndarray] = {}


def share_kv_buffers(buffers) -> None:
    """Let GroupQueryAttention update these float32 C-contiguous cache buffers in place."""
    for a in buffers:
        if a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable:
            _SHARED_KV[a.__array_interface__["data"][0]] = (a, a.nbytes)
            _SHARED_BY_ID[id(a)] = a


def unshare_kv_buffers(buffers) -> None:
    for a in buffers:
        _SHARED_KV.pop(a.__array_interface__["data"][0], None)
        _SHARED_BY_ID.pop(id(a), None)


def shared_kv_buffer(a) -> np.ndarray | None:
    """The registered cache buffer ``a`` views whole (the owner's writable array: a feed is
    a read-only view of it), else None."""
    if not _SHARED_KV or type(a) is not np.ndarray or a.dtype != np.float32:
        return None
    # (a view of the buffer's own shape and strides covers it from its start: found without
    # asking numpy for the data address, which costs microseconds 8 times a token)
    base = a.base if a.base is not None else a
    if _SHARED_BY_ID.get(id(base)) is base and a.shape == base.shape and a.strides == base.strides:
        return base
    entry = _SHARED_KV.get(a.__array_interface__["data"][0])
    if entry is None or entry[1] != a.nbytes or entry[0].shape != a.shape:
        return None
    return entry[0]


_UNSUPPORTED_GQA_INPUTS = {
    12: "k_scale",
    13: "v_scale",
    14: "q_norm_weight",
    15: "k_norm_weight",
    16: "query_seqlens",
}


@op("GroupQueryAttention", since=1, domain=MS, threads="blas")
def group_query_attention(
    ctx,
    query,
    key=None,
    value=None,
    past_key=None,
    past_value=None,
    seqlens_k=None,
    total_sequence_length=None,
    cos_cache=None,
    sin_cache=None,
    position_ids=None,
    attention_bias=None,
    head_sink=None,
    *unsupported,
    num_heads,
    kv_num_heads,
    scale=0.0,
    softcap=0.0,
    local_window_size=-1,
    do_rotary=0,
    rotary_interleaved=0,
    smooth_softmax=0,
    qk_output=0,
    causal=1,
    sliding_window_cache=0,
    kv_cache_bit_width=0,
    k_quant_type="NONE",
    v_quant_type="NONE",
    qk_norm_epsilon=1e-6,
    q_norm_epsilon=None,
    k_norm_epsilon=None,
):
    """Grouped-query attention with a KV cache [B, Hkv, cache length, D].

    For batch entry b, seqlens_k[b] + 1 tokens are valid after this step. A first prompt
    (sequence length == total_sequence_length) starts at position 0; later steps append the
    S new tokens after the seqlens_k[b] + 1 - S cached ones. present_key / present_value
    hold the cached rows then the new ones, zeros after them, over max(past cache length,
    total_sequence_length) rows."""
    for i, x in enumerate(unsupported, start=12):
        if x is not None:
            raise ValueError(
                f"GroupQueryAttention: input {_UNSUPPORTED_GQA_INPUTS.get(i, i)} is not supported"
            )
    if (
        sliding_window_cache
        or (k_quant_type or "NONE") != "NONE"
        or (v_quant_type or "NONE") != "NONE"
    ):
        raise ValueError("GroupQueryAttention: windowed or quantized KV caches are not supported")
    dtype = query.dtype
    qf = upcast(query).astype(np.float32, copy=False)
    batch, q_len, _ = qf.shape
    if key is None:  # packed QKV [B, S, (Hq + 2 Hkv) * D]
        d = qf.shape[-1] // (num_heads + 2 * kv_num_heads)
        cut = (num_heads * d, (num_heads + kv_num_heads) * d)
        q, k, v = qf[..., : cut[0]], qf[..., cut[0] : cut[1]], qf[..., cut[1] :]
    else:
        q = qf
        k = upcast(key).astype(np.float32, copy=False)
        v = upcast(value).astype(np.float32, copy=False)
    head = q.shape[-1] // num_heads

    total = int(np.asarray(total_sequence_length).reshape(-1)[0])
    valid = np.asarray(seqlens_k).astype(np.int64).reshape(-1) + 1  # keys per batch entry
    first_prompt = q_len == total
    past_len = np.zeros(batch, np.int64) if first_prompt else valid - q_len
    pos = _gqa_positions(position_ids, past_len, valid, q_len, first_prompt) if do_rotary else None
    present_k, present_v = _gqa_presents(
        past_key, past_value, past_len, batch, kv_num_heads, head, total
    )
    present_len = present_k.shape[2]
    # keys past every entry's valid length cannot be attended: the product stops there (a
    # shared buffer holds the whole context, most of it not yet written)
    n_keys = int(min(present_len, max(valid.max(initial=0), q_len)))
    s = scale or 1 / np.sqrt(head)
    sink = None
    if head_sink is not None:
        sink = upcast(head_sink).astype(np.float32)
    elif smooth_softmax:
        sink = np.zeros(1, np.float32)

    y = None
    if attention_bias is None and not qk_output:  # (attention.c: the rows written and attended)
        y = native.gqa_step(
            q,
            k,
            v,
            present_k,
            present_v,
            past_len,
            valid,
            pos,
            cos_cache,
            sin_cache,
            sink,
            q_heads=num_heads,
            kv_heads=kv_num_heads,
            n_keys=n_keys,
            interleaved=rotary_interleaved,
            causal=causal,
            window=local_window_size,
            scale=s,
            softcap=softcap,
        )
    if y is not None:
        return y.astype(dtype, copy=False), *(
            p.astype(dtype, copy=False) for p in (present_k, present_v)
        )

    q, k, v = _bnsh(q, num_heads), _bnsh(k, kv_num_heads), _bnsh(v, kv_num_heads)
    if do_rotary:
        cos, sin = upcast(cos_cache)[pos][:, None], upcast(sin_cache)[pos][:, None]
        q, k = _rotate(q, cos, sin, rotary_interleaved), _rotate(k, cos, sin, rotary_interleaved)
    for b in range(batch):
        p = int(past_len[b])
        present_k[b, :, p : p + q_len] = k[b]
        present_v[b, :, p : p + q_len] = v[b]

    keys, values = present_k[:, :, :n_keys], present_v[:, :, :n_keys]
    scores = _scores(q, keys, s)
    if softcap > 0:
        np.tanh(scores / np.float32(softcap), out=scores)
        scores *= np.float32(softcap)
    if attention_bias is not None:
        scores += upcast(attention_bias)[..., :n_keys]
    allowed = _gqa_allowed(past_len, valid, q_len, n_keys, causal, local_window_size)
    raw = np.where(allowed, scores, np.float32(0)) if qk_output == 1 else None
    np.copyto(scores, -np.inf, where=~allowed)
    probs = _softmax_rows(scores, sink)
    y = _merged(_weighted(probs, values)).astype(dtype, copy=False)
    outputs = [y, present_k.astype(dtype, copy=False), present_v.astype(dtype, copy=False)]
    if qk_output:
        qk = np.zeros((batch, num_heads, q_len, present_len), np.float32)
        qk[..., :n_keys] = raw if qk_output == 1 else probs
        outputs.append(qk.astype(dtype, copy=False))
    return tuple(outputs)


def _gqa_presents(
    past_key, past_value, past_len, batch: int, kv_heads: int, head: int, total: int
) -> tuple:
    """present_key / present_value [B, Hkv, max(cache, total), D] float32 holding the cached
    rows (zeros after them): the registered shared buffers themselves when they are long
    enough (the step's rows then go in place, no copy), else new arrays."""
    cache = 0 if past_key is None else past_key.shape[2]
    present_len = max(cache, total)
    shared_k, shared_v = shared_kv_buffer(past_key), shared_kv_buffer(past_value)
    if cache >= total and shared_k is not None and shared_v is not None:
        return shared_k, shared_v
    present_k = np.zeros((batch, kv_heads, present_len, head), np.float32)
    present_v = np.zeros_like(present_k)
    for b in range(batch):
        p = int(past_len[b])
        if p:
            present_k[b, :, :p] = past_key[b, :, :p]
            present_v[b, :, :p] = past_value[b, :, :p]
    return present_k, present_v


def _gqa_positions(position_ids, past_len, valid, q_len: int, first_prompt: bool) -> np.ndarray:
    """[B, S] rotary positions: position_ids when given, else past length + s."""
    if position_ids is not None:
        return np.broadcast_to(np.asarray(position_ids).astype(np.int64), (len(valid), q_len))
    pos = past_len[:, None] + np.arange(q_len)[None, :]
    if first_prompt:  # (rows past a shorter entry's end are padding: onnxruntime uses 1)
        pos = np.where(pos < valid[:, None], pos, 1)
    return pos


def _gqa_allowed(past_len, valid, q_len: int, n_keys: int, causal: int, window: int):
    """[B, 1, S, T] bool: key j is valid for the entry and, when causal, at or before the
    query's position; a local window keeps the window + 1 latest keys."""
    pos = past_len[:, None, None] + np.arange(q_len)[None, :, None]  # [B, S, 1]
    j = np.arange(n_keys)[None, None, :]
    allowed = j < valid[:, None, None]
    if causal:
        allowed = allowed & (j <= pos)
        if window > 0:
            allowed = allowed & (j > pos - window)
    return allowed[:, None]
