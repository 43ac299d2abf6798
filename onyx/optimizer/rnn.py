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
_STATE_OPS = frozenset(STATE_INPUTS)


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


def _zeros_of(v: ir.Value | None, x: ir.Value, ctx: PassContext | None = None) -> bool:
    """v is ConstantOfShape's +0.0 in X's element type, or a Slice of such zeros (a stacked
    layers' state, one Slice a layer), or Expand of a +0.0 constant (the dynamo exporter's)."""
    while True:  # (a Slice of zeros is zeros: the caller checks the state's shape)
        sliced = producer(v, "Slice")
        if sliced is None or sliced.domain not in STANDARD or not sliced.inputs:
            break
        v = sliced.inputs[0]
    expand = producer(v, "Expand")
    if expand is not None and ctx is not None and expand.domain in STANDARD:
        c = ctx.const(expand.inputs[0])
        if c is None or c.size != 1 or v.type is None or x.type is None:
            return False
        zero = c.reshape(-1)[0] == 0 and not np.signbit(c.reshape(-1)[0])
        return bool(zero) and ir.DataType(v.type.elem_type) == x.type.elem_type
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
    for node in ctx.nodes_of(_STATE_OPS):
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
            if same_dims(static_shape(state), want) and _zeros_of(state, x, ctx):
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
    for gather in ctx.nodes_of("Gather"):
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


@graph_pass("RnnBatchFirstInput", EXTENDED)
def rnn_batch_first_input(ctx: PassContext) -> bool:
    """A session's LSTM reading Transpose(x, [1, 0, 2]) (PyTorch's batch_first input) reads x
    with layout 1, when only its Y_h is read, by Squeeze(Y_h, [0]) (one direction), which
    becomes Squeeze(Y_h, [1]): the kernel takes the batch-first views (kernels/rnn.py), one
    step fewer. Only for a session's model: onnxruntime refuses layout 1."""
    changed = False
    if not ctx.for_session or ctx.opset() < 14:  # (layout: opset 14)
        return False
    for node in ctx.nodes_of("LSTM"):
        found = _batch_first_parts(ctx, node)
        if found is None:
            continue
        transpose, squeezes = found
        x = transpose.inputs[0]
        node.set_input(0, x)
        node.attributes["layout"] = ir.Attr("layout", ir.AttrType.INT, 1)
        axes = ctx.add_const(np.array([1], np.int64), "batch_first_axes")
        for squeeze in squeezes:
            squeeze.set_input(1, axes)
        state = node.outputs[1]
        shape = state.type.shape if isinstance(state.type, ir.TensorType) else None
        if shape is not None and len(shape.dims) == 3:  # [dirs, batch, H] -> [batch, dirs, H]
            dims = shape.dims
            swapped = ir.Shape((dims[1], dims[0], dims[2]))
            state.type = ir.TensorType(state.type.elem_type, swapped)
        elif shape is not None:
            state.type = ir.TensorType(state.type.elem_type)
        if not transpose.outputs[0].has_uses() and not ctx.is_output(transpose.outputs[0]):
            ctx.graph.remove(transpose, safe=False)
        ctx.count("RnnBatchFirstInput")
        changed = True
    return changed


def _batch_first_parts(ctx: PassContext, node: ir.Node) -> tuple | None:
    """(the Transpose, Y_h's Squeezes) where ``node`` may read x batch first, else None."""
    if node.op_type != "LSTM" or node.domain not in STANDARD or node.attr("layout", 0) != 0:
        return None
    if node.attr("direction", "forward") not in ("forward", "reverse", b"forward", b"reverse"):
        return None
    transpose = producer(node.inputs[0] if node.inputs else None, "Transpose")
    if transpose is None or list(transpose.attr("perm") or []) != [1, 0, 2]:
        return None
    if any(node.inputs[i] is not None for i in range(5, len(node.inputs))):
        return None  # (initial states and peepholes would need their own transposes)
    outputs = list(node.outputs)
    if len(outputs) < 2 or not outputs[1].name or ctx.is_output(outputs[1]):
        return None
    for k, v in enumerate(outputs):  # only Y_h is read
        if k != 1 and v.name and (v.has_uses() or ctx.is_output(v)):
            return None
    squeezes = [use for use, _ in outputs[1].iter_uses()]
    for squeeze in squeezes:
        if squeeze.op_type != "Squeeze" or squeeze.domain not in STANDARD:
            return None
        if len(squeeze.inputs) != 2 or squeeze.inputs[0] is not outputs[1]:
            return None
        axes = ctx.const(squeeze.inputs[1])
        if axes is None or axes.reshape(-1).tolist() not in ([0], [-3]):
            return None
    if not squeezes or len({id(s) for s in squeezes}) != len(squeezes):
        return None
    return transpose, squeezes
