"""Recurrent nodes: an initial state that is zeros of the state's own shape is dropped (the
spec's default state is zeros): exporters build it at run time (PyTorch: Shape -> Gather ->
Unsqueeze -> Concat -> ConstantOfShape), five nodes per run for the value the kernel makes
anyway."""

from __future__ import annotations

import numpy as np

from .. import ir
from .core import EXTENDED, STANDARD, PassContext, graph_pass, producer, same_dims, static_shape

#: op -> the input positions of its initial states (initial_h, and LSTM's initial_c)
STATE_INPUTS = {"RNN": (5,), "GRU": (5,), "LSTM": (5, 6)}


def _state_shape(node: ir.Node) -> tuple | None:
    """(num_directions, batch, hidden_size) as inferred from X and the attributes."""
    x = static_shape(node.inputs[0])
    hidden = node.attributes.get("hidden_size")
    if x is None or len(x) != 3 or hidden is None:
        return None
    direction = node.attributes.get("direction")
    directions = 2 if direction is not None and direction.value == "bidirectional" else 1
    layout = node.attributes.get("layout")
    batch = x[0] if layout is not None and layout.value == 1 else x[1]
    if layout is not None and layout.value == 1:  # states are [batch, directions, hidden]
        return (batch, directions, hidden.value)
    return (directions, batch, hidden.value)


def _zeros_of(v: ir.Value | None, x: ir.Value) -> bool:
    """v is ConstantOfShape's +0.0 in X's element type."""
    fill = producer(v, "ConstantOfShape")
    if fill is None or fill.domain not in STANDARD:
        return False
    value = fill.attributes.get("value")
    if value is None:  # float32 zeros
        return x.type.elem_type == ir.DataType.FLOAT
    if not isinstance(value.value, ir.Tensor) or value.value.numpy().size != 1:
        return False
    fill_value = value.value.numpy().reshape(-1)[0]  # (+0.0 only: -0.0 could reach a zero)
    zero = fill_value == 0 and not np.signbit(fill_value)
    return zero and v.type.elem_type == x.type.elem_type


@graph_pass("RnnZeroInitialState", EXTENDED)
def rnn_zero_initial_state(ctx: PassContext) -> bool:
    changed = False
    for node in ctx.graph:
        if node.op_type not in STATE_INPUTS or node.domain not in STANDARD or not node.inputs:
            continue
        x = node.inputs[0]
        if x is None or not isinstance(x.type, ir.TensorType):
            continue
        want = _state_shape(node)
        for i in STATE_INPUTS[node.op_type]:
            state = node.inputs[i] if i < len(node.inputs) else None
            if state is None or not isinstance(state.type, ir.TensorType):
                continue
            if same_dims(static_shape(state), want) and _zeros_of(state, x):
                node.set_input(i, None)
                ctx.count("RnnZeroInitialState")
                changed = True
    return changed
