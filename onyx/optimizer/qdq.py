"""QDQ node units -> quantized operators, as onnxruntime's QDQSelectorActionTransformer.

A QDQ model (onnxruntime.quantization with QuantFormat.QDQ) writes every quantized op as a
float op between DequantizeLinear (DQ) inputs and a QuantizeLinear (Q) output. Run as written,
each op dequantizes, computes in float and requantizes; onnxruntime (extended level) rewrites
these node units into integer ops, and so does this pass:

    DQ(x), DQ(w) [, DQ(int32 bias)] -> Conv -> Q        QLinearConv
    DQ(a), DQ(b) -> MatMul -> Q                           QLinearMatMul
    DQ(a), DQ(b) [, DQ(int32 bias)] -> Gemm [-> Q]        com.microsoft QGemm (float out without Q)
    DQ(a), DQ(b) -> Add | Mul -> Q                        com.microsoft QLinearAdd | QLinearMul
    DQ(x) -> GlobalAveragePool | Sigmoid | LeakyRelu | Softmax -> Q
                                                          com.microsoft QLinear<op>
    DQ(x1), DQ(x2)... -> Concat -> Q                      com.microsoft QLinearConcat
    DQ(x) -> MaxPool -> Q at the same scale and zero point    MaxPool on the 8-bit tensor

The fused ops skip two float passes over every tensor, and round as onnxruntime's fused graph
does: onnxruntime runs the optimized graph to its own results, to the bit, and onyx does too
but where its QLinearSoftmax and QLinearAdd kernels round a value one step off onnxruntime's
(the fixtures' gpt; rarer on larger models). A Relu or Clip between the op and its Q that Q's saturation makes redundant
goes too, as onnxruntime's selectors allow: Q(Relu(v)) = Q(v) when Q's zero point is its type's
minimum. Left as written (onnxruntime fuses them): AveragePool, whose QLinearAveragePool
rounds the integer average of a window differently from the graph as written (ties; up to 6
steps at unet_quant_qdq's output, against which tests/test_real_models holds the optimized
graph), and Where (no QLinearWhere kernel here).

Strict about what it takes (a unit that does not qualify stays as written): activations
quantized per tensor to int8/uint8 with constant float32 scales (positive) and zero points; the
same 8-bit type in and out (and an int8 activation only with int8 weights, as onnxruntime); the
op's output read by the Q alone; weights constant, per tensor or per output channel (Conv: axis
0, one zero point for all channels as onnxruntime's QLinearConv requires; MatMul/Gemm: per
column); an int32 bias only at scale x_scale * w_scale (to float32 rounding) with zero point 0,
the scale QLinearConv and QGemm read it at (and for Gemm only with alpha = beta = 1: QGemm
scales its bias by alpha too; onnxruntime does not fuse that case either). The DQ nodes may have other readers: they stay for
them.

ConstantFolding (basic) would turn DQ(constant weight) into a float constant before this pass
(extended) sees it; it asks :func:`reads_quantized` and leaves the DQs of constants that ops
this pass may fuse read as written until this pass has run, when it is enabled. This module is
imported by fold.py, so the pass is registered before the other fusions and runs first among
them, as onnxruntime runs its QDQ transformers before its other level-2 fusions (a FusedConv
of Conv + Relu would hide a unit).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import field
from typing import Any

import numpy as np

from .. import ir
from ..ir.dtypes import to_numpy
from ..ir.frozen import DataValue, FrozenValue, lazy_fields
from ..runtime.registry import ONYX_DOMAIN
from .conv import _CONV_ATTRIBUTES, _REF_TYPES
from .core import EXTENDED, MS, STANDARD, PassContext, graph_pass, is_op, producer

PASS = "QDQSelectorActionTransformer"

_INT8, _UINT8, _INT32 = np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int32)
_FLOAT32 = np.dtype(np.float32)  # (a dtype against a dtype: half the cost of one against a type)
#: The ufuncs' reductions, called directly: ndarray.min's wrapper and isfinite & (> 0) & all
#: cost a per-channel weight's and bias's scales more than the test.
_MIN, _MAX = np.minimum.reduce, np.maximum.reduce
#: (min, max) of the 8-bit types (np.iinfo makes an object per call).
_RANGES = {_INT8: (-128, 127), _UINT8: (0, 255)}
#: Bias scale vs x_scale * w_scale: equal up to float32 rounding (a few ulps of the product).
_BIAS_SCALE_RTOL = 1e-6


# ------------------------------------------------------------------------ quantization params


# (FrozenValue: what frozen=True gives, without compiling methods at every import;
# lazy_fields: the dataclass made only if its fields are asked for, not at every import)
@lazy_fields
class QParams(FrozenValue):
    """One Q or DQ node's quantization: its integer tensor, scale and zero point."""

    tensor: ir.Value  # DQ: its input; Q: its output
    scale: ir.Value
    zero_point: ir.Value | np.ndarray  # the input, or zeros to add when the node has none
    scales: np.ndarray  # float32, flat
    zero_points: np.ndarray  # flat, of the integer type
    axis: int | None  # the quantized axis (non-negative) when per axis
    #: The integer tensor's data when it is a constant (a DQ's weight or bias), else None:
    #: read once here, where the unit's builders asked ctx.const for it again and again.
    data: np.ndarray | None

    def __init__(self, tensor, scale, zero_point, scales, zero_points, axis, data=None):
        self._set(
            tensor=tensor,
            scale=scale,
            zero_point=zero_point,
            scales=scales,
            zero_points=zero_points,
            axis=axis,
            data=data,
        )

    @property
    def dtype(self) -> np.dtype:
        return self.zero_points.dtype

    @property
    def per_tensor(self) -> bool:
        return self.axis is None

    def inputs(self) -> list:
        """(tensor, scale, zero point): how QLinear ops take an operand."""
        return [self.tensor, self.scale, self.zero_point]


def _qparams(ctx: PassContext, node: ir.Node | None) -> QParams | None:
    """The quantization of a standard Q/DQ node with a constant positive float32 scale and a
    constant zero point (a DQ's may be absent: zeros), per tensor or along one axis of a
    constant; None for anything else (block quantization, output_dtype, ...). Each constant
    is read once (ctx.const)."""
    if not is_op(node, "QuantizeLinear", "DequantizeLinear") or len(node.inputs) < 2:
        return None
    if node.attributes and any(
        a != "axis" and not (a == "block_size" and node.attr(a) == 0) for a in node.attributes
    ):
        return None
    scale = ctx.const(node.inputs[1])
    if scale is None or scale.dtype != _FLOAT32 or scale.ndim > 1:
        return None
    size = scale.size
    if size == 1:  # (the common case: numpy's reductions cost more than the test)
        s = scale.item()
        if not (math.isfinite(s) and s > 0):
            return None
    elif size == 0 or not (_MIN(scale) > 0 and _MAX(scale) < math.inf):  # (NaN fails both)
        return None
    is_dq = node.op_type == "DequantizeLinear"
    tensor = node.inputs[0] if is_dq else node.outputs[0]
    data = ctx.const(tensor) if is_dq else None
    zero_point, zp = _zero_point(ctx, node, size, data)
    if zp is None:
        return None
    if is_dq:  # (the spec gives DQ's input the zero point's type)
        dtype = data.dtype if data is not None else _type_dtype(tensor)
        if dtype is not None and dtype != zp.dtype:
            return None
    axis = _axis(node, size, data) if size > 1 else None
    if size > 1 and axis is None:
        return None
    return QParams(
        tensor, node.inputs[1], zero_point, scale.reshape(-1), zp.reshape(-1), axis, data
    )


def _zero_point(
    ctx: PassContext, node: ir.Node, size: int, data: np.ndarray | None
) -> tuple[ir.Value | np.ndarray | None, np.ndarray | None]:
    """A Q/DQ node's constant zero point input and its data; for a DQ without one, zeros of
    its input's type (``data``: that input's, when constant), twice (a Q without one makes
    uint8, but quantizers always write it: not taken). (None, None) when it does not qualify."""
    v = node.inputs[2] if len(node.inputs) > 2 else None
    if v is not None and v.name:
        zp = ctx.const(v)
        if zp is not None and zp.ndim <= 1 and zp.size == size:  # [1] ~ ()
            return v, zp
        return None, None
    if node.op_type != "DequantizeLinear":
        return None, None
    dtype = data.dtype if data is not None else _type_dtype(node.inputs[0])
    if dtype is None:
        return None, None
    zeros = np.zeros(() if size == 1 else (size,), dtype)
    return zeros, zeros


def _axis(node: ir.Node, size: int, data: np.ndarray | None) -> int | None:
    """The (non-negative) axis a DQ of a constant (``data``) quantizes along, when it has
    ``size`` entries; per-axis parameters are taken only there (weights and biases)."""
    if data is None:
        return None
    axis = node.attr("axis", 1)
    axis = axis + data.ndim if axis < 0 else axis
    return axis if 0 <= axis < data.ndim and data.shape[axis] == size else None


def _type_dtype(v: ir.Value) -> np.dtype | None:
    """The numpy dtype of a tensor value's declared element type, None where it has none."""
    if isinstance(v.type, ir.TensorType):
        try:
            return to_numpy(v.type.elem_type)
        except Exception:
            return None
    return None


def _activation(ctx: PassContext, v: ir.Value | None) -> QParams | None:
    """The DQ making ``v``: per tensor, 8-bit."""
    p = _qparams(ctx, producer(v, "DequantizeLinear"))
    if p is None or not p.per_tensor or p.dtype not in (_INT8, _UINT8):
        return None
    return p


def _weight(ctx: PassContext, v: ir.Value | None, channel_axis: int) -> QParams | None:
    """The DQ of a constant 8-bit weight making ``v``: per tensor or along ``channel_axis``."""
    p = _qparams(ctx, producer(v, "DequantizeLinear"))
    if p is None or p.dtype not in (_INT8, _UINT8) or p.data is None:
        return None
    if not (p.per_tensor or p.axis == channel_axis):
        return None
    return p


def _operand(ctx: PassContext, v: ir.Value | None, channel_axis: int) -> QParams | None:
    """A MatMul/Gemm operand: an activation, or a weight (maybe per output column)."""
    return _activation(ctx, v) or _weight(ctx, v, channel_axis)


def _int8_rule(a: QParams, b: QParams) -> bool:
    """onnxruntime's integer kernels take int8 activations only with int8 weights."""
    return a.dtype != _INT8 or b.dtype == _INT8


def _bias(ctx: PassContext, node: ir.Node, index: int, a: QParams, b: QParams, n: int | None):
    """[] without a bias; [its int32 tensor] for DQ(int32 constant, shape [n]) at scale
    a_scale * b_scale with zero point 0 (what QLinearConv/QGemm add to their accumulators);
    None for any other bias."""
    v = node.inputs[index] if len(node.inputs) > index else None
    if v is None or not v.name:
        return []
    p = _qparams(ctx, producer(v, "DequantizeLinear"))
    data = p.data if p is not None else None
    if data is None or data.dtype != _INT32 or data.ndim != 1 or p.zero_points.any():
        return None
    if n is not None and data.shape != (n,):
        return None
    expected = np.float32(a.scales[0]) * b.scales
    if not _close(p.scales, expected):
        return None
    return [p.tensor]


def _close(x: np.ndarray, y: np.ndarray) -> bool:
    """np.allclose(x, y, rtol=_BIAS_SCALE_RTOL, atol=0), spelled out: allclose's argument
    handling costs more than the test on these few numbers. (No errstate, which cost as much
    as the test: x is finite and y, a product of finite scales, is never NaN, so x - y is
    never NaN either.)"""
    near = (np.abs(x - y) <= _BIAS_SCALE_RTOL * np.abs(y)) & np.isfinite(y)
    return bool((near | (x == y)).all())


# ---------------------------------------------------------------------------- the output side


@lazy_fields
class Output(FrozenValue):
    """The Q ending a unit, and the nodes between the op and it (a redundant Relu/Clip)."""

    q: ir.Node
    params: QParams
    between: tuple[ir.Node, ...]

    def __init__(self, q: ir.Node, params: QParams, between: tuple[ir.Node, ...]):
        self._set(q=q, params=params, between=between)

    def inputs(self) -> list:
        return [self.params.scale, self.params.zero_point]


def _output(ctx: PassContext, node: ir.Node, clip_ok: bool = True) -> Output | None:
    """The per-tensor 8-bit Q that alone reads ``node``'s only output (maybe through a
    Relu/Clip that Q makes redundant)."""
    if not _single_output(ctx, node):
        return None
    reader = ctx.single_use(node.outputs[0])
    between: tuple[ir.Node, ...] = ()
    if clip_ok and is_op(reader, "Relu", "Clip") and reader.graph is ctx.graph:
        between = (reader,)
        reader = ctx.single_use(reader.outputs[0])
    if not is_op(reader, "QuantizeLinear") or reader.graph is not ctx.graph:
        return None
    p = _qparams(ctx, reader)
    if p is None or not p.per_tensor or p.dtype not in (_INT8, _UINT8):
        return None
    if between and not _redundant(ctx, between[0], p):
        return None
    return Output(reader, p, between)


def _single_output(ctx: PassContext, node: ir.Node) -> bool:
    """Only output 0 is in use (MaxPool's optional Indices unused)."""
    return all(not v.has_uses() and not ctx.is_output(v) for v in node.outputs[1:])


def _redundant(ctx: PassContext, clip: ir.Node, q: QParams) -> bool:
    """Whether Q(clip(v)) = Q(v) for every v: the clip bounds lie outside the values Q
    saturates to (qmin - zp) * s and (qmax - zp) * s, so Q's clamp does the same."""
    qmin, qmax = _RANGES[q.dtype]  # (an 8-bit output: _output's)
    zp, s = int(q.zero_points[0]), float(q.scales[0])
    if clip.op_type == "Relu":
        return zp == qmin  # (Relu's 0 is exactly the value of qmin)
    bounds = _clip_bounds(ctx, clip)
    if bounds is None:
        return False
    low, high = bounds
    return low <= (qmin - zp) * s and high >= (qmax - zp) * s


def _clip_bounds(ctx: PassContext, clip: ir.Node) -> tuple[float, float] | None:
    if ctx.opset() < 11:  # bounds were attributes
        return clip.attr("min", -np.inf), clip.attr("max", np.inf)
    bounds = []
    for i, default in ((1, -np.inf), (2, np.inf)):
        v = clip.inputs[i] if len(clip.inputs) > i else None
        if v is None or not v.name:
            bounds.append(default)
            continue
        c = ctx.scalar(v)
        if c is None:
            return None
        bounds.append(c)
    return bounds[0], bounds[1]


# ----------------------------------------------------------------------------------- fusions


@lazy_fields
class Fusion(DataValue):
    """What replaces a unit: the fused node's op, inputs and attributes; ``last`` is the node
    whose output it takes over (the Q, or the op itself for a float QGemm), ``dead`` the other
    nodes of the unit, ``dqs`` the DQ nodes read (removed when nothing else reads them)."""

    op_type: str
    domain: str
    inputs: list  # Values, None for an absent optional input, arrays to add as constants
    target: ir.Node
    last: ir.Node
    dead: tuple[ir.Node, ...]
    dqs: tuple[ir.Node, ...]
    carried: tuple[str, ...] = ()  # the target's attributes to carry over
    extra: dict[str, Any] = field(default_factory=dict)

    def __init__(
        self,
        op_type: str,
        domain: str,
        inputs: list,
        target: ir.Node,
        last: ir.Node,
        dead: tuple[ir.Node, ...],
        dqs: tuple[ir.Node, ...],
        carried: tuple[str, ...] = (),
        extra: dict[str, Any] | None = None,
    ):
        self.op_type, self.domain, self.inputs = op_type, domain, inputs
        self.target, self.last, self.dead, self.dqs = target, last, dead, dqs
        self.carried = carried
        self.extra = {} if extra is None else extra


def _fusion(
    op_type: str,
    target: ir.Node,
    out: Output | None,
    inputs: list,
    domain: str = MS,
    carried: tuple[str, ...] = (),
    extra: dict[str, Any] | None = None,
) -> Fusion:
    last = out.q if out is not None else target
    dead = (target, *out.between) if out is not None else ()
    dqs = tuple(
        v.producer for v in target.inputs if v is not None and is_op(v.producer, "DequantizeLinear")
    )
    return Fusion(op_type, domain, inputs, target, last, dead, dqs, carried, extra or {})


def _conv(ctx: PassContext, conv: ir.Node) -> Fusion | None:
    if len(conv.inputs) < 2:
        return None
    x = _activation(ctx, conv.inputs[0])  # (first: most convs of a float model stop here)
    w = _weight(ctx, conv.inputs[1], channel_axis=0) if x is not None else None
    out = _output(ctx, conv) if w is not None else None
    if out is None:
        return None
    if x.dtype != out.params.dtype or not _int8_rule(x, w):
        return None
    zps = w.zero_points
    if zps.size > 1 and _MIN(zps) != _MAX(zps):
        return None  # onnxruntime's QLinearConv takes one filter zero point for all channels
    bias = _bias(ctx, conv, 2, x, w, w.data.shape[0])
    if bias is None:
        return None
    inputs = [*x.inputs(), *w.inputs(), *out.inputs(), *bias]
    return _fusion("QLinearConv", conv, out, inputs, "", tuple(conv.attributes))


def _matmul(ctx: PassContext, mm: ir.Node) -> Fusion | None:
    """QLinearMatMul: b an activation (attention's q @ k^T) or a constant weight, per tensor or
    per column of a 2-D b."""
    a = _activation(ctx, mm.inputs[0])
    b = _operand(ctx, mm.inputs[1], channel_axis=1) if a is not None else None
    out = _output(ctx, mm) if b is not None else None
    if out is None:
        return None
    if a.dtype != out.params.dtype or not _int8_rule(a, b):
        return None
    if not b.per_tensor and b.data.ndim != 2:
        return None
    return _fusion("QLinearMatMul", mm, out, [*a.inputs(), *b.inputs(), *out.inputs()], "")


def _gemm(ctx: PassContext, gemm: ir.Node) -> Fusion | None:
    """com.microsoft QGemm; without a Q after the Gemm its output stays float (as onnxruntime
    fuses a model's last Gemm, whose logits are not requantized)."""
    trans_b = gemm.attr("transB", 0)
    a = _activation(ctx, gemm.inputs[0])
    b = _operand(ctx, gemm.inputs[1], 0 if trans_b else 1) if a is not None else None
    if b is None:
        return None
    out = _output(ctx, gemm)
    if out is None and not _float_result(ctx, gemm):
        return None
    if (out is not None and a.dtype != out.params.dtype) or not _int8_rule(a, b):
        return None
    weight = b.data
    n = None if weight is None else weight.shape[0 if trans_b else 1]
    bias = _bias(ctx, gemm, 2, a, b, n)
    # QGemm adds C to the accumulator, inside alpha's product: a bias only with alpha = beta = 1
    if bias is None or (bias and (gemm.attr("alpha", 1.0), gemm.attr("beta", 1.0)) != (1, 1)):
        return None
    inputs = [*a.inputs(), *b.inputs()]
    if out is not None:
        inputs += [*(bias or [None]), *out.inputs()]
    else:
        inputs += bias
    return _fusion("QGemm", gemm, out, inputs, MS, ("alpha", "transA", "transB"))


def _float_result(ctx: PassContext, node: ir.Node) -> bool:
    """No Q reads the op's output: a unit with a float result, as onnxruntime selects it (not
    when a Relu/Clip alone reads it: onnxruntime looks for a Q after that one)."""
    readers = node.outputs[0].consumers()
    if len(readers) == 1 and is_op(readers[0], "Relu", "Clip"):
        return False
    return _single_output(ctx, node) and not any(is_op(n, "QuantizeLinear") for n in readers)


def _binary(fused: str) -> Callable[[PassContext, ir.Node], Fusion | None]:
    def build(ctx: PassContext, node: ir.Node) -> Fusion | None:
        a = _activation(ctx, node.inputs[0])
        b = _activation(ctx, node.inputs[1]) if a is not None else None
        out = _output(ctx, node) if b is not None else None
        if out is None:
            return None
        if not a.dtype == b.dtype == out.params.dtype:
            return None
        return _fusion(fused, node, out, [*a.inputs(), *b.inputs(), *out.inputs()])

    return build


@lazy_fields
class Unary(FrozenValue):
    """A one-input op's fused form: its com.microsoft op, the attributes it carries over, and
    ``extra``: (attributes it reads itself, a function giving the fused node's other
    attributes or None when the node does not qualify)."""

    fused: str
    carried: tuple[str, ...] = ()
    extra: tuple[tuple[str, ...], Callable[[PassContext, ir.Node], dict | None]] | None = None

    def __init__(self, fused: str, carried: tuple[str, ...] = (), extra=None):
        self._set(fused=fused, carried=carried, extra=extra)


def _softmax_attributes(ctx: PassContext, node: ir.Node) -> dict:
    """The axis made explicit (its default moved at opset 13) and the Softmax version whose
    semantics apply (QLinearSoftmax's 'opset': a 2-D coerced softmax before 13)."""
    opset = ctx.opset()
    version = 13 if opset >= 13 else 11 if opset >= 11 else 1
    return {"axis": node.attr("axis", -1 if opset >= 13 else 1), "opset": version}


_UNARY = {
    "GlobalAveragePool": Unary("QLinearGlobalAveragePool"),
    "Sigmoid": Unary("QLinearSigmoid"),
    "LeakyRelu": Unary("QLinearLeakyRelu", ("alpha",)),
    "Softmax": Unary("QLinearSoftmax", (), (("axis",), _softmax_attributes)),
}


def _unary(ctx: PassContext, node: ir.Node) -> Fusion | None:
    spec = _UNARY[node.op_type]
    absorbed, make_extra = spec.extra or ((), None)
    if any(a not in spec.carried and a not in absorbed for a in node.attributes):
        return None
    x = _activation(ctx, node.inputs[0])
    out = _output(ctx, node) if x is not None else None
    if out is None or x.dtype != out.params.dtype:
        return None
    extra = make_extra(ctx, node) if make_extra is not None else {}
    if extra is None:
        return None
    inputs = [*x.inputs(), *out.inputs()]
    return _fusion(spec.fused, node, out, inputs, MS, spec.carried, extra)


def _concat(ctx: PassContext, node: ir.Node) -> Fusion | None:
    parts = []
    for v in node.inputs:  # (the first input not dequantized ends it)
        p = _activation(ctx, v)
        if p is None:
            return None
        parts.append(p)
    out = _output(ctx, node) if parts else None
    if out is None or any(p.dtype != out.params.dtype for p in parts):
        return None
    inputs = [*out.inputs(), *(v for p in parts for v in p.inputs())]
    return _fusion("QLinearConcat", node, out, inputs, MS, ("axis",))


def _max_pool(ctx: PassContext, node: ir.Node) -> Fusion | None:
    """DQ -> MaxPool -> Q at the same scale and zero point: MaxPool on the integers. Exact: a
    positive scale keeps the order, so the maximum of the dequantized values is the
    dequantized maximum, and Q gives back the integer it came from."""
    if ctx.opset() < 12:  # MaxPool takes 8-bit integers from opset 12
        return None
    x = _activation(ctx, node.inputs[0])
    out = _output(ctx, node, clip_ok=False) if x is not None else None
    if out is None:
        return None
    y = out.params
    same = x.dtype == y.dtype and x.scales[0] == y.scales[0]
    if not same or x.zero_points[0] != y.zero_points[0]:
        return None
    return _fusion("MaxPool", node, out, [x.tensor], "", tuple(node.attributes))


#: op type -> the builder of its fused form (None when the unit does not qualify).
_RULES: dict[str, Callable[[PassContext, ir.Node], Fusion | None]] = {
    "Conv": _conv,
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Add": _binary("QLinearAdd"),
    "Mul": _binary("QLinearMul"),
    "Concat": _concat,
    "MaxPool": _max_pool,
    **dict.fromkeys(_UNARY, _unary),
}


def plan(ctx: PassContext, node: ir.Node) -> Fusion | None:
    """The fusion of the unit ``node`` is the op of, or None. No side effects."""
    build = _RULES.get(node.op_type)  # (first: most nodes are of no unit's op type)
    if build is None or node.domain not in STANDARD or node.graph is not ctx.graph:
        return None
    return None if node.attributes_have_refs() else build(ctx, node)


def reads_quantized(ctx: PassContext, dq: ir.Node) -> bool:
    """Whether ConstantFolding leaves ``dq`` as written: it dequantizes a constant, an op this
    pass may fuse reads it, and this pass has not run yet. A unit this pass fuses takes the
    integer tensor; the DQs no unit took are folded after it ran (asking whether each unit
    would fuse, at every folding round, cost more than the folding itself)."""
    return PASS in ctx.enabled and PASS not in ctx.ran and _may_fuse(ctx, dq)


def _may_fuse(ctx: PassContext, dq: ir.Node) -> bool:
    if not dq.inputs or ctx.const(dq.inputs[0]) is None:
        return False
    return any(n.op_type in _RULES and n.domain in STANDARD for n in dq.outputs[0].consumers())


def _apply(ctx: PassContext, f: Fusion) -> None:
    base = f.target.name or f.target.op_type
    inputs = [
        ctx.add_const(v, base + "_zero_point") if isinstance(v, np.ndarray) else v for v in f.inputs
    ]
    carried = [f.target.attributes[a] for a in f.carried if a in f.target.attributes]
    node = ir.Node(f.op_type, inputs, 1, carried, f.domain, ctx.fresh_name(base + "_quant"))
    for name, value in f.extra.items():
        node.set_attr(name, value)
    if f.domain == MS:
        ctx.ensure_opset(MS)
    ctx.replace_nodes(f.last, node, f.dead)
    for dq in f.dqs:  # (a DQ read twice by the unit is listed twice)
        if (
            dq.graph is ctx.graph
            and not dq.outputs[0].has_uses()
            and not ctx.is_output(dq.outputs[0])
        ):
            ctx.graph.remove(dq, safe=False)


@graph_pass(PASS, EXTENDED)
def qdq_fusion(ctx: PassContext) -> bool:
    first = PASS not in ctx.ran
    changed = False
    for node in ctx.graph:
        fusion = plan(ctx, node)  # (None for nodes an earlier fusion of this sweep removed)
        if fusion is None:
            continue
        _apply(ctx, fusion)
        ctx.count(PASS)
        changed = True
    if first and not changed:  # ConstantFolding has DQs to fold now: a change for the rounds
        changed = any(is_op(n, "DequantizeLinear") and _may_fuse(ctx, n) for n in ctx.graph)
    return changed


# ------------------------------------------------------------ a conv's activation as its table

LOOKUP_PASS = "QLinearConvLookupFusion"


@graph_pass(LOOKUP_PASS, EXTENDED)
def qlinear_conv_lookup(ctx: PassContext) -> bool:
    """QLinearConv -> ai.onyx TableLookup (LookupTableFusion's table of the activation after a
    quantized conv: DQ -> HardSwish -> Q) => ai.onyx QLinearConvLookup, the table applied in
    the conv's native call instead of a node of its own. Only a lookup of 256 bytes of the
    conv's output type that alone reads the conv's output."""
    changed = False
    for node in list(ctx.graph):
        lookup = _conv_lookup(ctx, node)
        if lookup is None:
            continue
        ctx.ensure_function("QLinearConvLookup", lambda: _conv_lookup_function(ctx))
        inputs = list(node.inputs) + [None] * (9 - len(node.inputs)) + [lookup.inputs[1]]
        carried = [node.attributes[a] for a in _CONV_ATTRIBUTES if a in node.attributes]
        name = ctx.fresh_name((node.name or "conv") + "_lookup")
        fused = ir.Node("QLinearConvLookup", inputs, 1, carried, ONYX_DOMAIN, name)
        ctx.replace_nodes(lookup, fused, (node,))
        ctx.count(LOOKUP_PASS)
        changed = True
    return changed


def _conv_lookup(ctx: PassContext, conv: ir.Node) -> ir.Node | None:
    """The TableLookup that alone reads QLinearConv ``conv``'s output, with a constant table
    of 256 values of that output's 8-bit type; None when there is none."""
    if not is_op(conv, "QLinearConv") or conv.domain not in STANDARD or conv.graph is not ctx.graph:
        return None
    if conv.attributes_have_refs() or any(a not in _CONV_ATTRIBUTES for a in conv.attributes):
        return None
    if len(conv.inputs) < 8 or ctx.is_output(conv.outputs[0]):
        return None
    lookup = ctx.single_use(conv.outputs[0])
    if lookup is None or lookup.op_type != "TableLookup" or lookup.domain != ONYX_DOMAIN:
        return None
    if lookup.graph is not ctx.graph or lookup.inputs[0] is not conv.outputs[0]:
        return None
    table, zero_point = ctx.const(lookup.inputs[1]), ctx.const(conv.inputs[7])
    if table is None or zero_point is None or table.shape != (256,):
        return None
    return lookup if table.dtype == zero_point.dtype and table.dtype in (_INT8, _UINT8) else None


def _conv_lookup_function(ctx: PassContext) -> ir.Function:
    """The model-local function QLinearConvLookup = Gather(table, Cast(QLinearConv(...),
    int32)), its attributes QLinearConv's: the saved model stays valid ONNX."""
    names = [
        "x",
        "x_scale",
        "x_zero_point",
        "w",
        "w_scale",
        "w_zero_point",
        "y_scale",
        "y_zero_point",
        "B",
        "table",
    ]
    params = [ir.Value(n) for n in names]
    refs = [ir.Attr(a, _REF_TYPES[a], ref_attr_name=a) for a in _CONV_ATTRIBUTES]
    conv = ir.Node("QLinearConv", params[:9], ["q"], refs)
    cast = ir.Node("Cast", [conv.outputs[0]], ["index"], {"to": int(ir.DataType.INT32)})
    gather = ir.Node("Gather", [params[9], cast.outputs[0]], ["y"], {"axis": 0})
    body = ir.Graph(params, [gather.outputs[0]], [conv, cast, gather], name="QLinearConvLookup")
    f = ir.Function(
        ONYX_DOMAIN,
        "QLinearConvLookup",
        body,
        _CONV_ATTRIBUTES,
        opset_imports={"": ctx.opset("") or 13},
    )
    f.doc_string = (
        "y = table[QLinearConv(...)] (the table by bit pattern: int8 -1 reads table[255])"
    )
    return f


# ------------------------------------------------- a requantizing pad on the bytes it moves

REQUANTIZE_PASS = "QDQPadRequantize"
_MOVING_PADS = ("reflect", "edge")


@graph_pass(REQUANTIZE_PASS, EXTENDED)
def pad_requantize(ctx: PassContext) -> bool:
    """DQ(x) -> Pad (reflect / edge) -> Q at other per-tensor 8-bit parameters => Pad on x's
    bytes -> DQ -> Q. Exact: such a pad only copies elements, so it commutes with the
    elementwise DQ and Q; the DQ -> Q left is a requantization that LookupTableFusion (after
    this pass) turns into one byte table (QDQDataMovement takes the same parameters' case).
    The pad moves a quarter of the bytes and a float pass goes (unet's pad after MaxPool)."""
    if ctx.opset() < 11:  # Pad takes 8-bit integers from opset 11
        return False
    changed = False
    for pad in list(ctx.graph):
        dq = _requantized_pad_source(ctx, pad)
        if dq is None:
            continue
        base = pad.outputs[0].name
        moved = ir.Node(
            "Pad",
            [dq.inputs[0], *pad.inputs[1:]],
            [ctx.fresh_name(base + "_bytes")],
            list(pad.attributes.values()),
            name=ctx.fresh_name((pad.name or "pad") + "_bytes"),
        )
        requant = ir.Node(
            "DequantizeLinear",
            [moved.outputs[0], *dq.inputs[1:]],
            [ctx.fresh_name(base + "_dequantized")],
            list(dq.attributes.values()),
            name=ctx.fresh_name((dq.name or "dq") + "_moved"),
        )
        ctx.graph.insert_before(pad, moved)
        ctx.graph.insert_before(pad, requant)
        ctx.replace_value(pad.outputs[0], requant.outputs[0])
        ctx.graph.remove(pad, safe=False)
        ctx.graph.remove(dq, safe=False)
        ctx.count(REQUANTIZE_PASS)
        changed = True
    return changed


def _requantized_pad_source(ctx: PassContext, pad: ir.Node) -> ir.Node | None:
    """The DQ a reflect / edge Pad alone reads, per tensor 8-bit, when a per-tensor 8-bit Q
    alone reads the pad; None otherwise."""
    if not is_op(pad, "Pad") or pad.graph is not ctx.graph or pad.attributes_have_refs():
        return None
    if pad.attr("mode", "constant") not in _MOVING_PADS or ctx.is_output(pad.outputs[0]):
        return None
    dq = pad.inputs[0].producer if pad.inputs and pad.inputs[0] is not None else None
    if not is_op(dq, "DequantizeLinear") or dq.graph is not ctx.graph:
        return None
    if ctx.single_use(dq.outputs[0]) is not pad or ctx.is_output(dq.outputs[0]):
        return None
    q = ctx.single_use(pad.outputs[0])
    if not is_op(q, "QuantizeLinear") or q.graph is not ctx.graph:
        return None
    a, b = _qparams(ctx, dq), _qparams(ctx, q)
    if a is None or b is None or not (a.per_tensor and b.per_tensor):
        return None
    return dq if a.dtype in (_INT8, _UINT8) and b.dtype in (_INT8, _UINT8) else None


# ------------------------------------------- a Relu that the Q after it makes redundant

RELU_PASS = "ReluQuantFusion"


@graph_pass(RELU_PASS, EXTENDED)
def relu_quantize(ctx: PassContext) -> bool:
    """Relu -> Q (per tensor, 8-bit, zero point its type's minimum) => Q: Q(Relu(v)) = Q(v)
    when Q's zero point is its type's minimum, as Q's clamp maps every v <= 0 to it. The
    float Relu between a QOperator model's BatchNormalization and its Q goes (onnxruntime's
    ReluQuantFusion removes it too, so NaN in v quantizes as onnxruntime's graph does)."""
    changed = False
    for relu in list(ctx.graph):
        if not _redundant_relu(ctx, relu):
            continue
        if not ctx.replace_value(relu.outputs[0], relu.inputs[0]):
            continue
        ctx.graph.remove(relu, safe=False)
        ctx.count(RELU_PASS)
        changed = True
    return changed


def _redundant_relu(ctx: PassContext, relu: ir.Node) -> bool:
    """``relu`` is a Relu whose only reader is a Q that makes it redundant."""
    if not is_op(relu, "Relu") or relu.domain not in STANDARD or relu.graph is not ctx.graph:
        return False
    if not relu.inputs or relu.inputs[0] is None:
        return False
    out = _output(ctx, relu, clip_ok=False)  # (its only reader, not a graph output)
    return (
        out is not None and out.q.inputs[0] is relu.outputs[0] and _redundant(ctx, relu, out.params)
    )
