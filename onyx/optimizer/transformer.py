"""Transformer patterns: the erf and tanh GELUs, GELU bias, the decomposed layer normalization,
each into one op.

The erf GELU becomes ai.onnx Gelu (opset >= 20) or com.microsoft Gelu, the tanh GELU
com.microsoft FastGelu, a bias Add before either com.microsoft BiasGelu / FastGelu with bias; the
layer norm becomes LayerNormalization (opset >= 17). All match the subgraphs PyTorch exporters
write, and every fused op is one onnxruntime loads.
"""

from __future__ import annotations

import math

import numpy as np

from .. import ir
from .core import (
    EXTENDED,
    MS,
    PassContext,
    graph_pass,
    is_op,
    other_input,
    scale_of,
    static_shape,
)

_FLOATS = {ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16}


def _near(value: float | None, target: float, rel: float = 1e-3) -> bool:
    return value is not None and abs(value - target) <= rel * abs(target)


def _const_operand(ctx: PassContext, node: ir.Node, v: ir.Value) -> float | None:
    """The scalar constant ``node`` combines with ``v``."""
    o = other_input(node, v)
    return ctx.scalar(o) if o is not None else None


def _next(ctx: PassContext, v: ir.Value, *op_types: str) -> ir.Node | None:
    """The only reader of ``v``, when it is one of ``op_types``."""
    n = ctx.single_use(v)
    return n if is_op(n, *op_types) else None


def _gelu_input(ctx: PassContext, erf: ir.Node):
    """x when erf's input is x / sqrt(2) or x * (1 / sqrt(2)), with the scaling node."""
    scaled = erf.inputs[0]
    s = scaled.producer
    if ctx.single_use(scaled) is not erf:
        return None, None
    if is_op(s, "Div") and _near(ctx.scalar(s.inputs[1]), math.sqrt(2)):
        return s.inputs[0], s
    if is_op(s, "Mul"):
        for x, c in (s.inputs, s.inputs[::-1]):
            if _near(ctx.scalar(c), 1 / math.sqrt(2)):
                return x, s
    return None, None


def _gelu_tail(ctx: PassContext, add: ir.Node, x: ir.Value):
    """The node giving 0.5 * x * (1 + erf(..)) in one of its three orders, and the extra nodes."""
    m1 = _next(ctx, add.outputs[0], "Mul")
    if m1 is None:
        return None, []
    o = other_input(m1, add.outputs[0])
    if o is x:  # (x * (1 + erf)) * 0.5
        m2 = _next(ctx, m1.outputs[0], "Mul")
        if m2 is not None and _near(_const_operand(ctx, m2, m1.outputs[0]), 0.5):
            return m2, [m1]
    elif _near(ctx.scalar(o), 0.5):  # x * ((1 + erf) * 0.5)
        m2 = _next(ctx, m1.outputs[0], "Mul")
        if m2 is not None and other_input(m2, m1.outputs[0]) is x:
            return m2, [m1]
    elif is_op(o.producer, "Mul") and ctx.single_use(o) is m1:  # (x * 0.5) * (1 + erf)
        h = o.producer
        if other_input(h, x) is not None and _near(_const_operand(ctx, h, x), 0.5):
            return m1, [h]
    return None, []


@graph_pass("GeluFusion", EXTENDED)
def gelu_fusion(ctx: PassContext) -> bool:
    """0.5 * x * (1 + erf(x / sqrt(2)))  =>  Gelu(x)."""
    changed = False
    for erf in ctx.graph:
        if not is_op(erf, "Erf") or erf.graph is None:
            continue
        x, scale = _gelu_input(ctx, erf)
        if x is None or (isinstance(x.type, ir.TensorType) and x.type.elem_type not in _FLOATS):
            continue
        add = _next(ctx, erf.outputs[0], "Add")
        if add is None or not _near(_const_operand(ctx, add, erf.outputs[0]), 1.0):
            continue
        last, extra = _gelu_tail(ctx, add, x)
        if last is None:
            continue
        if ctx.opset() >= 20:
            gelu = ir.Node("Gelu", [x], 1, name=ctx.fresh_name((erf.name or "gelu") + "_fused"))
        else:
            ctx.ensure_opset(MS)
            gelu = ir.Node(
                "Gelu", [x], 1, domain=MS, name=ctx.fresh_name((erf.name or "gelu") + "_fused")
            )
        ctx.replace_nodes(last, gelu, [scale, erf, add, *extra])
        ctx.count("GeluFusion")
        changed = True
    return changed


# -------------------------------------------------------------------------------- tanh GELU


def _cube_of(ctx: PassContext, v: ir.Value) -> tuple[ir.Value | None, list]:
    """x when v is x^3: Pow(x, 3), x * (x * x) or (x * x) * x; with the nodes."""
    n = v.producer
    if is_op(n, "Pow") and ctx.scalar(n.inputs[1]) == 3.0:
        return n.inputs[0], [n]
    if is_op(n, "Mul"):
        for x, sq in (n.inputs, n.inputs[::-1]):
            s = sq.producer
            if is_op(s, "Mul") and s.inputs[0] is x and s.inputs[1] is x:
                if ctx.single_use(sq) is n:
                    return x, [s, n]
    return None, []


def _scaled_by(ctx: PassContext, node: ir.Node | None, target: float):
    """For Mul(v, c) or Mul(c, v) with scalar c near target: v."""
    if not is_op(node, "Mul"):
        return None
    for v, c in (node.inputs, node.inputs[::-1]):
        if _near(ctx.scalar(c), target):
            return v
    return None


def _tanh_gelu_input(ctx: PassContext, tanh: ir.Node):
    """x when tanh's input is sqrt(2/pi) * (x + 0.044715 * x^3), with the nodes."""
    ks = tanh.inputs[0].producer
    inner = _scaled_by(ctx, ks, math.sqrt(2 / math.pi))
    if inner is None or ctx.single_use(tanh.inputs[0]) is not tanh:
        return None, []
    add = inner.producer
    if not is_op(add, "Add") or ctx.single_use(inner) is not ks:
        return None, []
    for x, m in (add.inputs, add.inputs[::-1]):
        cube = _scaled_by(ctx, m.producer, 0.044715)
        if cube is None or ctx.single_use(m) is not add or ctx.single_use(cube) is not m.producer:
            continue
        base, cube_nodes = _cube_of(ctx, cube)
        if base is x:
            return x, [*cube_nodes, m.producer, add, ks]
    return None, []


@graph_pass("FastGeluFusion", EXTENDED)
def fast_gelu_fusion(ctx: PassContext) -> bool:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))  =>  com.microsoft FastGelu(x);
    so is ai.onnx Gelu(approximate='tanh') (the same function), for the fused kernel."""
    changed = False
    for node in ctx.graph:
        if is_op(node, "Gelu") and node.attr("approximate", "none") == "tanh":
            if _is_float32(node.inputs[0]) and node.graph is not None:
                _emit(ctx, "FastGelu", node.inputs[0], node, [])
                changed = True
            continue
        if not is_op(node, "Tanh") or node.graph is None:
            continue
        x, dead = _tanh_gelu_input(ctx, node)
        if x is None or not _is_float32(x):
            continue
        plus = _next(ctx, node.outputs[0], "Add")
        if plus is None or not _near(_const_operand(ctx, plus, node.outputs[0]), 1.0):
            continue
        last, extra = _gelu_tail(ctx, plus, x)
        if last is None:
            continue
        _emit(ctx, "FastGelu", x, last, [*dead, node, plus, *extra])
        changed = True
    return changed


def _is_float32(v: ir.Value) -> bool:
    # onnxruntime's CPU kernels of FastGelu / BiasGelu are float32 only
    return isinstance(v.type, ir.TensorType) and v.type.elem_type == ir.DataType.FLOAT


def _emit(ctx: PassContext, op_type: str, x: ir.Value, last: ir.Node, dead: list) -> None:
    ctx.ensure_opset(MS)
    fused = ir.Node(
        op_type, [x], 1, domain=MS, name=ctx.fresh_name((last.name or op_type.lower()) + "_fused")
    )
    ctx.replace_nodes(last, fused, dead)
    ctx.count(op_type + "Fusion")


@graph_pass("BiasGeluFusion", EXTENDED)
def bias_gelu_fusion(ctx: PassContext) -> bool:
    """Add(v, bias) -> GELU  =>  com.microsoft BiasGelu(v, bias) (erf GELU) or FastGelu(v, bias)
    (tanh GELU), bias a constant vector over the last axis: the add happens in the GELU's pass."""
    changed = False
    for node in ctx.graph:
        erf_gelu = (is_op(node, "Gelu") and node.attr("approximate", "none") == "none") or (
            node.domain == MS and node.op_type == "Gelu"
        )
        fast = node.domain == MS and node.op_type == "FastGelu" and len(node.inputs) == 1
        if not (erf_gelu or fast) or node.graph is None:
            continue
        add = node.inputs[0].producer
        if not is_op(add, "Add") or ctx.single_use(node.inputs[0]) is not node:
            continue
        shape = static_shape(node.inputs[0])
        for v, b in (add.inputs, add.inputs[::-1]):
            bias = ctx.const(b)
            if (
                bias is not None
                and bias.ndim == 1
                and shape
                and shape[-1] == bias.shape[0]
                and static_shape(v) == shape
                and _is_float32(v)
                and bias.dtype == np.float32
            ):
                break
        else:
            continue
        op_type = "FastGelu" if fast else "BiasGelu"
        ctx.ensure_opset(MS)
        fused = ir.Node(
            op_type, [v, b], 1, domain=MS, name=ctx.fresh_name((node.name or "gelu") + "_bias")
        )
        ctx.replace_nodes(node, fused, [add])
        ctx.count("BiasGeluFusion")
        changed = True
    return changed


# ----------------------------------------------------------------------- layer normalization


def _axes(ctx: PassContext, node: ir.Node, rank: int) -> list[int] | None:
    axes = node.attr("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None:
        c = ctx.const(node.inputs[1])
        axes = None if c is None else c.reshape(-1).tolist()
    if axes is None or not node.attr("keepdims", 1):
        return None
    return sorted(int(a) % rank for a in axes)


@graph_pass("LayerNormFusion", EXTENDED)
def layer_norm_fusion(ctx: PassContext) -> bool:
    """(x - mean) / sqrt(mean((x - mean)^2) + eps) [* gamma] [+ beta]  =>  LayerNormalization
    over the trailing axes the means reduce."""
    if ctx.opset() < 17:
        return False
    changed = False
    for rm1 in ctx.graph:
        if not is_op(rm1, "ReduceMean") or rm1.graph is None:
            continue
        m = _match_layer_norm(ctx, rm1)
        if m is None:
            continue
        x, axis, eps, gamma, beta, last, dead = m
        ln = ir.Node("LayerNormalization", [x, gamma] + ([beta] if beta is not None else []), 1)
        ln.name = ctx.fresh_name((rm1.name or "layernorm") + "_fused")
        ln.set_attr("axis", axis)
        ln.set_attr("epsilon", float(eps))
        ctx.replace_nodes(last, ln, dead)
        ctx.count("LayerNormFusion")
        changed = True
    return changed


def _match_layer_norm(ctx: PassContext, rm1: ir.Node):
    x = rm1.inputs[0]
    shape = static_shape(x)
    if shape is None or not isinstance(x.type, ir.TensorType) or x.type.elem_type not in _FLOATS:
        return None
    rank = len(shape)
    axes = _axes(ctx, rm1, rank)
    if not axes or axes != list(range(rank - len(axes), rank)):
        return None
    norm_shape = shape[rank - len(axes) :]
    if not all(isinstance(d, int) for d in norm_shape):
        return None
    sub = _next(ctx, rm1.outputs[0], "Sub")
    if sub is None or sub.inputs[0] is not x or sub.inputs[1] is not rm1.outputs[0]:
        return None
    d = sub.outputs[0]
    readers = d.consumers()
    if len(readers) != 2 or ctx.is_output(d):
        return None
    sq = next((n for n in readers if not is_op(n, "Div")), None)
    div = next((n for n in readers if is_op(n, "Div")), None)
    if sq is None or div is None or div.inputs[0] is not d:
        return None
    if not (
        (is_op(sq, "Pow") and sq.inputs[0] is d and ctx.scalar(sq.inputs[1]) == 2.0)
        or (is_op(sq, "Mul") and sq.inputs[0] is d and sq.inputs[1] is d)
    ):
        return None
    rm2 = _next(ctx, sq.outputs[0], "ReduceMean")
    if rm2 is None or _axes(ctx, rm2, rank) != axes:
        return None
    add = _next(ctx, rm2.outputs[0], "Add")
    eps = _const_operand(ctx, add, rm2.outputs[0]) if add is not None else None
    sqrt = _next(ctx, add.outputs[0], "Sqrt") if eps is not None else None
    if sqrt is None or ctx.single_use(sqrt.outputs[0]) is not div:
        return None
    dtype = np.dtype(ir.to_numpy(x.type.elem_type))
    last, dead = div, [rm1, sub, sq, rm2, add, sqrt]
    gamma = beta = None
    mul = _next(ctx, div.outputs[0], "Mul")
    g = ctx.const(other_input(mul, div.outputs[0])) if mul is not None else None
    g = _as_norm(g, norm_shape)
    if g is not None and g.dtype == dtype:
        gamma = ctx.add_const(g, "layernorm_scale")
        dead.append(last)
        last = mul
        plus = _next(ctx, mul.outputs[0], "Add")
        b = ctx.const(other_input(plus, mul.outputs[0])) if plus is not None else None
        b = _as_norm(b, norm_shape)
        if b is not None and b.dtype == dtype:
            beta = ctx.add_const(b, "layernorm_bias")
            dead.append(last)
            last = plus
    if gamma is None:
        gamma = ctx.add_const(np.ones(norm_shape, dtype), "layernorm_scale")
    return x, -len(axes), eps, gamma, beta, last, dead


def _as_norm(c: np.ndarray | None, norm_shape: tuple) -> np.ndarray | None:
    """A constant that broadcasts exactly as an array of the normalized shape, reshaped to it."""
    if c is None:
        return None
    n = len(norm_shape)
    lead, tail = c.shape[: max(0, c.ndim - n)], c.shape[max(0, c.ndim - n) :]
    full = (1,) * (n - len(tail)) + tuple(tail)
    if any(d != 1 for d in lead) or any(a != b and a != 1 for a, b in zip(full, norm_shape)):
        return None
    return np.ascontiguousarray(np.broadcast_to(c.reshape(full), norm_shape))


# ------------------------------------------------------------------------------ scaled MatMul
# (registered after the GELU fusions: their final Mul(0.5) must not be taken as a MatMul scale)


def _scaled_operand(ctx: PassContext, v: ir.Value, mm: ir.Node):
    """(x, c, node) when MatMul operand v is x * c (read by nothing else), else None."""
    p = v.producer
    if p is None or ctx.single_use(v) is not mm:
        return None
    for x in p.inputs if is_op(p, "Mul") else p.inputs[:1] if is_op(p, "Div") else ():
        c = scale_of(ctx, p, x)
        if c is not None and ctx.const(x) is None:
            return x, c, p
    return None


@graph_pass("MatMulScaleFusion", EXTENDED)
def matmul_scale(ctx: PassContext) -> bool:
    """MatMul whose result or operands are scaled by scalar constants (attention's 1/sqrt(d),
    applied after Q @ K^T or split over Q and K^T)  =>  com.microsoft FusedMatMul(alpha): the
    scale costs no pass of its own. Float32 only (onnxruntime's CPU kernel)."""
    changed = False
    for mm in ctx.graph:
        if (
            not is_op(mm, "MatMul")
            or mm.graph is None
            or mm.inputs[0] is None
            or not _is_float32(mm.inputs[0])
        ):
            continue
        alpha, inputs, dead = 1.0, list(mm.inputs), []
        for i, v in enumerate(mm.inputs):
            found = _scaled_operand(ctx, v, mm)
            if found is not None:
                inputs[i], c, node = found
                alpha *= c
                dead.append(node)
        last = mm
        after = ctx.single_use(mm.outputs[0])
        c = scale_of(ctx, after, mm.outputs[0]) if after is not None else None
        if c is not None:
            alpha *= c
            dead.append(mm)
            last = after
        if not dead:
            continue
        fused = ir.Node(
            "FusedMatMul",
            inputs,
            1,
            domain=MS,
            name=ctx.fresh_name((mm.name or "matmul") + "_scaled"),
        )
        fused.set_attr("alpha", float(alpha))
        ctx.ensure_opset(MS)
        ctx.replace_nodes(last, fused, dead)
        ctx.count("MatMulScaleFusion")
        changed = True
    return changed


def _is_float32(v: ir.Value | None) -> bool:
    return (
        v is not None
        and isinstance(v.type, ir.TensorType)
        and v.type.elem_type == ir.DataType.FLOAT
    )


# ---------------------------------------------------------------------------------- attention
# (after MatMulScaleFusion: the scores' scale arrives as FusedMatMul's alpha)


def _scores(ctx: PassContext, v: ir.Value):
    """(q, k^T, scale, node) when v is q @ k^T [* scale]: MatMul, or FusedMatMul without
    transposes."""
    n = v.producer
    if is_op(n, "MatMul"):
        return n.inputs[0], n.inputs[1], 1.0, n
    if n is not None and n.domain == MS and n.op_type == "FusedMatMul":
        flags = ("transA", "transB", "transBatchA", "transBatchB")
        if not any(n.attr(f, 0) for f in flags):
            return n.inputs[0], n.inputs[1], float(n.attr("alpha", 1.0)), n
    return None


def _attention_mask(ctx: PassContext, node: ir.Node, scores: ir.Value):
    """("not", c) for Where(c, -inf, scores) (the boolean mask is not c), ("add", m) for
    Add(scores, m) (a float mask); None if neither."""
    if ctx.single_use(scores) is not node:
        return None
    if is_op(node, "Where") and node.inputs[2] is scores:
        fill, c = ctx.scalar(node.inputs[1]), ctx.const(node.inputs[0])
        # a finite fill (exporters write -10000 or the float minimum) acts as -inf once exp
        # underflows, except on a row masking every key: only taken from a constant mask
        # without such rows (a causal one)
        if fill == -math.inf or (
            fill is not None
            and fill <= -1e4
            and c is not None
            and c.ndim
            and not np.all(c, axis=-1).any()
        ):
            return "not", node.inputs[0]
    elif is_op(node, "Add"):
        m = other_input(node, scores)
        if m is not None and _is_float32(m):
            return "add", m
    return None


def _mask_value(ctx: PassContext, kind: str, m: ir.Value, anchor: ir.Node) -> ir.Value:
    """The Attention mask input: m itself (float), or not m (a constant folds to an additive
    0 / -inf mask: a plain add in the kernel, where a boolean one is a masked copy)."""
    if kind == "add":
        return m
    c = ctx.const(m)
    if c is not None:
        return ctx.add_const(np.where(c, -np.inf, 0).astype(np.float32), "attention_mask")
    inv = ir.Node("Not", [m], [ctx.fresh_name("attention_mask")])
    ctx.graph.insert_before(anchor, inv)
    return inv.outputs[0]


def _mask_fits(mask: ir.Value, scores_shape: tuple) -> bool:
    """The mask broadcasts to the scores without growing them (Attention's rule), and spans
    their last two axes (onnxruntime's kernel does not broadcast those)."""
    s = static_shape(mask)
    if s is None or not 2 <= len(s) <= len(scores_shape):
        return False
    if any(d != e or d is None for d, e in zip(s[-2:], scores_shape[-2:])):
        return False
    return all(d == 1 or d == e for d, e in zip(s[::-1], scores_shape[::-1]))


def _keys(ctx: PassContext, kt: ir.Value, anchor: ir.Node):
    """k [B, N, T, H] from k^T [B, N, H, T]: the input of a transposing producer with the last
    two axes of its perm swapped (one transpose for another), else a new transpose of kt."""
    t = kt.producer
    perm = t.attr("perm") if is_op(t, "Transpose") else None
    src = t.inputs[0] if perm is not None and len(perm) == 4 else kt
    perm = [perm[0], perm[1], perm[3], perm[2]] if src is not kt else [0, 1, 3, 2]
    if src is not kt and perm == [0, 1, 2, 3]:
        return src
    node = ir.Node("Transpose", [src], [ctx.fresh_name(kt.name + "_keys")])
    node.set_attr("perm", perm)
    ctx.graph.insert_before(anchor, node)
    return node.outputs[0]


@graph_pass("AttentionFusion", EXTENDED)
def attention_fusion(ctx: PassContext) -> bool:
    """softmax(q @ k^T * scale [masked by Where(c, -inf, .) or + mask]) @ v, all 4-D
    [batch, heads, seq, size] float32  =>  ai.onnx Attention (opset >= 23): one kernel that
    keeps one score buffer (scale folded into q, mask and softmax in place)."""
    if ctx.opset() < 23:
        return False
    changed = False
    for sm in ctx.graph:
        if not is_op(sm, "Softmax") or sm.graph is None or sm.attr("axis", -1) not in (-1, 3):
            continue
        out = _next(ctx, sm.outputs[0], "MatMul")
        if out is None or out.inputs[0] is not sm.outputs[0]:
            continue
        masking = sm.inputs[0].producer
        found = _scores(ctx, sm.inputs[0])
        mask = None
        if found is None and masking is not None and ctx.single_use(sm.inputs[0]) is sm:
            for s in masking.inputs:
                found = _scores(ctx, s) if s is not None else None
                if found is not None:
                    mask = _attention_mask(ctx, masking, s)
                    if mask is None:
                        found = None
                    break
        elif found is not None:
            masking = None
        if found is None:
            continue
        q, kt, scale, mm = found
        v = out.inputs[1]
        shapes = [static_shape(x) for x in (q, kt, v, mm.outputs[0])]
        if (
            any(s is None or len(s) != 4 for s in shapes)
            or not all(_is_float32(x) for x in (q, kt, v))
            or (masking is not None and ctx.single_use(mm.outputs[0]) is not masking)
            or (masking is None and ctx.single_use(mm.outputs[0]) is not sm)
            or (mask is not None and not _mask_fits(mask[1], shapes[3]))
        ):
            continue
        k = _keys(ctx, kt, out)
        extra = [] if mask is None else [_mask_value(ctx, *mask, out)]
        att = ir.Node(
            "Attention",
            [q, k, v, *extra],
            1,
            name=ctx.fresh_name((sm.name or "attention") + "_fused"),
        )
        att.set_attr("scale", float(scale))
        dead = [mm, sm] + ([masking] if masking is not None else [])
        ctx.replace_nodes(out, att, dead)
        ctx.count("AttentionFusion")
        changed = True
    return changed
