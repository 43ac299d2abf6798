"""Logits for the last position only: what a generation loop reads of a step.

A decoder computes the LM head's logits for every position of a prompt ([1, S, vocab]: 250 MB
for 2048 tokens of a 32000-word vocabulary, and most of a short model's prefill time), and the
loop keeps only the last row. :func:`last_token_logits` rewrites the model so that the LM head
reads the last position's hidden state alone (a Gather of index -1 on the sequence axis before
it); the logits output is then [B, 1, vocab], the same values as the last row of the original's
(each row of a MatMul is its own product)."""

from __future__ import annotations

import numpy as np

from .. import ir
from ..ir.dtypes import from_numpy

#: Ops between the LM head and the logits output that act on each position alone (their other
#: inputs constants): a softcap's Div / Tanh / Mul, a Cast.
_PER_POSITION = {"Cast", "Tanh", "Mul", "Div", "Add", "Sub", "Softcap"}
_HEADS = {("", "MatMul"), ("com.microsoft", "MatMulNBits")}


def _lm_head(model: ir.Model, logits: str) -> ir.Node | None:
    """The MatMul / MatMulNBits that makes the logits output (through per-position ops)."""
    graph = model.graph
    value = next((v for v in graph.outputs if v.name == logits), None)
    node = value.producer if value is not None else None
    while node is not None and (node.domain, node.op_type) not in _HEADS:
        if node.op_type not in _PER_POSITION or node.domain not in ("", "com.microsoft"):
            return None
        rest = [v for v in node.inputs[1:] if v is not None]
        if any(v.const_value is None for v in rest):
            return None
        node = node.inputs[0].producer if node.inputs and node.inputs[0] is not None else None
    if node is None or node.graph is not graph:
        return None
    weight = node.inputs[1]
    return node if weight is not None and weight.const_value is not None else None


def last_token_logits(model: ir.Model, logits: str = "logits") -> bool:
    """Rewrite ``model`` (in place) so that ``logits`` holds the last position's row only
    ([B, 1, vocab]); False (unchanged) where the LM head is not a MatMul / MatMulNBits of the
    hidden states [B, S, hidden] with a constant weight."""
    head = _lm_head(model, logits)
    if head is None:
        return False
    hidden = head.inputs[0]
    shape = getattr(hidden.type, "shape", None)
    if shape is not None and len(shape.dims) != 3:
        return False
    index = np.array([-1], np.int64)
    name = f"{hidden.name}/last_position"
    const = ir.Value(
        f"{name}/index",
        ir.TensorType(from_numpy(index.dtype), index.shape),
        ir.Tensor(index, name=f"{name}/index"),
    )
    model.graph.add_initializer(const)
    gather = ir.Node("Gather", [hidden, const], [ir.Value(name)], {"axis": 1}, name=name)
    model.graph.insert_before(head, gather)
    head.set_input(0, gather.outputs[0])
    out = next(v for v in model.graph.outputs if v.name == logits)
    dims = getattr(getattr(out.type, "shape", None), "dims", None)
    if dims is not None and len(dims) == 3:  # (the sequence axis of the declared output)
        out.type = ir.TensorType(out.type.elem_type, (dims[0], 1, dims[2]))
    return True
