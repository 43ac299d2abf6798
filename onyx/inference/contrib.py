"""Shape and type rules of onnxruntime's transformer contrib ops (com.microsoft).

onyx has no schemas for the com.microsoft domain, so without these rules every value after a
fused attention or normalization would be untyped; the shapes follow onnxruntime's contrib
operator documentation.
"""

from __future__ import annotations

from ..ir import DataType
from . import symbolic as sym
from .engine import NodeContext, rule

MS = "com.microsoft"


def _known(*dims) -> bool:
    return all(isinstance(d, int) for d in dims)


def _div(a, b):
    return sym.floordiv(a, b) if b != 0 else None


_add = sym.add


def _total_length(past_len, new_len):
    """past + new sequence length (0 past: the new length itself, symbolic or not)."""
    if past_len == 0:
        return new_len
    return _add(past_len, new_len)


@rule("FastGelu", "BiasGelu", "Gelu", "QuickGelu", "BiasAdd", domain=MS)
def same_as_input(ctx: NodeContext) -> None:
    ctx.same(0, 0)


@rule("BiasSplitGelu", domain=MS)
def bias_split_gelu(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    ctx.set(0, ctx.dtype(0), None if x is None else (*x[:-1], _div(x[-1], 2)))


def _norm_outputs(ctx: NodeContext, stats_of) -> None:
    """Output 0 like input 0; the statistics float32 with the normalized axes kept as 1; the
    sum (output 3) like input 0."""
    x = ctx.shape(0)
    ctx.same(0, 0)
    stats = None if x is None else stats_of(x)
    stat_type = DataType.DOUBLE if ctx.dtype(0) == DataType.DOUBLE else DataType.FLOAT
    for i in range(1, len(ctx.node.outputs)):
        if i == 3:
            ctx.same(3, 0)
        else:
            ctx.set(i, stat_type, stats)


@rule("SkipLayerNormalization", "SkipSimplifiedLayerNormalization", domain=MS)
def skip_layer_norm(ctx: NodeContext) -> None:
    _norm_outputs(ctx, lambda x: (*x[:-1], 1))


def _simplified(ctx: NodeContext) -> None:
    axis = ctx.attr("axis", -1)
    rank = ctx.rank(0)

    def stats(x):
        a = axis + len(x) if axis < 0 else axis
        return (*x[:a], *([1] * (len(x) - a)))

    _norm_outputs(ctx, stats if rank is not None else lambda x: None)


rule("SimplifiedLayerNormalization")(_simplified)
rule("SimplifiedLayerNormalization", domain=MS)(_simplified)


@rule("EmbedLayerNormalization", domain=MS)
def embed_layer_norm(ctx: NodeContext) -> None:
    ids, word = ctx.shape(0), ctx.shape(2)
    batch, seq = (None, None) if ids is None else ids
    hidden = None if word is None else word[-1]
    ctx.set(0, ctx.dtype(2), (batch, seq, hidden))
    if len(ctx.node.outputs) > 1:
        ctx.set(1, DataType.INT32, (batch,))
    if len(ctx.node.outputs) > 2:
        ctx.set(2, ctx.dtype(2), (batch, seq, hidden))


@rule("MatMulNBits", domain=MS)
def matmul_nbits(ctx: NodeContext) -> None:
    a = ctx.shape(0)
    ctx.set(0, ctx.dtype(0), None if a is None else (*a[:-1], ctx.attr("N")))


@rule("GatherBlockQuantized", domain=MS)
def gather_block_quantized(ctx: NodeContext) -> None:
    data, idx = ctx.shape(0), ctx.shape(1)
    if data is None or idx is None:
        ctx.set(0, ctx.dtype(2), None)
        return
    rank = len(data)
    axis = ctx.attr("gather_axis", 0)
    axis = axis + rank if axis < 0 else axis
    dims = list(data)
    bits = ctx.attr("bits", 4)
    if ctx.dtype(0) == DataType.UINT8 and bits < 8 and isinstance(dims[-1], int):
        dims[-1] = dims[-1] * (8 // bits)  # (values packed along the last axis)
    ctx.set(0, ctx.dtype(2), (*dims[:axis], *idx, *dims[axis + 1 :]))


@rule("RotaryEmbedding", domain=MS)
def rotary_embedding(ctx: NodeContext) -> None:
    ctx.same(0, 0)


@rule("Attention", "QAttention", domain=MS)
def attention(ctx: NodeContext) -> None:
    x, w = ctx.shape(0), ctx.shape(1)
    out_type = ctx.dtype(0) if ctx.node.op_type == "Attention" else ctx.dtype(2)
    heads = ctx.attr("num_heads")
    if x is None or w is None:
        ctx.set(0, out_type, None)
        return
    sizes = ctx.attr("qkv_hidden_sizes", None) if ctx.node.op_type == "Attention" else None
    width = w[-1]
    v_hidden = sizes[2] if sizes else _div(width, 3)
    ctx.set(0, out_type, (x[0], x[1], v_hidden))
    if len(ctx.node.outputs) > 1:
        past = ctx.shape(4 if ctx.node.op_type == "Attention" else 8)
        head = _div(v_hidden, heads)
        if ctx.node.op_type == "Attention" and ctx.attr("past_present_share_buffer", 0) and past:
            ctx.set(1, out_type, past)
            return
        total = x[1] if past is None else _total_length(past[3], x[1])
        ctx.set(1, out_type, (2, x[0], heads, total, head))


@rule("MultiHeadAttention", domain=MS)
def multi_head_attention(ctx: NodeContext) -> None:
    q, k, v = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    heads = ctx.attr("num_heads")
    t = ctx.dtype(0)
    if q is None:
        ctx.set(0, t, None)
        return
    if len(q) == 5:  # packed QKV [B, S, H, 3, D]
        batch, seq, v_hidden, head, kv_len = q[0], q[1], None, q[4], q[1]
        v_hidden = heads * head if _known(head) else None
    else:
        batch, seq = q[0], q[1]
        head = _div(q[2], heads)
        if k is not None and len(k) == 5:  # packed KV [B, L, H, 2, D]
            kv_len, v_hidden = k[1], _mul(k[2], k[4])
        elif v is not None and len(v) == 4:  # [B, H, L, D]
            kv_len, v_hidden = v[2], _mul(v[1], v[3])
        elif v is not None:
            kv_len, v_hidden = v[1], v[2]
        else:
            kv_len, v_hidden = None, None
    ctx.set(0, t, (batch, seq, v_hidden))
    past = ctx.shape(6)
    total = kv_len if past is None else _total_length(past[2], kv_len)
    for i in (1, 2):
        if len(ctx.node.outputs) > i:
            ctx.set(i, t, (batch, heads, total, head))
    if len(ctx.node.outputs) > 3:
        ctx.set(3, t, (batch, heads, seq, total))


_mul = sym.mul


@rule("GroupQueryAttention", domain=MS)
def group_query_attention(ctx: NodeContext) -> None:
    q = ctx.shape(0)
    heads, kv_heads = ctx.attr("num_heads"), ctx.attr("kv_num_heads")
    t = ctx.dtype(0)
    if q is None:
        ctx.set(0, t, None)
        return
    packed = not ctx.has(1)
    head = _div(q[2], heads + 2 * kv_heads) if packed else _div(q[2], heads)
    ctx.set(0, t, (q[0], q[1], _mul(head, heads)))
    past = ctx.shape(3)
    total = ctx.data(6) if ctx.has(6) else None
    total = total.dims[0] if total is not None and len(total.dims) == 1 else None
    if past is not None:
        # (onnxruntime's tool reports the past's length; the present holds the whole sequence)
        present_len = sym.dmax(past[2], total)
    else:
        present_len = total if total is not None else q[1]
    cache_type = ctx.dtype(3) or t
    for i in (1, 2):
        if len(ctx.node.outputs) > i:
            ctx.set(i, cache_type, (q[0], kv_heads, present_len, head))
    if len(ctx.node.outputs) > 3 and ctx.attr("qk_output", 0):
        ctx.set(3, t, (q[0], heads, q[1], present_len))


@rule("DynamicQuantizeMatMul", "MatMulIntegerToFloat", domain=MS)
def quantized_matmul(ctx: NodeContext) -> None:
    """A @ B's shape; the float type of A (DynamicQuantizeMatMul) or of the scales."""
    from .nn import _matmul_shape

    dtype = ctx.dtype(0) if ctx.node.op_type == "DynamicQuantizeMatMul" else ctx.dtype(2)
    ctx.set(0, dtype, _matmul_shape(ctx.shape(0), ctx.shape(1), ctx))


# -- onnxruntime's QOperator ops (quantize_static with QOperator format) --------------------------


@rule("QLinearAdd", "QLinearMul", domain=MS)
def qlinear_binary(ctx: NodeContext) -> None:
    """A, A_scale, A_zp, B, B_scale, B_zp, ...: broadcasting A with B, in A's integer type."""
    from .elementwise import broadcast

    ctx.set(0, ctx.dtype(0), broadcast([ctx.shape(0), ctx.shape(3)], ctx))


@rule("QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", domain=MS)
def qlinear_unary(ctx: NodeContext) -> None:
    ctx.same(0, 0)


@rule("QLinearGlobalAveragePool", domain=MS)
def qlinear_global_pool(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    if x is None:
        ctx.set(0, ctx.dtype(0), None)
    elif ctx.attr("channels_last", 0):
        ctx.set(0, ctx.dtype(0), (x[0], *([1] * (len(x) - 2)), x[-1]))
    else:
        ctx.set(0, ctx.dtype(0), (x[0], x[1], *([1] * (len(x) - 2))))


@rule("QLinearConcat", domain=MS)
def qlinear_concat(ctx: NodeContext) -> None:
    """Y_scale, Y_zp, then (X, X_scale, X_zp) per input: Concat of the Xs along ``axis``."""
    shapes = [ctx.shape(i) for i in range(2, ctx.n_inputs, 3)]
    if not shapes or any(s is None for s in shapes):
        ctx.set(0, ctx.dtype(2), None)
        return
    r = len(shapes[0])
    axis = ctx.attr("axis", 0) % max(r, 1)
    dims = list(shapes[0])
    dims[axis] = sym.total(s[axis] for s in shapes)
    ctx.set(0, ctx.dtype(2), dims)
