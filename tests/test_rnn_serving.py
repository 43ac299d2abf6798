"""Serving paths of the recurrent layers: the zero initial state an exporter builds at run time
dropped by the optimizer (RnnZeroInitialState), and the LSTM bound to its node (its native
set-up kept per weights and X's shape). Both give the bits of the paths they shortcut."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.optimizer import optimize
from onyx.runtime import native
from onyx.runtime.kernels import rnn

STEPS, IN, H = 5, 8, 32  # (H a multiple of 16: rnn.c's sizes)


def _gate_weights(rng, dirs=1, gates=4, n_in=IN, w_scale=0.3) -> dict:
    """W, R and B of a layer of ``gates`` gates (LSTM 4, GRU 3) drawn from ``rng``."""
    return {
        "W": (rng.standard_normal((dirs, gates * H, n_in)) * w_scale).astype(np.float32),
        "R": (rng.standard_normal((dirs, gates * H, H)) * 0.3).astype(np.float32),
        "B": (rng.standard_normal((dirs, 2 * gates * H)) * 0.1).astype(np.float32),
    }


def _weights(seed=0):
    return _gate_weights(np.random.default_rng(seed))


def _frozen(w: dict) -> dict:
    """Read-only copies of ``w`` (constant weights: the bound LSTM keeps its set-up for them)."""
    frozen = {k: v.copy() for k, v in w.items()}
    for v in frozen.values():
        v.flags.writeable = False
    return frozen


def _layout_1_attrs(direction: str = "forward") -> dict:
    return dict(hidden_size=H, activations=None, activation_alpha=None, activation_beta=None,
                clip=None, direction=direction, input_forget=0, layout=1, output_sequence=0)  # fmt: skip


def _torch_style_lstm(fill: float = 0.0, direction: str = "forward") -> bytes:
    """x [N, steps, in] -> Transpose -> LSTM, its initial states zeros of [1, N, H] built as
    PyTorch exports them (Shape -> Gather -> Unsqueeze -> Concat -> ConstantOfShape)."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    fill_value = numpy_helper.from_array(np.array([fill], np.float32), "fill")
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["one", "n1", "hidden"], ["state_shape"], axis=0),
        helper.make_node("ConstantOfShape", ["state_shape"], ["h0"], value=fill_value),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
        helper.make_node(
            "LSTM",
            ["xt", "W", "R", "B", "", "h0", "h0"],
            ["y", "y_h", "y_c"],
            hidden_size=H,
            direction=direction,
        ),  # fmt: skip
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in _weights().items()]
    inits += [i64("zero", 0), i64("axes", [0]), i64("one", [1]), i64("hidden", [H])]
    graph = helper.make_graph(
        nodes,
        "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", STEPS, IN])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "y_h", "y_c")],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _ops(model_bytes: bytes) -> list[str]:
    return [n.op_type for n in optimize(onyx.loads(model_bytes)).graph]


def _same(a, b):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_zero_initial_state_dropped_same_bits(direction):
    model = _torch_style_lstm(direction=direction)
    assert "ConstantOfShape" not in _ops(model)
    fast = onyx.InferenceSession(model)
    kept = onyx.InferenceSession(model, disabled_optimizers=["RnnZeroInitialState"])
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for batch in (1, 2, 1, 3):  # (a batch seen again: the bound LSTM's kept set-up)
        x = np.random.default_rng(batch).standard_normal((batch, STEPS, IN)).astype(np.float32)
        got = fast.run(None, {"x": x})
        _same(got, kept.run(None, {"x": x}))
        for g, want in zip(got, oracle.run(None, {"x": x})):
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fill", [1.0, -0.0])
def test_other_initial_states_stay(fill):
    model = _torch_style_lstm(fill)
    assert "ConstantOfShape" in _ops(model)
    x = np.random.default_rng(0).standard_normal((2, STEPS, IN)).astype(np.float32)
    got = onyx.InferenceSession(model).run(None, {"x": x})
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_bound_lstm_matches_the_kernel(monkeypatch):
    """The session's LSTM (constant weights: the bound path) against the kernel called on
    writeable copies (its own path, set up per call), to the bit; and it takes the kept
    set-up where rnn.c runs."""
    calls = []
    if native.recurrence_ok(H, STEPS, 1):
        run = native.LstmRecurrence.__call__
        monkeypatch.setattr(native.LstmRecurrence, "__call__",
                            lambda self, *a: calls.append(1) or run(self, *a))  # fmt: skip
    model = _torch_style_lstm()
    sess = onyx.InferenceSession(model)
    w = _weights()
    for batch in (1, 2):  # (small products: rnn.c projects X itself, both batches)
        x = np.random.default_rng(batch).standard_normal((batch, STEPS, IN)).astype(np.float32)
        got = sess.run(None, {"x": x})
        want = rnn.lstm(x.transpose(1, 0, 2), w["W"], w["R"], w["B"], hidden_size=H)
        _same(got, want)
    assert len(calls) == (2 if native.recurrence_ok(H, STEPS, 1) else 0)


def test_bound_lstm_takes_given_initial_states():
    """Initial states fed to the session (a streaming VAD's h and c) run the kept set-up with
    the states as given, the kernel's bits; states of another shape fail as the kernel does."""
    w = _weights(1)
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "", "h", "c"], ["y", "y_h", "y_c"],
                            hidden_size=H)  # fmt: skip
    state = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node],
        "lstm",
        [state("x", TensorProto.FLOAT, [STEPS, 1, IN])]
        + [state(n, TensorProto.FLOAT, None) for n in ("h", "c")],
        [state(n, TensorProto.FLOAT, None) for n in ("y", "y_h", "y_c")],
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = onyx.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(2)
    x = rng.standard_normal((STEPS, 1, IN)).astype(np.float32)
    h, c = (rng.standard_normal((1, 1, H)).astype(np.float32) for _ in range(2))
    for _ in range(2):  # (the first call sets up, the second reuses)
        got = sess.run(None, {"x": x, "h": h, "c": c})
        _same(got, rnn.lstm(x, w["W"], w["R"], w["B"], None, h, c, hidden_size=H))
        h, c = got[1], got[2]  # (streaming: the states carried over)
    with pytest.raises(Exception):  # noqa: B017  (the kernel's own error, whatever it is)
        sess.run(None, {"x": x, "h": h[:, :, :16], "c": c})


@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("steps, batch", [(1, 1), (3, 2), (8, 1)])
def test_bound_lstm_one_call_outputs(direction, steps, batch):
    """The kept set-up's one native call (rnn.c projects X, its outputs in one buffer, Y_h and
    Y_c copied from the last step): the kernel's bits on calls that alternate states given and
    not, and shapes (its latest-call check), and onnxruntime's values; the outputs are
    independent arrays."""
    w = _weights(3)
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "", "h", "c"], ["y", "y_h", "y_c"],
                            hidden_size=H, direction=direction)  # fmt: skip
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node],
        "lstm",
        [info("x", TensorProto.FLOAT, [None, None, IN])]
        + [info(n, TensorProto.FLOAT, [1, None, H]) for n in ("h", "c")],
        [info(n, TensorProto.FLOAT, None) for n in ("y", "y_h", "y_c")],
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model = model.SerializeToString()
    sess = onyx.InferenceSession(model)
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(steps * 10 + batch)
    for shape in [(steps, batch), (steps + 1, batch), (steps, batch)]:
        x = rng.standard_normal((*shape, IN)).astype(np.float32)
        states = [rng.standard_normal((1, shape[1], H)).astype(np.float32) for _ in range(2)]
        for h, c in [states, [np.zeros_like(states[0])] * 2]:
            feeds = {"x": x, "h": h, "c": c}
            got = sess.run(None, feeds)
            _same(got, rnn.lstm(x, w["W"], w["R"], w["B"], None, h, c, hidden_size=H,
                                direction=direction))  # fmt: skip
            for g, want in zip(got, oracle.run(None, feeds)):
                np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)
            got[0][...] = 7.0  # (Y_h and Y_c are no views of Y)
            assert not (got[1] == 7.0).any() and not (got[2] == 7.0).any()


def _batch_first_lstm(direction: str = "forward", read_y: bool = False) -> bytes:
    """x [N, steps, in] -> Transpose -> LSTM -> Squeeze(Y_h, [0]) (and Y, when read_y)."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
        helper.make_node(
            "LSTM", ["xt", "W", "R", "B"], ["y", "y_h", "y_c"], hidden_size=H, direction=direction
        ),  # fmt: skip
        helper.make_node("Squeeze", ["y_h", "zero_axis"], ["last"]),
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in _weights(4).items()]
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "zero_axis"))
    outs = ["last"] + (["y"] if read_y else [])
    graph = helper.make_graph(
        nodes,
        "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", STEPS, IN])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_batch_first_input_same_bits(direction):
    """RnnBatchFirstInput: the session's LSTM reads x with layout 1 (no Transpose step) and
    gives the bits of the unfused graph, at batch 1 (rnn.c's kept set-up) and 3."""
    model = _batch_first_lstm(direction)
    fast = onyx.InferenceSession(model)
    plain = onyx.InferenceSession(model, disabled_optimizers=["RnnBatchFirstInput"])
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert [s.node.op_type for s in fast.plan.default_schedule] == ["LSTM", "Squeeze"]
    assert "Transpose" in [s.node.op_type for s in plain.plan.default_schedule]
    for batch in (1, 3, 1):
        x = np.random.default_rng(batch).standard_normal((batch, STEPS, IN)).astype(np.float32)
        got = fast.run(None, {"x": x})
        assert got[0].shape == (batch, H)
        _same(got, plain.run(None, {"x": x}))
        np.testing.assert_allclose(got[0], oracle.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_batch_first_input_only_where_safe():
    """Not where Y is read (its layout would change), and not in a model to be written
    (onnxruntime refuses layout 1)."""
    fast = onyx.InferenceSession(_batch_first_lstm(read_y=True))
    assert "Transpose" in [s.node.op_type for s in fast.plan.default_schedule]
    assert "Transpose" in _ops(_batch_first_lstm())


def test_bound_lstm_layout_1_matches_the_kernel():
    """The bound LSTM of layout 1 (time-major views of the batch-first inputs) against the
    kernel's own layout-1 path, states given, to the bit."""
    w = _weights(5)
    attrs = _layout_1_attrs()
    frozen = _frozen(w)
    call = rnn.lstm.prepare(attrs)
    rng = np.random.default_rng(6)
    for batch in (1, 2):
        x = rng.standard_normal((batch, STEPS, IN)).astype(np.float32)
        h, c = (rng.standard_normal((batch, 1, H)).astype(np.float32) for _ in range(2))
        for states in ((None, None), (h, c)):
            got = call(x, frozen["W"], frozen["R"], frozen["B"], None, *states)
            want = rnn.lstm(x, w["W"], w["R"], w["B"], None, *states, **attrs)
            _same(got, want)
            assert all(g.flags.c_contiguous for g in got)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_bound_lstm_layout_1_at_batch_1_runs_on_its_bytes(direction, monkeypatch):
    """Layout 1 at batch 1, a call the kept recurrence serves (LstmRecurrence.batch_first:
    no swaps or copies): the kernel's bits, for strided x and states too, C-contiguous
    outputs of layout 1's shapes; other states (float64, another batch) take the full path."""
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(8)
    w = _gate_weights(rng, dirs)
    frozen = _frozen(w)
    attrs = _layout_1_attrs(direction)
    calls = []
    real = native.LstmRecurrence.batch_first
    monkeypatch.setattr(
        native.LstmRecurrence, "batch_first", lambda *a: calls.append(1) or real(*a)
    )
    call = rnn.lstm.prepare(attrs)
    x = rng.standard_normal((1, STEPS, 2 * IN)).astype(np.float32)[:, :, ::2]  # (strided)
    h, c = (rng.standard_normal((1, H, dirs)).astype(np.float32).swapaxes(1, 2) for _ in "hc")
    for states in ((None, None), (None, None), (h, c), (h, None), (h.astype(np.float64), c)):
        got = call(x, frozen["W"], frozen["R"], frozen["B"], None, *states)
        want = rnn.lstm(x, w["W"], w["R"], w["B"], None, *states, **attrs)
        _same(got, want)
        assert [g.shape for g in got] == [(1, STEPS, dirs, H), (1, dirs, H), (1, dirs, H)]
        assert all(g.flags.c_contiguous for g in got)
    # (the first call sets up; the float64 state takes the kernel; no native LSTM: none)
    assert len(calls) == (3 if native.recurrence_ok(H, STEPS, 1) else 0)


def test_bound_lstm_layout_1_at_batch_1_large_strided_x(monkeypatch):
    """A strided x past the bytes batch_first copies outright (64 KiB): its C-ordered copy
    stays alive through the native call (a bare address of a temporary copy read freed
    memory), the kernel's bits with initial states, call after call."""
    steps, n_in = 8, 2304  # (at most 8 steps: rnn.c projects x itself)
    rng = np.random.default_rng(9)
    w = _gate_weights(rng, n_in=n_in, w_scale=0.05)
    frozen = _frozen(w)
    attrs = _layout_1_attrs()
    calls = []
    real = native.LstmRecurrence.batch_first
    monkeypatch.setattr(
        native.LstmRecurrence, "batch_first", lambda *a: calls.append(1) or real(*a)
    )
    call = rnn.lstm.prepare(attrs)
    x = rng.standard_normal((1, steps, 2 * n_in)).astype(np.float32)[:, :, ::2]
    assert x.nbytes > 1 << 16 and not x.flags.c_contiguous
    h, c = (rng.standard_normal((1, 1, H)).astype(np.float32) for _ in "hc")
    want = rnn.lstm(x, w["W"], w["R"], w["B"], None, h, c, **attrs)
    for _ in range(4):
        _same(call(x, frozen["W"], frozen["R"], frozen["B"], None, h, c), want)
    assert len(calls) == (3 if native.recurrence_ok(H, steps, 1) else 0)


@pytest.mark.parametrize("steps, batch", [(1, 1), (12, 1), (6, 3)])
def test_bound_bidirectional_lstm(steps, batch):
    """A bidirectional LSTM takes the kept set-up too (rnn.c projects both directions' inputs
    when the product is small): the kernel's bits on writeable copies, onnxruntime's values."""
    rng = np.random.default_rng(7)
    w = {
        "W": (rng.standard_normal((2, 4 * H, IN)) * 0.3).astype(np.float32),
        "R": (rng.standard_normal((2, 4 * H, H)) * 0.3).astype(np.float32),
        "B": (rng.standard_normal((2, 8 * H)) * 0.1).astype(np.float32),
    }
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "", "h", "c"], ["y", "y_h", "y_c"],
                            hidden_size=H, direction="bidirectional")  # fmt: skip
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node], "lstm",
        [info("x", TensorProto.FLOAT, [steps, batch, IN])]
        + [info(n, TensorProto.FLOAT, [2, batch, H]) for n in ("h", "c")],
        [info(n, TensorProto.FLOAT, None) for n in ("y", "y_h", "y_c")],
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model = model.SerializeToString()
    sess = onyx.InferenceSession(model)
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for seed in (1, 2):
        r = np.random.default_rng(seed)
        feeds = {"x": r.standard_normal((steps, batch, IN)).astype(np.float32)}
        feeds |= {n: r.standard_normal((2, batch, H)).astype(np.float32) for n in ("h", "c")}
        got = sess.run(None, feeds)
        want = rnn.lstm(feeds["x"], w["W"], w["R"], w["B"], None, feeds["h"], feeds["c"],
                        hidden_size=H, direction="bidirectional")  # fmt: skip
        _same(got, want)
        for g, o in zip(got, oracle.run(None, feeds)):
            np.testing.assert_allclose(g, o, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("steps, batch", [(1, 1), (12, 1), (5, 3)])
def test_bound_gru(direction, steps, batch, monkeypatch):
    """PyTorch's GRU (linear_before_reset) of constant weights runs its kept set-up (one
    native call, rnn.c projecting X): the kernel's bits on writeable copies, onnxruntime's
    values, with and without an initial state."""
    calls = []
    if native.recurrence_ok(H, steps, batch):
        run = native.GruRecurrence.__call__
        monkeypatch.setattr(native.GruRecurrence, "__call__",
                            lambda self, *a: calls.append(1) or run(self, *a))  # fmt: skip
    dirs = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(8)
    w = _gate_weights(rng, dirs, gates=3)
    node = helper.make_node("GRU", ["x", "W", "R", "B", "", "h"], ["y", "y_h"], hidden_size=H,
                            direction=direction, linear_before_reset=1)  # fmt: skip
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node], "gru",
        [info("x", TensorProto.FLOAT, [steps, batch, IN]),
         info("h", TensorProto.FLOAT, [dirs, batch, H])],
        [info(n, TensorProto.FLOAT, None) for n in ("y", "y_h")],
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model = model.SerializeToString()
    sess = onyx.InferenceSession(model)
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    r = np.random.default_rng(9)
    x = r.standard_normal((steps, batch, IN)).astype(np.float32)
    for h in (
        r.standard_normal((dirs, batch, H)).astype(np.float32),
        np.zeros((dirs, batch, H), np.float32),
    ):
        got = sess.run(None, {"x": x, "h": h})
        want = rnn.gru(x, w["W"], w["R"], w["B"], None, h, hidden_size=H, direction=direction,
                       linear_before_reset=1)  # fmt: skip
        _same(got, want)
        for g, o in zip(got, oracle.run(None, {"x": x, "h": h})):
            np.testing.assert_allclose(g, o, rtol=1e-5, atol=1e-5)
    assert len(calls) == (2 if native.recurrence_ok(H, steps, batch) else 0)


@pytest.mark.parametrize("name", ["gru_torchscript_op17", "lstm_dynamo_op18"])
def test_stacked_zero_states_dropped(name):
    """A two-layer export's zero states, one Slice a layer of ConstantOfShape's zeros
    (TorchScript) or of Expand(0.0) (dynamo), are dropped too: the same bits, no state
    steps."""
    from pathlib import Path

    path = Path(__file__).parent / "models" / f"{name}.onnx"
    fast = onyx.InferenceSession(str(path))
    plain = onyx.InferenceSession(str(path), disabled_optimizers=["RnnZeroInitialState"])
    ops = [s.node.op_type for s in fast.plan.default_schedule]
    assert not {"ConstantOfShape", "Expand", "Slice", "Shape"} & set(ops)
    for batch in (1, 3):
        x = np.random.default_rng(batch).uniform(-1, 1, (batch, 12, 16)).astype(np.float32)
        _same(fast.run(None, {"x": x}), plain.run(None, {"x": x}))
