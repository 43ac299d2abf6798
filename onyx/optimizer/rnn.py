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


#: the ops whose output Y [steps, directions, batch, hidden] and Y_h pass RnnLastStepFromState reads
LAST_STEP_OPS = ("RNN", "GRU", "LSTM")


@graph_pass("RnnLastStepFromState", EXTENDED)
def rnn_last_step_from_state(ctx: PassContext) -> bool:
    """Y's last step taken as Gather(Transpose(Squeeze(Y, [1]), [1, 0, 2]), -1, axis=1)
    (PyTorch's ``output[:, -1]`` of a forward one-layer RNN, batch first), or without the
    Transpose on axis 0, is Y_h: the kernel's Y_h is a copy of that step (a forward pass with
    no sequence lengths). Squeeze(Y_h, [0]) takes the three steps' place."""
    changed = False
    for gather in list(ctx.graph):
        found = _last_step_of(ctx, gather)
        if found is None:
            continue
        rnn, state = found
        axes = np.array([0], np.int64)
        if ctx.opset() >= 13:
            squeeze = ir.Node("Squeeze", [state, ctx.add_const(axes, "last_step_axes")], 1)
        else:
            squeeze = ir.Node("Squeeze", [state], 1, {"axes": [0]})
        squeeze.name = ctx.fresh_name("last_step_Squeeze")
        squeeze.outputs[0].name = ctx.fresh_name("last_step")
        ctx.graph.insert_before(gather, squeeze)
        if ctx.replace_value(gather.outputs[0], squeeze.outputs[0]):
            ctx.graph.remove(gather, safe=False)
            ctx.count("RnnLastStepFromState")
            changed = True
        else:
            ctx.graph.remove(squeeze, safe=False)
    return changed


def _last_step_of(ctx: PassContext, gather: ir.Node) -> tuple | None:
    """(the recurrent node, its Y_h) when ``gather`` picks Y's last step, else None."""
    if gather.op_type != "Gather" or gather.domain not in STANDARD or len(gather.inputs) != 2:
        return None
    index = ctx.const(gather.inputs[1])
    if index is None or index.ndim != 0 or index.dtype.kind != "i":
        return None
    data, time_axis = gather.inputs[0], 0
    transpose = producer(data, "Transpose")
    if transpose is not None:
        if list(transpose.attr("perm") or []) != [1, 0, 2]:
            return None
        data, time_axis = transpose.inputs[0], 1
    squeeze = producer(data, "Squeeze")
    if squeeze is None or gather.attr("axis", 0) != time_axis or not squeeze.inputs:
        return None
    axes = ctx.const(squeeze.inputs[1]) if len(squeeze.inputs) > 1 else squeeze.attr("axes")
    if axes is None or np.asarray(axes).reshape(-1).tolist() != [1]:
        return None
    rnn = squeeze.inputs[0].producer if squeeze.inputs[0] is not None else None
    if rnn is None or rnn.op_type not in LAST_STEP_OPS or rnn.domain not in STANDARD:
        return None
    if squeeze.inputs[0] is not rnn.outputs[0] or len(rnn.outputs) < 2 or not rnn.outputs[1].name:
        return None
    forward = rnn.attr("direction", "forward") in ("forward", b"forward")
    lengths = rnn.inputs[4] if len(rnn.inputs) > 4 else None
    if not forward or rnn.attr("layout", 0) != 0 or lengths is not None:
        return None
    steps = (static_shape(rnn.inputs[0]) or (None,))[0]
    if not isinstance(steps, int) or steps < 1 or int(index) not in (-1, steps - 1):
        return None
    return rnn, rnn.outputs[1]
