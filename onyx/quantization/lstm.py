"""LSTM -> com.microsoft DynamicQuantizeLSTM (onnxruntime's contrib op).

Its weights are the LSTM's W [dirs, 4H, I] and R [dirs, 4H, H] transposed to [dirs, I, 4H] and
[dirs, H, 4H], int8 symmetric with a scale per direction (or per direction and column).
"""

from __future__ import annotations

import numpy as np

from .. import ir
from .dynamic import _finish
from .graphedit import Editor, constant_of
from .params import quantize_weight

MS = "com.microsoft"


def quantize_lstm(ed: Editor, node: ir.Node, per_channel: bool) -> bool:
    w, r = (constant_of(ed.graph, node.inputs[i]) for i in (1, 2))
    if w is None or r is None or node.attr("layout", 0) != 0:
        return False
    base = node.name or node.outputs[0].name
    packed = []
    for name, m in (("W", w), ("R", r)):
        t = np.ascontiguousarray(np.transpose(m, (0, 2, 1)))  # [dirs, in, 4H]
        qs, ss, zs = [], [], []
        for d in range(t.shape[0]):
            q, s, z = quantize_weight(t[d], "int8", 1 if per_channel else None, True)
            qs.append(q), ss.append(np.atleast_1d(s)), zs.append(np.atleast_1d(z))
        shape = (t.shape[0], -1) if per_channel else (t.shape[0],)
        packed += [
            ed.const(f"{base}_{name}_quantized", np.stack(qs)),
            ed.const(f"{base}_{name}_scale", np.stack(ss).reshape(shape)),
            ed.const(f"{base}_{name}_zero_point", np.stack(zs).reshape(shape)),
        ]
    rest = list(node.inputs[3:8]) + [None] * (5 - len(node.inputs[3:8]))  # B, seq, h0, c0, P
    inputs = [
        node.inputs[0],
        packed[0],
        packed[3],
        *rest,
        packed[1],
        packed[2],
        packed[4],
        packed[5],
    ]
    attrs = {k: a for k, a in node.attributes.items()}
    new = ir.Node(
        "DynamicQuantizeLSTM",
        inputs,
        len(node.outputs),
        attrs.values(),
        domain=MS,
        name=ed.name(base + "_quant"),
    )
    ed.graph.insert_before(node, new)
    for old, out in zip(node.outputs, new.outputs):
        out.type = old.type
        out.name = ""
    for old, out in zip(node.outputs, new.outputs):
        out.name = ed.name(old.name + "_q")
        _finish(ed, old, out)
    ed.use_opset(MS, 1)
    return True
