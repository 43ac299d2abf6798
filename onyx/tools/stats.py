"""Model statistics: MACs, FLOPs, parameters and activation memory, per node and in total.

    s = onyx.model_stats("model.onnx", input_shapes={"batch": 1})
    s.macs, s.flops, s.params, s.peak_memory
    print(s.table())                       # per operator type, then the totals

Conventions (docs/tools.md):
- ``macs``: multiply-accumulates of the products (Conv, ConvTranspose, MatMul, Gemm, the
  recurrent ops, attention's two products, their quantized forms), plus one per output element
  for an added bias: onnx-tool's count for these ops.
- ``flops``: 2 per MAC plus the arithmetic of the other ops, one per output element and per
  elementary operation (Add 1, Softmax 3, LayerNormalization 5, ...).
- ``params``: elements of the initializers (each counted once, at the first node reading it).
- ``peak_memory``: the most bytes of activations alive at once when the nodes run in graph
  order (graph inputs included, weights not; a value dies after its last reader).
- ``memory``: onnx-tool's sum over nodes of output bytes plus the bytes of their parameters.
Symbolic dims are bound by ``input_shapes`` (input name -> dims, or dim name -> size); any dim
still unknown counts as 1 and is listed in ``assumed``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from ..ir import Model, Node, TensorType, Value
from ..ir.dtypes import bit_width
from ._common import as_model, copy_model

__all__ = ["ModelStats", "NodeStats", "model_stats"]


@dataclass
class NodeStats:
    name: str
    op_type: str
    macs: int = 0
    flops: int = 0
    params: int = 0
    param_bytes: int = 0
    output_bytes: int = 0
    output_shapes: list = field(default_factory=list)


@dataclass
class ModelStats:
    nodes: list[NodeStats]
    macs: int
    flops: int
    params: int
    param_bytes: int
    peak_memory: int
    memory: int
    activation_bytes: int
    assumed: list[str]

    def by_op_type(self) -> dict[str, dict[str, int]]:
        """op type -> {count, macs, flops, params}, in descending MACs."""
        rows: dict[str, dict[str, int]] = defaultdict(
            lambda: dict.fromkeys(("count", "macs", "flops", "params"), 0)
        )
        for n in self.nodes:
            r = rows[n.op_type]
            r["count"] += 1
            r["macs"] += n.macs
            r["flops"] += n.flops
            r["params"] += n.params
        return dict(sorted(rows.items(), key=lambda kv: (-kv[1]["macs"], -kv[1]["flops"], kv[0])))

    def table(self, per_node: bool = False) -> str:
        """A text table per op type (or per node) with the totals."""
        lines = []
        if per_node:
            lines.append(f"{'node':40} {'op':18} {'MACs':>14} {'FLOPs':>14} {'params':>10}")
            for n in self.nodes:
                lines.append(
                    f"{n.name[:40]:40} {n.op_type[:18]:18} {n.macs:>14,} {n.flops:>14,} {n.params:>10,}"
                )
        else:
            lines.append(
                f"{'op type':24} {'count':>6} {'MACs':>16} {'%':>6} {'FLOPs':>16} {'params':>12}"
            )
            for op, r in self.by_op_type().items():
                share = 100 * r["macs"] / self.macs if self.macs else 0.0
                lines.append(
                    f"{op[:24]:24} {r['count']:>6} {r['macs']:>16,} {share:>6.1f} "
                    f"{r['flops']:>16,} {r['params']:>12,}"
                )
        lines.append("")
        lines.append(f"total MACs        {self.macs:,} ({_human(self.macs)})")
        lines.append(f"total FLOPs       {self.flops:,} ({_human(self.flops)})")
        lines.append(f"parameters        {self.params:,} ({_human(self.param_bytes, 'B')})")
        lines.append(f"peak activations  {_human(self.peak_memory, 'B')} (in graph order)")
        lines.append(f"memory            {_human(self.memory, 'B')} (outputs + weights, all nodes)")
        if self.assumed:
            lines.append(f"dims taken as 1   {', '.join(self.assumed)} (bind them with --shape)")
        return "\n".join(lines)


def _human(n: float, unit: str = "") -> str:
    for suffix in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g} {suffix}{unit}".strip()
        n /= 1000
    return f"{n:.3g} P{unit}"


# ---------------------------------------------------------------------------------- shapes


class _Shapes:
    """Concrete dims of the values, unknown ones counted as 1 (and remembered)."""

    def __init__(self):
        self.assumed: set[str] = set()

    def dims(self, v: Value | None) -> tuple[int, ...] | None:
        if v is None or not isinstance(v.type, TensorType) or v.type.shape is None:
            return None
        out = []
        for d in v.type.shape.dims:
            if isinstance(d, int):
                out.append(d)
            else:
                self.assumed.add(str(d) if d is not None else "?")
                out.append(1)
        return tuple(out)

    def size(self, v: Value | None) -> int:
        d = self.dims(v)
        return 0 if d is None else math.prod(d)

    def nbytes(self, v: Value | None) -> int:
        if v is None or not isinstance(v.type, TensorType) or not v.type.elem_type:
            return 0
        bits = bit_width(v.type.elem_type) or 8
        return -(-self.size(v) * bits // 8)


# ---------------------------------------------------------------------------------- op costs

#: FLOPs per output element of ops that are not products (elementary operations per value).
_FLOPS_PER_ELEMENT = {
    **dict.fromkeys(
        ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Neg", "Abs", "Relu", "LeakyRelu"),
        1,
    ),
    **dict.fromkeys(("Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Erf", "Sin", "Cos", "Sign"), 1),
    **dict.fromkeys(("Sigmoid", "HardSigmoid", "Clip", "Elu", "Selu", "PRelu", "Softplus"), 2),
    **dict.fromkeys(("HardSwish", "Gelu", "Mish", "Celu", "ThresholdedRelu"), 3),
    **dict.fromkeys(("Softmax", "LogSoftmax"), 3),
    "BatchNormalization": 2,
    "InstanceNormalization": 5,
    "LayerNormalization": 5,
    "GroupNormalization": 5,
    "SimplifiedLayerNormalization": 4,
    "QuantizeLinear": 2,
    "DequantizeLinear": 2,
    "Where": 1,
    "Equal": 1,
    "Greater": 1,
    "Less": 1,
    "Not": 1,
    "And": 1,
    "Or": 1,
    "Cast": 0,
}
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
#: Input positions of (data, weight, bias) of the convolution ops.
_CONV_INPUTS = {
    "Conv": (0, 1, 2),
    "FusedConv": (0, 1, 2),
    "ConvHardSwish": (0, 1, 2),
    "ConvInteger": (0, 1, None),
    "QLinearConv": (0, 3, 8),
    "NhwcConv": (0, 1, 2),
}
#: Input positions of (A, B) of the matrix products.
_MATMUL_INPUTS = {
    "MatMul": (0, 1),
    "MatMulInteger": (0, 1),
    "QLinearMatMul": (0, 3),
    "MatMulIntegerToFloat": (0, 1),
    "DynamicQuantizeMatMul": (0, 1),
    "FusedMatMul": (0, 1),
}


def _node_cost(node: Node, sh: _Shapes) -> tuple[int, int]:
    """(MACs, extra FLOPs beyond 2 per MAC)."""
    op = node.op_type
    ins, outs = node.inputs, node.outputs
    out_size = sh.size(outs[0]) if outs else 0
    if op in _CONV_INPUTS:
        _, w, b = _CONV_INPUTS[op]
        wd = sh.dims(ins[w]) if len(ins) > w else None
        if not wd or len(wd) < 2:
            return 0, 0
        bias = out_size if b is not None and len(ins) > b and ins[b] is not None else 0
        return out_size * math.prod(wd[1:]) + bias, 0
    if op == "ConvTranspose":
        wd = sh.dims(ins[1])
        if not wd or len(wd) < 2:
            return 0, 0
        bias = out_size if len(ins) > 2 and ins[2] is not None else 0
        return sh.size(ins[0]) * math.prod(wd[1:]) + bias, 0
    if op in _MATMUL_INPUTS:
        a = sh.dims(ins[_MATMUL_INPUTS[op][0]])
        k = a[-1] if a else 0
        return out_size * k, 0
    if op == "Gemm":
        a = sh.dims(ins[0])
        if not a or len(a) != 2:
            return 0, 0
        k = a[0] if node.attr("transA", 0) else a[1]
        bias = out_size if len(ins) > 2 and ins[2] is not None else 0
        return out_size * k + bias, 0
    if op in _GATES:
        x, w = sh.dims(ins[0]), sh.dims(ins[1])
        r = sh.dims(ins[2])
        if not x or not w or not r:
            return 0, 0
        seq, batch = (x[0], x[1]) if node.attr("layout", 0) == 0 else (x[1], x[0])
        dirs, gh, inp = w
        hidden = r[2]
        return seq * batch * dirs * gh * (inp + hidden), out_size * 4
    if op in ("Attention", "MultiHeadAttention", "GroupQueryAttention"):
        q, k = sh.dims(ins[0]), sh.dims(ins[1])
        if q and k and len(q) == 4 and len(k) == 4:  # [B, H, S, D] x [B, H, L, D]
            b, h, s, d = q
            return 2 * b * h * s * k[2] * d, b * h * s * k[2] * 3
        return 0, 0
    if op in ("MaxPool", "AveragePool", "LpPool"):
        kernel = math.prod(node.attr("kernel_shape", [1]))
        return 0, out_size * kernel
    if op in (
        "GlobalAveragePool",
        "GlobalMaxPool",
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
    ):
        return 0, sh.size(ins[0])
    return 0, out_size * _FLOPS_PER_ELEMENT.get(op, 0)


# ---------------------------------------------------------------------------------- the walk


def model_stats(model, input_shapes: dict | None = None) -> ModelStats:
    """MACs, FLOPs, parameters and memory of ``model`` (a Model or a path); see the module's
    notes for the conventions. ``input_shapes``: {input name: dims} and/or {dim name: size}."""
    m = _shaped(as_model(model), input_shapes or {})
    g = m.graph
    sh = _Shapes()
    counted: set[int] = set()
    nodes = []
    for node in g:
        macs, extra = _node_cost(node, sh)
        params = param_bytes = 0
        for v in node.inputs:
            if v is not None and v.const_value is not None and id(v) not in counted:
                counted.add(id(v))
                params += v.const_value.size
                param_bytes += v.const_value.nbytes
        out_bytes = sum(sh.nbytes(v) for v in node.outputs)
        shapes = [list(sh.dims(v) or ()) for v in node.outputs]
        nodes.append(
            NodeStats(
                node.name or node.op_type,
                node.op_type,
                macs,
                2 * macs + extra,
                params,
                param_bytes,
                out_bytes,
                shapes,
            )
        )
    return ModelStats(
        nodes=nodes,
        macs=sum(n.macs for n in nodes),
        flops=sum(n.flops for n in nodes),
        params=sum(
            v.const_value.size for v in g.initializers.values() if v.const_value is not None
        ),
        param_bytes=sum(
            v.const_value.nbytes for v in g.initializers.values() if v.const_value is not None
        ),
        peak_memory=_peak(g, sh),
        memory=sum(n.output_bytes + n.param_bytes for n in nodes),
        activation_bytes=sum(n.output_bytes for n in nodes),
        assumed=sorted(sh.assumed),
    )


def _shaped(model: Model, input_shapes: dict) -> Model:
    """A copy with the input dims bound and every value's type inferred."""
    from ..inference import infer_shapes
    from .compose import update_dims

    m = copy_model(model)
    by_input = {k: v for k, v in input_shapes.items() if isinstance(v, list | tuple)}
    symbols = {k: int(v) for k, v in input_shapes.items() if not isinstance(v, list | tuple)}
    inputs = {v.name: v for v in m.graph.inputs}
    for name, v in inputs.items():
        if name in by_input or not isinstance(v.type, TensorType) or v.type.shape is None:
            continue
        if any(d in symbols for d in v.type.shape.dims):
            by_input[name] = [symbols.get(d, d) if isinstance(d, str) else d for d in v.type.shape]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if by_input:  # (stale intermediate types are dropped and inferred anew)
            m = update_dims(m, by_input, infer=True)
        else:
            infer_shapes(m)
        _fill_from_folded(m)
    return m


def _fill_from_folded(m: Model) -> None:
    """Static shapes that inference missed, taken from a constant-folded copy (shapes computed
    by small constant subgraphs, such as a Pad's pads, become known there)."""
    from ..inference import infer_shapes
    from ..optimizer import optimize

    def static(v: Value) -> bool:
        t = v.type
        return isinstance(t, TensorType) and t.shape is not None and t.shape.is_static()

    missing = [v for n in m.graph for v in n.outputs if v.name and not static(v)]
    if not missing:
        return
    try:
        folded = infer_shapes(optimize(m, level="basic"))
    except Exception:  # a shape aid only: the stats stand without it
        return
    known = {v.name: v.type for v in folded.graph.values() if v.name and static(v)}
    for v in missing:
        t = known.get(v.name)
        if t is not None:
            v.type = t


def _peak(g, sh: _Shapes) -> int:
    """Most activation bytes alive at once, running the nodes in graph order."""
    last_use: dict[int, int] = {}
    order = list(g)
    for i, node in enumerate(order):
        for v in _reads(node):
            last_use[id(v)] = i
    keep = {id(v) for v in g.outputs}
    weights = {id(v) for v in g.initializers.values()}
    live = {id(v): sh.nbytes(v) for v in g.inputs if id(v) not in weights}
    current = sum(live.values())
    peak = current
    for i, node in enumerate(order):
        for v in node.outputs:
            if id(v) not in live:
                live[id(v)] = sh.nbytes(v)
                current += live[id(v)]
        peak = max(peak, current)
        for v in list(_reads(node)) + list(node.outputs):
            if id(v) in live and id(v) not in keep and last_use.get(id(v), -1) <= i:
                current -= live.pop(id(v))
    return peak


def _reads(node: Node):
    from ..ir import captured_values

    for v in node.inputs:
        if v is not None:
            yield v
    for sub in node.subgraphs():
        yield from captured_values(sub)
