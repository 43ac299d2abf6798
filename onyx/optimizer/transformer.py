"""Transformer patterns: the erf and tanh GELUs, GELU bias, the decomposed layer normalization,
each into one op.

The erf GELU becomes ai.onnx Gelu (opset >= 20) or com.microsoft Gelu, the tanh GELU
com.microsoft FastGelu, a bias Add before either com.microsoft BiasGelu / FastGelu with bias; the
layer norm becomes LayerNormalization (opset >= 17). All match the subgraphs PyTorch exporters
write, and every fused op is one onnxruntime loads.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from .core import (
    EXTENDED,
    MS,
    PassContext,
    graph_pass,
    is_op,
    other_input,
    same_dims,
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
    for erf in ctx.nodes_of("Erf"):
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


def _is_float32(v: ir.Value | None) -> bool:
    # onnxruntime's CPU kernels of FastGelu / BiasGelu are float32 only
    return (
        v is not None
        and isinstance(v.type, ir.TensorType)
        and v.type.elem_type == ir.DataType.FLOAT
    )


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
    for rm1 in ctx.nodes_of("ReduceMean"):
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


@graph_pass("RMSNormFusion", EXTENDED)
def rms_norm_fusion(ctx: PassContext) -> bool:
    """x * 1 / sqrt(mean(x^2) + eps) [* gamma] over the last axis (Reciprocal and Mul, or Div;
    PyTorch's exports of an RMSNorm)  =>  SimplifiedLayerNormalization (ONNX domain), one
    native pass a row (attention.c) where the chain was six numpy passes."""
    changed = False
    for rm in ctx.nodes_of("ReduceMean"):
        if not is_op(rm, "ReduceMean") or rm.graph is None:
            continue
        m = _match_rms_norm(ctx, rm)
        if m is None:
            continue
        x, eps, gamma, last, dead = m
        # (onnxruntime registers it in the ONNX domain, and its own fusion writes it there)
        norm = ir.Node(
            "SimplifiedLayerNormalization",
            [x, gamma],
            1,
            name=ctx.fresh_name((rm.name or "rmsnorm") + "_fused"),
        )
        norm.set_attr("axis", -1)
        norm.set_attr("epsilon", float(eps))
        ctx.replace_nodes(last, norm, dead)
        ctx.count("RMSNormFusion")
        changed = True
    return changed


def _squared(ctx: PassContext, sq: ir.Node | None) -> ir.Value | None:
    """x where sq is Pow(x, 2) or Mul(x, x)."""
    if is_op(sq, "Pow") and ctx.scalar(sq.inputs[1]) == 2.0:
        return sq.inputs[0]
    if is_op(sq, "Mul") and sq.inputs[0] is sq.inputs[1]:
        return sq.inputs[0]
    return None


def _match_rms_norm(ctx: PassContext, rm: ir.Node):
    """(x, eps, gamma, last node, dead nodes) of an RMSNorm chain from its ReduceMean."""
    sq = rm.inputs[0].producer
    x = _squared(ctx, sq)
    shape = static_shape(x)
    if x is None or shape is None or not _is_float32(x) or not isinstance(shape[-1], int):
        return None
    if ctx.single_use(rm.inputs[0]) is not rm or _axes(ctx, rm, len(shape)) != [len(shape) - 1]:
        return None
    add = _next(ctx, rm.outputs[0], "Add")
    eps = _const_operand(ctx, add, rm.outputs[0]) if add is not None else None
    sqrt = _next(ctx, add.outputs[0], "Sqrt") if eps is not None else None
    if sqrt is None:
        return None
    dead = [sq, rm, add, sqrt]
    scaled = _next(ctx, sqrt.outputs[0], "Div")
    if scaled is not None and scaled.inputs[1] is not sqrt.outputs[0]:
        return None
    if scaled is None:
        rec = _next(ctx, sqrt.outputs[0], "Reciprocal")
        scaled = _next(ctx, rec.outputs[0], "Mul") if rec is not None else None
        if scaled is None:
            return None
        dead.append(rec)
        inv = rec.outputs[0]
        if other_input(scaled, inv) is not x:
            return None
    elif scaled.inputs[0] is not x:
        return None
    last, n = scaled, shape[-1]
    gamma = None
    mul = _next(ctx, scaled.outputs[0], "Mul")
    g = ctx.const(other_input(mul, scaled.outputs[0])) if mul is not None else None
    g = _as_norm(g, (n,))
    if g is not None and g.dtype == np.float32:
        gamma = ctx.add_const(g, "rmsnorm_scale")
        dead.append(last)
        last = mul
    if gamma is None:
        gamma = ctx.add_const(np.ones(n, np.float32), "rmsnorm_scale")
    return x, eps, gamma, last, dead


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
    for mm in ctx.nodes_of("MatMul"):
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


def _is_causal_mask(ctx: PassContext, kind: str, m: ir.Value, scores_shape: tuple) -> bool:
    """Whether a constant mask over square scores [.., S, S] is exactly the causal one (key j
    allowed for query i when j <= i), the same for every batch entry and head."""
    c = ctx.const(m)
    if c is None or c.ndim < 2 or scores_shape[-1] != scores_shape[-2]:
        return False
    if any(d != 1 for d in c.shape[:-2]) or c.shape[-2:] != tuple(scores_shape[-2:]):
        return False
    c = c.reshape(c.shape[-2:])
    allowed = ~c.astype(bool) if kind == "not" else None
    if kind == "add":  # (0 or -inf; a finite fill such as float32's minimum acts as -inf
        # once exp underflows, every causal row keeping its diagonal key)
        if not np.all((c == 0) | (c <= -1e4)):
            return False
        allowed = c == 0
    return bool(np.array_equal(allowed, np.tri(c.shape[0], dtype=bool)))


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


def _rank4(ctx: PassContext, v: ir.Value) -> bool:
    """v is certainly 4-D (its inferred shape, or a 4-D Transpose's output)."""
    s = static_shape(v)
    if s is not None:
        return len(s) == 4
    return is_op(v.producer, "Transpose") and len(v.producer.attr("perm") or ()) == 4


class _Body:
    """A function body's nodes, each output a fresh local name."""

    def __init__(self):
        self.nodes: list[ir.Node] = []

    def __call__(self, op: str, inputs: list, **attrs) -> ir.Value:
        node = ir.Node(op, inputs, [f"t{len(self.nodes)}"])
        for name, value in attrs.items():
            node.set_attr(name, value)
        self.nodes.append(node)
        return node.outputs[0]

    def split(self, x: ir.Value, parts: int, opset: int) -> list[ir.Value]:
        """Split(x) into equal parts along the last axis (num_outputs from opset 18)."""
        node = ir.Node("Split", [x], [f"t{len(self.nodes)}_{i}" for i in range(parts)])
        node.set_attr("axis", -1)
        if opset >= 18:
            node.set_attr("num_outputs", parts)
        self.nodes.append(node)
        return list(node.outputs)

    def ref(self, attr: str, kind: str, ref: str) -> ir.Value:
        """Constant(<kind> = the function's attribute ``ref``)."""
        node = ir.Node("Constant", [], [f"t{len(self.nodes)}"])
        node.attributes[kind] = ir.Attr(kind, attr, ref_attr_name=ref)
        self.nodes.append(node)
        return node.outputs[0]


def _rotate_half_body(emit: _Body, x, cos, sin, opset: int) -> ir.Value:
    """x * cos + Concat(-x2, x1) * sin."""
    x1, x2 = emit.split(x, 2, opset)
    rotated = emit("Concat", [emit("Neg", [x2]), x1], axis=-1)
    return emit("Add", [emit("Mul", [x, cos]), emit("Mul", [rotated, sin])])


def _softmax_attention(emit: _Body, q, k, v, causal: bool, mask=None) -> ir.Value:
    """Softmax(q k^T * scale [+ mask] [causal]) v on 4-D heads, the scale the function's
    attribute."""
    scale = emit.ref(ir.AttrType.FLOAT, "value_float", "scale")
    scores = emit("MatMul", [q, emit("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = emit("Mul", [scores, scale])
    if mask is not None:
        scores = emit("Add", [scores, mask])
    if causal:
        last_two = emit(
            "Slice",
            [
                emit("Shape", [scores]),
                emit("Constant", [], value=np.array([-2], np.int64)),
                emit("Constant", [], value=np.array([np.iinfo(np.int64).max], np.int64)),
            ],
        )
        ones = emit("ConstantOfShape", [last_two], value=np.array([1.0], np.float32))
        allowed = emit("Cast", [emit("Trilu", [ones], upper=0)], to=int(ir.DataType.BOOL))
        blocked = emit("Constant", [], value_float=-math.inf)
        scores = emit("Where", [allowed, scores, blocked])
    return emit("MatMul", [emit("Softmax", [scores], axis=-1), v])


def _heads_attention_function(ctx: PassContext, op_type: str) -> ir.Function:
    """The model-local function HeadsAttention(Q, K, V; scale) = Softmax(Q K^T * scale) V,
    CausalHeadsAttention the same with the scores above the diagonal -inf (Trilu: opset 14),
    MaskedHeadsAttention(Q, K, V, M) with M added to the scores, so that a saved model runs
    anywhere."""
    q, k, v = ir.Value("Q"), ir.Value("K"), ir.Value("V")
    mask = [ir.Value("M")] if op_type.startswith("Masked") else []
    emit = _Body()
    y = _softmax_attention(emit, q, k, v, op_type.startswith("Causal"), *mask)
    body = ir.Graph([q, k, v, *mask], [y], emit.nodes, name=op_type)
    f = ir.Function(
        ONYX_DOMAIN, op_type, body, attributes=["scale"], opset_imports={"": ctx.opset()}
    )
    f.doc_string = "Y = Softmax(Q K^T * scale [causal]) V (onyx runs it as one kernel)"
    return f


def _packed_attention_function(ctx: PassContext, op_type: str) -> ir.Function:
    """The model-local function PackedHeadsAttention(QKV; num_heads, scale): QKV [B, S, 3W]
    split in three, each [B, num_heads, S, W / num_heads], attended (CausalPackedHeadsAttention:
    causally) and merged back to [B, S, W]. The Rotary ops take cos, sin [S, D / 2] too: q and
    k rotated by halves (RotateHalf's ops) by the tables repeated to [S, D]."""
    qkv = ir.Value("QKV")
    rotary = "Rotary" in op_type
    tables = [ir.Value("cos"), ir.Value("sin")] if rotary else []
    emit = _Body()
    q, k, v = _heads_body(emit, qkv, ctx.opset())
    if rotary:
        cos, sin = (emit("Concat", [t, t], axis=-1) for t in tables)
        q, k = (_rotate_half_body(emit, x, cos, sin, ctx.opset()) for x in (q, k))
    y = _softmax_attention(emit, q, k, v, op_type.startswith("Causal"))
    merged = emit("Constant", [], value=np.array([0, 0, -1], np.int64))
    y = emit("Reshape", [emit("Transpose", [y], perm=[0, 2, 1, 3]), merged])
    body = ir.Graph([qkv, *tables], [y], emit.nodes, name=op_type)
    f = ir.Function(
        ONYX_DOMAIN,
        op_type,
        body,
        attributes=["num_heads", "scale"],
        opset_imports={"": ctx.opset()},
    )
    f.doc_string = "Y = merged heads of Softmax(Q K^T * scale [causal]) V, Q K V = QKV's thirds"
    return f


@graph_pass("AttentionFusion", EXTENDED)
def attention_fusion(ctx: PassContext) -> bool:
    """softmax(q @ k^T * scale [masked by Where(c, -inf, .) or + mask]) @ v, all 4-D
    [batch, heads, seq, size] float32  =>  ai.onnx Attention (opset >= 23): one kernel that
    keeps one score buffer (scale folded into q, mask and softmax in place). Below opset 23
    (opset 13 on; a mask only the constant causal one, from opset 14): the model-local
    ai.onyx HeadsAttention or CausalHeadsAttention, on the same kernels."""
    opset = ctx.opset()
    if opset < 13:
        return False
    changed = False
    for sm in ctx.nodes_of("Softmax"):
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
        qs, vs, ss = static_shape(q), static_shape(v), static_shape(mm.outputs[0])
        if qs is None or vs is None or len(qs) != 4 or len(vs) != 4:
            continue
        # (the scores [.., S, T]: S from q, T from v, where inference lost them)
        scores_shape = (*(ss[:2] if ss is not None else (None, None)), qs[2], vs[2])
        if (
            (ss is not None and len(ss) != 4)
            or not _rank4(ctx, kt)
            or not all(_is_float32(x) for x in (q, kt, v))
            or (masking is not None and ctx.single_use(mm.outputs[0]) is not masking)
            or (masking is None and ctx.single_use(mm.outputs[0]) is not sm)
        ):
            continue
        fits = mask is None or _mask_fits(mask[1], scores_shape)
        causal = mask is not None and fits and _is_causal_mask(ctx, *mask, scores_shape)
        # (below opset 23 a float mask of any shape is MaskedHeadsAttention's: its body's Add)
        if (opset >= 23 and not fits) or (causal and opset < 14):
            continue
        if opset < 23 and mask is not None and not causal and mask[0] != "add":
            continue
        k = _keys(ctx, kt, out)
        name = ctx.fresh_name((sm.name or "attention") + "_fused")
        if opset >= 23:
            extra = [] if mask is None or causal else [_mask_value(ctx, *mask, out)]
            att = ir.Node("Attention", [q, k, v, *extra], 1, name=name)
            if causal:  # (the kernels' causal frontier: no mask read, no masked copy)
                att.set_attr("is_causal", 1)
        else:
            masked = mask is not None and not causal
            op_type = "Causal" if causal else "Masked" if masked else ""
            op_type += "HeadsAttention"
            ctx.ensure_function(op_type, functools.partial(_heads_attention_function, ctx, op_type))
            inputs = [q, k, v] + ([mask[1]] if masked else [])
            att = ir.Node(op_type, inputs, 1, domain=ONYX_DOMAIN, name=name)
        att.set_attr("scale", float(scale))
        dead = [mm, sm] + ([masking] if masking is not None else [])
        ctx.replace_nodes(out, att, dead)
        ctx.count("AttentionFusion")
        changed = True
    return changed


# ------------------------------------------------------------------------- rotary embedding


def _halves(ctx: PassContext, split: ir.Node | None, rank: int) -> bool:
    """split cuts its input's last axis into two equal halves."""
    if (
        not is_op(split, "Split")
        or len(split.outputs) != 2
        or split.attr("axis", 0) % rank != rank - 1
    ):
        return False
    return _equal_parts(ctx, split, 2)


def _table(ctx: PassContext, v: ir.Value | None, rows: int, size: int) -> np.ndarray | None:
    """A constant float32 table broadcasting as [rows, size] over x's last two axes."""
    c = ctx.const(v) if v is not None else None
    if c is None or c.dtype != np.float32 or c.ndim < 2 or c.shape[-2:] != (rows, size):
        return None
    return c.reshape(rows, size) if all(d == 1 for d in c.shape[:-2]) else None


def _match_rotate_half(ctx: PassContext, neg: ir.Node):
    """(x, cos, sin, add, dead) for x * cos + Concat(-x2, x1) * sin, (x1, x2) = Split(x)."""
    split = neg.inputs[0].producer
    x = split.inputs[0] if is_op(split, "Split") else None
    shape = static_shape(x)
    if x is None or shape is None or len(shape) < 2 or not _is_float32(x):
        return None
    rows, size = shape[-2:]
    if (
        not isinstance(rows, int)
        or not isinstance(size, int)
        or not _halves(ctx, split, len(shape))
    ):
        return None
    x1, x2 = split.outputs
    concat = _next(ctx, neg.outputs[0], "Concat")
    if neg.inputs[0] is not x2 or ctx.single_use(x2) is not neg or concat is None:
        return None
    if list(concat.inputs) != [neg.outputs[0], x1] or ctx.single_use(x1) is not concat:
        return None
    if concat.attr("axis") % len(shape) != len(shape) - 1:
        return None
    by_sin = _next(ctx, concat.outputs[0], "Mul")
    add = _next(ctx, by_sin.outputs[0], "Add") if by_sin is not None else None
    by_cos = other_input(add, by_sin.outputs[0]).producer if add is not None else None
    if not is_op(by_cos, "Mul") or ctx.single_use(by_cos.outputs[0]) is not add:
        return None
    if x not in by_cos.inputs:
        return None
    cos = _table(ctx, other_input(by_cos, x), rows, size)
    sin = _table(ctx, other_input(by_sin, concat.outputs[0]), rows, size)
    if cos is None or sin is None:
        return None
    return x, cos, sin, add, [split, neg, concat, by_sin, by_cos]


def _rotate_half_function(ctx: PassContext) -> ir.Function:
    """The model-local function RotateHalf(X, cos, sin) = X * cos + Concat(-X2, X1) * sin."""
    x, cos, sin = ir.Value("X"), ir.Value("cos"), ir.Value("sin")
    emit = _Body()
    y = _rotate_half_body(emit, x, cos, sin, ctx.opset())
    body = ir.Graph([x, cos, sin], [y], emit.nodes, name="RotateHalf")
    f = ir.Function(ONYX_DOMAIN, "RotateHalf", body, opset_imports={"": ctx.opset()})
    f.doc_string = "Y = X * cos + Concat(-X2, X1) * sin (onyx runs it as one kernel)"
    return f


@graph_pass("RotateHalfFusion", EXTENDED)
def rotate_half_fusion(ctx: PassContext) -> bool:
    """x * cos + Concat(-x2, x1) * sin, (x1, x2) the halves of x's last axis and cos, sin
    constant [S, D] tables (a rotary embedding as PyTorch exports it)  =>  the model-local
    ai.onyx RotateHalf: one native pass where the chain was six nodes (opset 13 on: the body's
    Split)."""
    if ctx.opset() < 13:
        return False
    changed = False
    for neg in ctx.nodes_of("Neg"):
        if not is_op(neg, "Neg") or neg.graph is None:
            continue
        m = _match_rotate_half(ctx, neg)
        if m is None:
            continue
        x, cos, sin, add, dead = m
        ctx.ensure_function("RotateHalf", functools.partial(_rotate_half_function, ctx))
        fused = ir.Node(
            "RotateHalf",
            [x, ctx.add_const(cos, "rotary_cos"), ctx.add_const(sin, "rotary_sin")],
            1,
            domain=ONYX_DOMAIN,
            name=ctx.fresh_name((neg.name or "rotary") + "_fused"),
        )
        ctx.replace_nodes(add, fused, dead)
        ctx.count("RotateHalfFusion")
        changed = True
    return changed


# ------------------------------------------------------------------------------------- SiLU


def _silu_function(ctx: PassContext, op_type: str) -> ir.Function:
    """The model-local function Silu(X) = X * Sigmoid(X), and SiluMul(G, U) = Silu(G) * U."""
    inputs = [ir.Value("X")] if op_type == "Silu" else [ir.Value("G"), ir.Value("U")]
    sig = ir.Node("Sigmoid", [inputs[0]], ["sigmoid"])
    nodes = [sig, ir.Node("Mul", [inputs[0], sig.outputs[0]], ["silu"])]
    if op_type == "SiluMul":
        nodes.append(ir.Node("Mul", [nodes[-1].outputs[0], inputs[1]], ["gated"]))
    body = ir.Graph(inputs, [nodes[-1].outputs[0]], nodes, name=op_type)
    f = ir.Function(ONYX_DOMAIN, op_type, body, opset_imports={"": ctx.opset() or 13})
    f.doc_string = f"Y = {' -> '.join(n.op_type for n in nodes)} (onyx runs it as one kernel)"
    return f


@graph_pass("SiluFusion", EXTENDED)
def silu_fusion(ctx: PassContext) -> bool:
    """g * Sigmoid(g) [* u, u of g's shape: a gated MLP]  =>  the model-local ai.onyx Silu or
    SiluMul: one native pass where there were two or three, float32."""
    changed = False
    for sig in ctx.nodes_of("Sigmoid"):
        if not is_op(sig, "Sigmoid") or sig.graph is None or not _is_float32(sig.inputs[0]):
            continue
        g = sig.inputs[0]
        if g.producer is not None and g.producer.op_type in ("MatMulNBits", "DequantizeLinear"):
            continue  # (onyx.genai's GatedMatMulNBits takes a 4-bit gated MLP whole; a
            # dequantized swish is LookupTableFusion's table)
        mul = _next(ctx, sig.outputs[0], "Mul")
        if mul is None or other_input(mul, sig.outputs[0]) is not g:
            continue
        gate = _next(ctx, mul.outputs[0], "Mul")
        u = other_input(gate, mul.outputs[0]) if gate is not None else None
        if (
            u is not None
            and u is not mul.outputs[0]
            and same_dims(static_shape(u), static_shape(g))
        ):
            op_type, inputs, last, dead = "SiluMul", [g, u], gate, [sig, mul]
        else:
            op_type, inputs, last, dead = "Silu", [g], mul, [sig]
        if is_op(ctx.single_use(last.outputs[0]), "QuantizeLinear"):
            continue
        ctx.ensure_function(op_type, functools.partial(_silu_function, ctx, op_type))
        fused = ir.Node(
            op_type,
            inputs,
            1,
            domain=ONYX_DOMAIN,
            name=ctx.fresh_name((sig.name or "silu") + "_fused"),
        )
        ctx.replace_nodes(last, fused, dead)
        ctx.count("SiluFusion")
        changed = True
    return changed


# ------------------------------------------------------------------- attention on packed QKV


def _split_heads(ctx: PassContext, t: ir.Node | None, user: ir.Node, width: int, rows):
    """(Split node, output index, heads) when t = Transpose(Reshape(split output [B, S,
    width] -> [B, S, H, width / H]), perm 0 2 1 3), read by ``user`` only."""
    if not is_op(t, "Transpose") or t.attr("perm") != [0, 2, 1, 3]:
        return None
    r = t.inputs[0].producer
    if ctx.single_use(t.outputs[0]) is not user or not is_op(r, "Reshape"):
        return None
    target = ctx.const(r.inputs[1])
    if ctx.single_use(r.outputs[0]) is not t or target is None or target.shape != (4,):
        return None
    a, s, h, d = (int(x) for x in target)
    if a not in (0, -1) or s not in (0, rows) or h < 1 or h * d != width:
        return None
    split = r.inputs[0].producer
    if not is_op(split, "Split") or ctx.single_use(r.inputs[0]) is not r:
        return None
    return split, list(split.outputs).index(r.inputs[0]), h


def _merged_heads(ctx: PassContext, att: ir.Node, width: int, rows):
    """(Transpose, Reshape) that merge att's [B, H, S, D] output back to [B, S, width]."""
    t = _next(ctx, att.outputs[0], "Transpose")
    if t is None or t.attr("perm") != [0, 2, 1, 3]:
        return None
    r = _next(ctx, t.outputs[0], "Reshape")
    target = ctx.const(r.inputs[1]) if r is not None else None
    if target is None or target.shape != (3,):
        return None
    a, s, w = (int(x) for x in target)
    if a not in (0, -1) or s not in (0, rows) or w != width or (a == -1 and s == 0):
        return None
    return t, r


def _plain_attention(att: ir.Node) -> tuple[bool, float | None] | None:
    """(causal, scale) of a 3-input attention node on 4-D heads with nothing else set."""
    if len(att.inputs) != 3 or any(o.has_uses() for o in att.outputs[1:]):
        return None
    if att.op_type in ("HeadsAttention", "CausalHeadsAttention") and att.domain == ONYX_DOMAIN:
        return att.op_type.startswith("Causal"), att.attr("scale", 1.0)
    if not is_op(att, "Attention"):
        return None
    others = set(att.attributes) - {"is_causal", "scale", "qk_matmul_output_mode", "softcap"}
    if others or att.attr("qk_matmul_output_mode", 0) or att.attr("softcap", 0.0):
        return None
    return bool(att.attr("is_causal", 0)), att.attr("scale")


@graph_pass("PackedAttentionFusion", EXTENDED)
def packed_attention_fusion(ctx: PassContext) -> bool:
    """Attention / HeadsAttention on q, k, v cut from one projection (Split in three, each
    Reshape [B, S, H, D] and Transpose to heads) whose output merges back to [B, S, H * D]
    (Transpose, Reshape)  =>  ai.onyx PackedHeadsAttention or CausalPackedHeadsAttention on
    the projection: the kernel reads q, k, v in place and writes the merged rows, where
    there were seven copies (opset 13 on, float32)."""
    if ctx.opset() < 13:
        return False
    changed = False
    for att in ctx.graph:
        plain = _plain_attention(att) if att.graph is not None else None
        if plain is None:
            continue
        causal, scale = plain
        heads = [x.producer for x in att.inputs]
        rotations = [_rotation(ctx, heads[i], att) for i in (0, 1)] + [None]
        heads = [r.inputs[0].producer if r is not None else t for t, r in zip(heads, rotations)]
        view = heads[0].inputs[0].producer if is_op(heads[0], "Transpose") else None
        split = view.inputs[0].producer if is_op(view, "Reshape") else None
        shape = static_shape(split.inputs[0]) if is_op(split, "Split") else None
        if shape is None or len(shape) != 3 or not isinstance(shape[2], int) or shape[2] % 3:
            continue
        if len(split.outputs) != 3 or split.attr("axis", 0) not in (-1, 2):
            continue
        if not _equal_parts(ctx, split, 3) or not _is_float32(split.inputs[0]):
            continue
        width, rows = shape[2] // 3, shape[1]
        users = [r if r is not None else att for r in rotations]
        cuts = [_split_heads(ctx, t, u, width, rows) for t, u in zip(heads, users)]
        if any(c is None for c in cuts) or [c[:2] for c in cuts] != [(split, i) for i in range(3)]:
            continue
        n_heads = cuts[0][2]
        merge = _merged_heads(ctx, att, width, rows)
        if merge is None or any(c[2] != n_heads for c in cuts):
            continue
        tables = _half_tables(ctx, rotations, rows, width // n_heads)
        if tables is False:
            continue
        if scale is None:
            scale = 1 / math.sqrt(width // n_heads)
        op_type = ("Causal" if causal else "") + "Packed"
        op_type += ("Rotary" if tables else "") + "HeadsAttention"
        ctx.ensure_function(op_type, functools.partial(_packed_attention_function, ctx, op_type))
        fused = ir.Node(
            op_type,
            [split.inputs[0], *(ctx.add_const(t, "rotary_half") for t in tables or ())],
            1,
            domain=ONYX_DOMAIN,
            name=ctx.fresh_name((att.name or "attention") + "_packed"),
        )
        fused.set_attr("num_heads", int(n_heads))
        fused.set_attr("scale", float(scale))
        views = [x.producer for t in heads for x in (t.inputs[0], t.outputs[0])]
        views += [r for r in rotations if r is not None]
        ctx.replace_nodes(merge[1], fused, [split, *views, att, merge[0]])
        ctx.count("PackedAttentionFusion")
        changed = True
    return changed


def _rotation(ctx: PassContext, node: ir.Node | None, att: ir.Node) -> ir.Node | None:
    """node when it is an ai.onyx RotateHalf read by att only."""
    if node is None or node.op_type != "RotateHalf" or node.domain != ONYX_DOMAIN:
        return None
    return node if ctx.single_use(node.outputs[0]) is att else None


def _half_tables(ctx: PassContext, rotations: list, rows, head: int):
    """(cos, sin) [S, D / 2] when q and k are rotated alike by [S, D] tables whose halves
    repeat (the kernel's rotary tables); None without rotations; False when they do not fit."""
    if rotations[0] is None and rotations[1] is None:
        return None
    if rotations[0] is None or rotations[1] is None or not isinstance(rows, int):
        return False
    found = []
    for i in (1, 2):
        a, b = (ctx.const(r.inputs[i]) for r in rotations[:2])
        if a is None or b is None or a.shape != (rows, head) or not np.array_equal(a, b):
            return False
        if a.dtype != np.float32 or not np.array_equal(a[:, : head // 2], a[:, head // 2 :]):
            return False
        found.append(np.ascontiguousarray(a[:, : head // 2]))
    return tuple(found)


def _equal_parts(ctx: PassContext, split: ir.Node, parts: int) -> bool:
    """split's sizes (its input, else its attribute; none: equal) are ``parts`` equal ones."""
    if len(split.inputs) > 1 and split.inputs[1] is not None:
        sizes = ctx.const(split.inputs[1])
        return sizes is not None and sizes.size == parts and len(set(sizes.tolist())) == 1
    sizes = split.attr("split")
    return sizes is None or (len(sizes) == parts and len(set(sizes)) == 1)


# ------------------------------------------------- nn.MultiheadAttention's sequence-first heads


def _time_major_head(ctx: PassContext, v: ir.Value, att: ir.Node, index: int, heads: int):
    """(the [3, S, B, D] Transpose, nodes) when v = Reshape(Transpose(Reshape(Gather(t,
    index), [S, -1, Dh]), [1, 0, 2]), [B, H, S, Dh]), each read once (PyTorch's
    nn.MultiheadAttention: q, k or v of its packed projection into heads)."""
    r4 = v.producer
    t3 = r4.inputs[0].producer if is_op(r4, "Reshape") else None
    r3 = t3.inputs[0].producer if is_op(t3, "Transpose") else None
    g = r3.inputs[0].producer if is_op(r3, "Reshape") else None
    if not is_op(g, "Gather") or g.attr("axis", 0) != 0 or t3.attr("perm") != [1, 0, 2]:
        return None
    chain = [r4, t3, r3, g]
    for node, user in zip(chain, [att, r4, t3, r3]):
        if ctx.single_use(node.outputs[0]) is not user:
            return None
    index_c, t4, t3_target = (
        ctx.const(g.inputs[1]),
        ctx.const(r4.inputs[1]),
        ctx.const(r3.inputs[1]),
    )
    if index_c is None or index_c.shape != () or int(index_c) != index:
        return None
    if t4 is None or t3_target is None or t4.shape != (4,) or t3_target.shape != (3,):
        return None
    rows, _, size = (int(x) for x in t3_target)
    if t3_target[1] != -1 or t4[0] not in (-1, 0) or list(t4[1:]) != [heads, rows, size]:
        return None
    return g.inputs[0].producer, chain


@graph_pass("TimeMajorAttentionFusion", EXTENDED)
def time_major_attention_fusion(ctx: PassContext) -> bool:
    """HeadsAttention (not causal) whose q, k, v are nn.MultiheadAttention's heads of one
    sequence-first projection [S, B, 3D] (Reshape [S, B, 3, D], Transpose to [3, S, B, D],
    Gather, Reshape, Transpose, Reshape) and whose output goes back to sequence-first [S, B, H,
    Dh] (Transpose, then a Reshape to constant dims)  =>  ai.onyx TimeMajorPackedHeadsAttention
    on the projection, [S, B, D]: sixteen nodes one."""
    changed = False
    for att in ctx.graph:
        if att.op_type != "HeadsAttention" or att.domain != ONYX_DOMAIN or att.graph is None:
            continue
        shape = static_shape(att.inputs[0])
        if shape is None or len(shape) != 4 or not isinstance(shape[1], int):
            continue
        heads = shape[1]
        found = [_time_major_head(ctx, v, att, i, heads) for i, v in enumerate(att.inputs)]
        if any(f is None for f in found) or len({id(f[0]) for f in found}) != 1:
            continue
        t = found[0][0]
        r = t.inputs[0].producer if is_op(t, "Transpose") else None
        if r is None or t.attr("perm") != [2, 0, 1, 3] or not is_op(r, "Reshape"):
            continue
        qkv, target = r.inputs[0], ctx.const(r.inputs[1])
        qkv_shape = static_shape(qkv)
        if target is None or qkv_shape is None or len(qkv_shape) != 3 or not _is_float32(qkv):
            continue
        width = qkv_shape[2]
        if not isinstance(width, int) or width % 3 or target.tolist()[2:] != [3, width // 3]:
            continue
        if target[0] not in (0, qkv_shape[0]) or target[1] not in (0, qkv_shape[1]):
            continue
        if len(t.outputs[0].consumers()) != 3 or ctx.single_use(r.outputs[0]) is not t:
            continue
        back = _next(ctx, att.outputs[0], "Transpose")
        user = _next(ctx, back.outputs[0], "Reshape") if back is not None else None
        dims = ctx.const(user.inputs[1]) if user is not None else None
        if dims is None or back.attr("perm") != [2, 0, 1, 3] or 0 in dims.tolist():
            continue
        ctx.ensure_function(
            "TimeMajorPackedHeadsAttention", functools.partial(_time_major_function, ctx)
        )
        fused = ir.Node(
            "TimeMajorPackedHeadsAttention",
            [qkv],
            1,
            domain=ONYX_DOMAIN,
            name=ctx.fresh_name((att.name or "attention") + "_time_major"),
        )
        fused.set_attr("num_heads", int(heads))
        fused.set_attr("scale", float(att.attr("scale", 1.0)))
        dead = [r, t, att] + [n for f in found for n in f[1]]
        ctx.replace_nodes(back, fused, dead)
        # (the Transpose's value was [S, B, H, Dh]: the passes after this one read the shape)
        rows = tuple(qkv_shape[:2]) + (width // 3,)
        fused.outputs[0].type = ir.TensorType(ir.DataType.FLOAT, rows)
        ctx.count("TimeMajorAttentionFusion")
        changed = True
    return changed


def _heads_body(emit: _Body, qkv: ir.Value, opset: int) -> tuple:
    """A function body's q, k, v [B, num_heads, S, W / num_heads] from QKV [B, S, 3W] (the
    function's num_heads attribute by reference)."""
    parts = emit.split(qkv, 3, opset)
    heads = emit("Unsqueeze", [emit.ref(ir.AttrType.INT, "value_int", "num_heads"), emit(
        "Constant", [], value=np.array([0], np.int64))])  # fmt: skip
    shape = emit(
        "Concat",
        [
            emit("Constant", [], value=np.array([0, 0], np.int64)),
            heads,
            emit("Constant", [], value=np.array([-1], np.int64)),
        ],
        axis=0,
    )
    return tuple(emit("Transpose", [emit("Reshape", [x, shape])], perm=[0, 2, 1, 3]) for x in parts)


def _time_major_function(ctx: PassContext) -> ir.Function:
    """TimeMajorPackedHeadsAttention(QKV [S, B, 3W]; num_heads, scale) = the batch-first
    PackedHeadsAttention of its transpose, transposed back to [S, B, W]."""
    qkv = ir.Value("QKV")
    emit = _Body()
    bsf = emit("Transpose", [qkv], perm=[1, 0, 2])
    q, k, v = _heads_body(emit, bsf, ctx.opset())
    y = _softmax_attention(emit, q, k, v, False)
    merged = emit("Constant", [], value=np.array([0, 0, -1], np.int64))
    y = emit("Reshape", [emit("Transpose", [y], perm=[0, 2, 1, 3]), merged])
    y = emit("Transpose", [y], perm=[1, 0, 2])
    body = ir.Graph([qkv], [y], emit.nodes, name="TimeMajorPackedHeadsAttention")
    f = ir.Function(
        ONYX_DOMAIN,
        "TimeMajorPackedHeadsAttention",
        body,
        attributes=["num_heads", "scale"],
        opset_imports={"": ctx.opset()},
    )
    f.doc_string = "Y = PackedHeadsAttention of QKV [S, B, 3W] taken as [B, S, 3W], as [S, B, W]"
    return f
