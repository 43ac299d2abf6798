"""RnnLastStepFromState: Y's last step, as PyTorch's ``output[:, -1]`` exports it (Squeeze ->
Transpose -> Gather), is the recurrent node's Y_h; the rewritten graph gives the same bits."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx

STEPS, BATCH, INPUT, HIDDEN = 5, 2, 8, 16
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _model(op: str, transpose: bool = True, index: int = -1, direction: str = "forward"):
    rng = np.random.default_rng(0)
    g = GATES[op]
    dirs = 2 if direction == "bidirectional" else 1
    inits = [
        numpy_helper.from_array(rng.standard_normal((dirs, g * HIDDEN, INPUT)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((dirs, g * HIDDEN, HIDDEN)).astype(np.float32), "R"),
        numpy_helper.from_array(rng.standard_normal((dirs, 2 * g * HIDDEN)).astype(np.float32), "B"),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
        numpy_helper.from_array(np.array(index, np.int64), "last"),
    ]  # fmt: skip
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    nodes = [
        helper.make_node(op, ["X", "W", "R", "B"], outs, hidden_size=HIDDEN, direction=direction),
        helper.make_node("Squeeze", ["Y", "axes"], ["S"]),
    ]
    if transpose:
        nodes.append(helper.make_node("Transpose", ["S"], ["T"], perm=[1, 0, 2]))
    nodes.append(helper.make_node("Gather", ["T" if transpose else "S", "last"], ["out"],
                                  axis=1 if transpose else 0))  # fmt: skip
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [STEPS, BATCH, INPUT])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _runs(model: bytes):
    x = np.random.default_rng(1).standard_normal((STEPS, BATCH, INPUT)).astype(np.float32)
    fast = onyx.InferenceSession(model)
    plain = onyx.InferenceSession(model, disabled_optimizers=["RnnLastStepFromState"])
    return fast, fast.run(None, {"X": x}), plain.run(None, {"X": x})


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("transpose, index", [(True, -1), (False, STEPS - 1)])
def test_the_last_step_is_the_state(op, transpose, index):
    fast, got, want = _runs(_model(op, transpose, index))
    ops = [s.node.op_type for s in fast.plan.default_schedule]
    assert "Gather" not in ops and "Transpose" not in ops
    assert got[0].shape == (BATCH, HIDDEN)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("index, direction", [(0, "forward"), (-1, "reverse")])
def test_another_step_or_direction_keeps_the_gather(index, direction):
    """The first step of a forward pass, the last of a reverse one: not Y_h."""
    fast, got, want = _runs(_model("LSTM", True, index, direction))
    assert "Gather" in [s.node.op_type for s in fast.plan.default_schedule]
    np.testing.assert_array_equal(got[0], want[0])
