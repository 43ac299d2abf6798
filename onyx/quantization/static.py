"""Static quantization to QDQ: QuantizeLinear -> DequantizeLinear pairs on the activations
of the selected ops (ranges from calibration), constant quantized weights with a
DequantizeLinear, and int32 biases at scale x_scale * w_scale, as onnxruntime's QDQ format,
so that onnxruntime and onyx's optimizer both fuse the node units into integer operators.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace

import numpy as np

from .. import ir
from .graphedit import Editor, constant_of, drop_unused_initializers, float_tensor, rename_output
from .params import QTYPES, quantize_weight, scale_zero_point


@dataclass(frozen=True)
class OpRule:
    """How one op type is quantized: activation inputs, weight inputs {index: per-channel
    axis as a function of the node and the weight's rank}, bias input, whether the output is
    quantized, and whether it shares its input's parameters (data movement ops)."""

    activations: tuple[int, ...] | None = (0,)  # None: every input
    weights: dict = field(default_factory=dict)
    bias: int | None = None
    output: bool = True
    shares_input_params: bool = False


def _gemm_axis(node: ir.Node, rank: int) -> int:
    return 0 if node.attr("transB", 0) else 1


RULES: dict[str, OpRule] = {
    "Conv": OpRule(weights={1: lambda n, r: 0}, bias=2),
    "ConvTranspose": OpRule(weights={1: lambda n, r: 1}, bias=2),
    "MatMul": OpRule(activations=(0, 1), weights={1: lambda n, r: r - 1}),
    "Gemm": OpRule(activations=(0, 1), weights={1: _gemm_axis}, bias=2),
    "Gather": OpRule(activations=(), weights={0: lambda n, r: 0}, output=False),
    "Add": OpRule(activations=None),
    "Mul": OpRule(activations=None),
    "Concat": OpRule(activations=None),
    "AveragePool": OpRule(),
    "GlobalAveragePool": OpRule(),
    "MaxPool": OpRule(shares_input_params=True),
    "Resize": OpRule(shares_input_params=True),
    "Softmax": OpRule(),
    "Sigmoid": OpRule(),
    "Reshape": OpRule(shares_input_params=True),
    "Transpose": OpRule(shares_input_params=True),
    "Flatten": OpRule(shares_input_params=True),
    "Squeeze": OpRule(shares_input_params=True),
    "Unsqueeze": OpRule(shares_input_params=True),
}
#: Op types quantized by default (data movement ops only pass 8-bit tensors along).
DEFAULT_OPS = (
    "Conv",
    "ConvTranspose",
    "MatMul",
    "Gemm",
    "Gather",
    "Add",
    "Mul",
    "Concat",
    "AveragePool",
    "GlobalAveragePool",
    "MaxPool",
    "Resize",
    "Softmax",
    "Reshape",
    "Transpose",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
)
#: Activations whose Q saturation does their work when the Q's zero point is the type minimum.
FOLDED_ACTIVATIONS = {"Relu"}
#: Outputs whose range is known, whatever calibration saw.
FIXED_RANGES = {"Softmax": (0.0, 1.0), "Sigmoid": (0.0, 1.0)}


@dataclass
class Settings:
    activation_type: str = "uint8"
    weight_type: str = "int8"
    per_channel: bool = True
    symmetric_activations: bool = False
    symmetric_weights: bool = True
    reduce_range: bool = False


@dataclass
class Plan:
    """What to quantize: the nodes, the activation tensors (by name) and which tensors take
    their parameters from another (output of a data movement op <- its input)."""

    nodes: list[ir.Node]
    tensors: list[str]
    shared: dict[str, str]


def plan(graph: ir.Graph, selected: list[ir.Node]) -> Plan:
    tensors: dict[str, None] = {}
    shared: dict[str, str] = {}
    chosen = {id(n) for n in selected}
    for node in selected:
        rule = RULES[node.op_type]
        idx = range(len(node.inputs)) if rule.activations is None else rule.activations
        for i in idx:
            v = node.inputs[i] if i < len(node.inputs) else None
            if i in rule.weights and constant_of(graph, v) is not None:
                continue
            if float_tensor(v) and constant_of(graph, v) is None:
                tensors.setdefault(v.name)
        out = node.outputs[0]
        if not rule.output or not float_tensor(out):
            continue
        out = _folded_activation_output(graph, out, chosen)
        if rule.shares_input_params and float_tensor(node.inputs[0]):
            shared[out.name] = node.inputs[0].name
        tensors.setdefault(out.name)
    names = [t for t in tensors if t not in shared]
    return Plan(list(selected), names, shared)


def _folded_activation_output(graph: ir.Graph, out: ir.Value, chosen: set) -> ir.Value:
    """The Relu's output where the op's only reader is a Relu (quantizing after it is exact)."""
    readers = out.consumers()
    if (
        len(readers) == 1
        and readers[0].op_type in FOLDED_ACTIVATIONS
        and id(readers[0]) not in chosen
    ):
        if all(o is not out for o in graph.outputs):
            return readers[0].outputs[0]
    return out


def apply(model: ir.Model, p: Plan, ranges: dict[str, tuple[float, float]], s: Settings) -> None:
    """Rewrite ``model`` (in place) per the plan, with activation ranges from calibration."""
    ed = Editor(model)
    graph = model.graph
    ed.use_opset("", 10)
    # (QuantizeLinear's axis, for per-channel weights, came at opset 13)
    if s.per_channel and (model.opset("") or 0) < 13:
        warnings.warn(
            "opset < 13 has no per-channel QuantizeLinear: weights per tensor", stacklevel=3
        )
        s = replace(s, per_channel=False)
    values = {v.name: v for v in graph.values()}
    params: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in p.tensors:
        params[name] = _activation_params(values.get(name), ranges.get(name, (0.0, 0.0)), s)
    for out, src in p.shared.items():
        if src in params:
            params[out] = params[src]
        elif out in ranges:
            params[out] = _activation_params(values.get(out), ranges[out], s)
    #: id(DequantizeLinear output) -> the name of the tensor it stands for
    dq_of: dict[int, str] = {}
    for name, (scale, zp) in params.items():
        if name in values:
            dq_of[id(_insert_qdq(ed, values[name], scale, zp))] = name
    for node in p.nodes:
        _quantize_constants(ed, node, dq_of, params, s)
    _drop_folded_relus(graph, params, s)
    graph.topological_sort()
    drop_unused_initializers(graph)


def _activation_params(value: ir.Value | None, rng, s: Settings):
    producer = value.producer if value is not None else None
    if producer is not None and producer.op_type in FIXED_RANGES:
        rng = FIXED_RANGES[producer.op_type]
    return scale_zero_point(
        rng[0], rng[1], s.activation_type, s.symmetric_activations, reduce_range=False
    )


def _insert_qdq(ed: Editor, value: ir.Value, scale, zp) -> ir.Value:
    graph = ed.graph
    base = value.name
    s = ed.const(f"{base}_scale", scale.reshape(()))
    z = ed.const(f"{base}_zero_point", zp.reshape(()))
    uses = value.uses()
    anchor = value.producer
    kw = {"after": anchor} if anchor is not None else {"before": graph.nodes[0]}
    q = ed.node("QuantizeLinear", [value, s, z], base=base, **kw)
    dq = ed.node("DequantizeLinear", [q.outputs[0], s, z], base=base, after=q)
    q.outputs[0].type = ir.TensorType(QTYPES[_qname(zp)][0], value.shape)
    dq.outputs[0].type = value.type
    for node, i in uses:
        node.set_input(i, dq.outputs[0])
    if any(o is value for o in graph.outputs):
        rename_output(graph, value, dq.outputs[0])
    return dq.outputs[0]


def _qname(zp: np.ndarray) -> str:
    return "int8" if zp.dtype == np.int8 else "uint8"


def _quantize_constants(ed: Editor, node: ir.Node, dq_of, params, s: Settings) -> None:
    graph = ed.graph
    rule = RULES[node.op_type]
    w_scale = None
    for i, axis_of in rule.weights.items():
        w = constant_of(graph, node.inputs[i]) if i < len(node.inputs) else None
        if w is None or w.dtype != np.float32:
            continue
        axis = axis_of(node, w.ndim) if s.per_channel and w.ndim > 1 else None
        q, scale, zp = quantize_weight(w, s.weight_type, axis, s.symmetric_weights, s.reduce_range)
        w_scale = scale
        node.set_input(i, _dequantized(ed, node.inputs[i].name, q, scale, zp, axis, before=node))
    idx = range(len(node.inputs)) if rule.activations is None else rule.activations
    for i in idx:  # constant operands of Add/Mul/Concat: quantized like the activations
        v = node.inputs[i] if i < len(node.inputs) else None
        c = constant_of(graph, v)
        if c is None or c.dtype != np.float32 or i in rule.weights:
            continue
        scale, zp = scale_zero_point(c.min(initial=0.0), c.max(initial=0.0), s.activation_type)
        q = _quant(c, scale, zp, s.activation_type)
        node.set_input(i, _dequantized(ed, v.name, q, scale, zp, None, before=node))
    if rule.bias is not None and w_scale is not None:
        _quantize_bias(ed, node, rule.bias, dq_of, params, w_scale)


def _quant(x, scale, zp, name):
    from .params import quantize_array

    return quantize_array(x, scale, zp, name)


def _dequantized(ed: Editor, base, q, scale, zp, axis, before: ir.Node) -> ir.Value:
    qv = ed.const(f"{base}_quantized", q)
    sv = ed.const(f"{base}_scale", scale if axis is not None else scale.reshape(()))
    zv = ed.const(f"{base}_zero_point", zp if axis is not None else zp.reshape(()))
    attrs = {"axis": axis} if axis is not None else {}
    dq = ed.node("DequantizeLinear", [qv, sv, zv], base=base, before=before, **attrs)
    dq.outputs[0].type = ir.TensorType(ir.DataType.FLOAT, ir.Shape(q.shape))
    return dq.outputs[0]


def _quantize_bias(ed: Editor, node: ir.Node, index: int, dq_of, params, w_scale) -> None:
    graph = ed.graph
    b = constant_of(graph, node.inputs[index]) if index < len(node.inputs) else None
    x = node.inputs[0]
    src = dq_of.get(id(x))
    if b is None or b.dtype != np.float32 or b.ndim != 1 or src not in params:
        return
    x_scale = params[src][0]
    scale = (np.float32(x_scale) * w_scale.astype(np.float32)).astype(np.float32)
    scale = np.broadcast_to(scale, b.shape).copy() if scale.size > 1 else scale.reshape(())
    safe = np.where(scale > 0, scale, 1.0)
    q = np.clip(np.rint(b / safe), -(2**31), 2**31 - 1).astype(np.int32)
    axis = 0 if scale.ndim else None
    zp = np.zeros(scale.shape, np.int32)
    node.set_input(
        index, _dequantized(ed, node.inputs[index].name, q, scale, zp, axis, before=node)
    )


def _drop_folded_relus(graph: ir.Graph, params, s: Settings) -> None:
    """Relu -> Q with the type-minimum zero point: Q saturates exactly as Relu would."""
    lo = QTYPES[s.activation_type][2]
    for node in list(graph):
        if node.op_type not in FOLDED_ACTIVATIONS:
            continue
        out = node.outputs[0]
        readers = out.consumers()
        if not readers or any(r.op_type != "QuantizeLinear" for r in readers):
            continue
        if any(o is out for o in graph.outputs) or out.name not in params:
            continue
        if int(params[out.name][1]) != lo:
            continue
        src = node.inputs[0]
        if src.producer is None or src.producer.op_type not in RULES:
            continue
        out.replace_all_uses_with(src)
        graph.remove(node)
