"""Dynamic quantization: weights quantized ahead of time, activations at run time.

    MatMul(x, W)          -> DynamicQuantizeLinear(x) -> MatMulInteger -> Cast -> Mul(x_scale * w_scale)
    Gemm(x, W, C)         -> the same on W (transposed as needed) -> Add(C)
    Conv(x, W, B)         -> DynamicQuantizeLinear(x) -> ConvInteger -> Cast -> Mul -> Add(B)
    Gather(W, i)          -> Gather(Wq, i) -> Cast -> Mul(Gather(row scales, i))
    LSTM(x, W, R, B ...)  -> com.microsoft DynamicQuantizeLSTM

Standard ops only, but for LSTM; a DynamicQuantizeLinear is shared by every reader of the same
tensor (attention's Q, K and V projections quantize their input once).
"""

from __future__ import annotations

import numpy as np

from .. import ir
from .graphedit import Editor, constant_of, drop_unused_initializers, float_tensor, rename_output
from .params import quantize_weight

MS = "com.microsoft"
DEFAULT_OPS = ("MatMul", "Gemm", "Conv", "Gather", "LSTM")


def apply(
    model: ir.Model,
    nodes: list[ir.Node],
    per_channel: bool = True,
    weight_type: str = "int8",
    reduce_range: bool = False,
    fused: bool = False,
) -> None:
    """``fused``: MatMul/Gemm as one com.microsoft DynamicQuantizeMatMul each (onnxruntime's
    fused form: fewer nodes to dispatch, but no DynamicQuantizeLinear shared between readers)."""
    ed = Editor(model)
    ed.use_opset("", 11)  # DynamicQuantizeLinear
    shared: dict = {"fused": fused}  # id(value) -> its DynamicQuantizeLinear
    for node in nodes:
        fn = _REWRITES.get(node.op_type)
        if fn is not None and fn(ed, node, shared, per_channel, weight_type, reduce_range):
            _retire(ed, node)
    ed.graph.topological_sort()
    drop_unused_initializers(ed.graph)


def _retire(ed: Editor, node: ir.Node) -> None:
    ed.graph.remove(node, safe=False)


def _dynamic_input(ed: Editor, x: ir.Value, node: ir.Node, shared: dict) -> ir.Node:
    dq = shared.get(id(x))
    if dq is None:
        dq = ed.node("DynamicQuantizeLinear", [x], 3, base=x.name, before=node)
        shared[id(x)] = dq
    return dq


def _finish(ed: Editor, out: ir.Value, result: ir.Value) -> None:
    """Route the readers of ``out`` (and the graph output it is) to ``result``."""
    result.type = out.type
    out.replace_all_uses_with(result)
    if any(o is out for o in ed.graph.outputs):
        rename_output(ed.graph, out, result)


def _integer_product(ed, node, x, w2d, op, shared, per_channel, wtype, reduce_range, **attrs):
    """op(x, W) computed as Cast(opInteger(xq, Wq)) * (x_scale * w_scale)."""
    axis = (0 if op == "ConvInteger" else w2d.ndim - 1) if per_channel else None
    symmetric = wtype == "int8"
    q, scale, zp = quantize_weight(w2d, wtype, axis, symmetric, reduce_range)
    dq = _dynamic_input(ed, x, node, shared)
    base = node.name or node.outputs[0].name
    wq = ed.const(f"{base}_W_quantized", q)
    # (ConvInteger's zero point is one value in onnxruntime: 0 when per channel, symmetric)
    per_column = axis is not None and op == "MatMulInteger"
    wz = ed.const(f"{base}_W_zero_point", zp if per_column else zp.reshape(-1)[:1].reshape(()))
    integer = ed.node(op, [dq.outputs[0], wq, dq.outputs[2], wz], base=base, before=node, **attrs)
    cast = ed.node("Cast", [integer.outputs[0]], base=base, before=node, to=int(ir.DataType.FLOAT))
    if op == "ConvInteger" and axis is not None:
        scale = scale.reshape(-1, *([1] * (w2d.ndim - 2)))
    ws = ed.const(f"{base}_W_scale", scale.astype(np.float32))
    both = ed.node("Mul", [dq.outputs[1], ws], base=base + "_scale", before=node)
    return ed.node("Mul", [cast.outputs[0], both.outputs[0]], base=base, before=node).outputs[0]


def _fused_matmul(ed, node, x, w, bias, per_channel, wtype, reduce_range) -> ir.Value:
    q, scale, zp = quantize_weight(
        w, wtype, 1 if per_channel else None, wtype == "int8", reduce_range
    )
    base = node.name or node.outputs[0].name
    inputs = [
        x,
        ed.const(f"{base}_W_quantized", q),
        ed.const(f"{base}_W_scale", scale),
        ed.const(f"{base}_W_zero_point", zp),
        bias,
    ]
    ed.use_opset(MS, 1)
    return ed.node("DynamicQuantizeMatMul", inputs, base=base, before=node, domain=MS).outputs[0]


def _matmul(ed, node, shared, per_channel, wtype, reduce_range) -> bool:
    x, w = node.inputs[0], constant_of(ed.graph, node.inputs[1])
    if w is None or w.dtype != np.float32 or w.ndim != 2 or not float_tensor(x):
        return False
    if shared["fused"]:
        y = _fused_matmul(ed, node, x, w, None, per_channel, wtype, reduce_range)
        _finish(ed, node.outputs[0], y)
        return True
    _finish(
        ed,
        node.outputs[0],
        _integer_product(ed, node, x, w, "MatMulInteger", shared, per_channel, wtype, reduce_range),
    )
    return True


def _gemm(ed, node, shared, per_channel, wtype, reduce_range) -> bool:
    x, w = node.inputs[0], constant_of(ed.graph, node.inputs[1])
    plain = node.attr("alpha", 1.0) == 1.0 and node.attr("beta", 1.0) == 1.0
    if (
        w is None
        or w.dtype != np.float32
        or not plain
        or node.attr("transA", 0)
        or not float_tensor(x)
    ):
        return False
    if node.attr("transB", 0):
        w = np.ascontiguousarray(w.T)
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if shared["fused"] and (bias is None or (bias.shape is not None and len(bias.shape) == 1)):
        _finish(
            ed,
            node.outputs[0],
            _fused_matmul(ed, node, x, w, bias, per_channel, wtype, reduce_range),
        )
        return True
    y = _integer_product(ed, node, x, w, "MatMulInteger", shared, per_channel, wtype, reduce_range)
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        y = ed.node("Add", [y, node.inputs[2]], base=node.name, before=node).outputs[0]
    _finish(ed, node.outputs[0], y)
    return True


def _conv(ed, node, shared, per_channel, wtype, reduce_range) -> bool:
    x, w = node.inputs[0], constant_of(ed.graph, node.inputs[1])
    if w is None or w.dtype != np.float32 or not float_tensor(x):
        return False
    attrs = {k: a.value for k, a in node.attributes.items()}
    wtype, per_channel = _conv_weight_form(w, per_channel, reduce_range)
    y = _integer_product(
        ed, node, x, w, "ConvInteger", shared, per_channel, wtype, reduce_range, **attrs
    )
    b = node.inputs[2] if len(node.inputs) > 2 else None
    if b is not None:
        bias = constant_of(ed.graph, b)
        if bias is not None:
            b = ed.const(f"{b.name}_reshaped", bias.reshape(-1, *([1] * (w.ndim - 2))))
        else:
            return False
        y = ed.node("Add", [y, b], base=node.name, before=node).outputs[0]
    _finish(ed, node.outputs[0], y)
    return True


def _conv_weight_form(w: np.ndarray, per_channel: bool, reduce_range: bool) -> tuple[str, bool]:
    """onnxruntime's ConvInteger takes one weight zero point: either uint8 asymmetric per
    tensor, or int8 symmetric (zero point 0) with a scale per output channel applied after the
    integer convolution. Whichever reconstructs the weight better."""
    if not per_channel:
        return "uint8", False
    errors = {}
    for wtype, axis in (("uint8", None), ("int8", 0)):
        q, scale, zp = quantize_weight(w, wtype, axis, wtype == "int8", reduce_range)
        shape = (-1,) + (1,) * (w.ndim - 1) if axis is not None else ()
        back = (q.astype(np.float32) - zp.reshape(shape)) * scale.reshape(shape)
        errors[wtype] = float(np.square(back - w).mean())
    return ("int8", True) if errors["int8"] < errors["uint8"] else ("uint8", False)


def _gather(ed, node, shared, per_channel, wtype, reduce_range) -> bool:
    w = constant_of(ed.graph, node.inputs[0])
    if w is None or w.dtype != np.float32 or w.ndim != 2 or node.attr("axis", 0) != 0:
        return False
    q, scale, _ = quantize_weight(w, "int8", 0 if per_channel else None, True, False)
    base = node.name or node.outputs[0].name
    wq = ed.const(f"{base}_quantized", q)
    rows = ed.node("Gather", [wq, node.inputs[1]], base=base, before=node)
    cast = ed.node("Cast", [rows.outputs[0]], base=base, before=node, to=int(ir.DataType.FLOAT))
    if per_channel:
        sv = ed.const(f"{base}_scale", scale.reshape(-1, 1))
        s = ed.node("Gather", [sv, node.inputs[1]], base=base + "_scale", before=node).outputs[0]
    else:
        s = ed.const(f"{base}_scale", scale.reshape(()))
    _finish(
        ed, node.outputs[0], ed.node("Mul", [cast.outputs[0], s], base=base, before=node).outputs[0]
    )
    return True


def _lstm(ed, node, shared, per_channel, wtype, reduce_range) -> bool:
    from .lstm import quantize_lstm

    return quantize_lstm(ed, node, per_channel)


_REWRITES = {"MatMul": _matmul, "Gemm": _gemm, "Conv": _conv, "Gather": _gather, "LSTM": _lstm}
