"""RNN, GRU and LSTM against onnxruntime on a grid of attributes and inputs.

The node suite has 18 recurrent cases; these cover the combinations it leaves out (directions
with sequence_lens, clip, custom activations with alpha/beta per direction, linear_before_reset,
input_forget, peepholes, initial states), and layout=1 against its layout-0 twin.
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onyx

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
ACTIVATIONS = {
    "RNN": (["Tanh"], ["LeakyRelu"], ["Softsign"]),
    "GRU": (["Sigmoid", "Tanh"], ["HardSigmoid", "Softsign"]),
    "LSTM": (["Sigmoid", "Tanh", "Tanh"], ["HardSigmoid", "Tanh", "Softsign"]),
}
VARIANTS = {
    "RNN": ({},),
    "GRU": ({"linear_before_reset": 0}, {"linear_before_reset": 1}),
    "LSTM": ({"input_forget": 0}, {"input_forget": 1}),
}
S, B, I, H = 5, 3, 4, 6


def make_inputs(op: str, directions: int, lens: bool, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    g = GATES[op]
    feeds = {
        "X": rng.standard_normal((S, B, I)).astype(np.float32),
        "W": (rng.standard_normal((directions, g * H, I)) * 0.5).astype(np.float32),
        "R": (rng.standard_normal((directions, g * H, H)) * 0.5).astype(np.float32),
        "B": rng.standard_normal((directions, 2 * g * H)).astype(np.float32),
        "L": np.array([S, 2, 4], np.int32) if lens else None,
        "h0": rng.standard_normal((directions, B, H)).astype(np.float32),
    }
    if op == "LSTM":
        feeds["c0"] = rng.standard_normal((directions, B, H)).astype(np.float32)
        feeds["P"] = rng.standard_normal((directions, 3 * H)).astype(np.float32)
    return feeds


def make_model(op: str, feeds: dict, attrs: dict) -> bytes:
    names = ["X", "W", "R", "B", "L", "h0"] + (["c0", "P"] if op == "LSTM" else [])
    ins = [n if feeds.get(n) is not None else "" for n in names]
    outs = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    node = helper.make_node(op, ins, outs, hidden_size=H, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in feeds.items()
            if v is not None
        ],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    model.ir_version = 8
    return model.SerializeToString()


def grid():
    for op in GATES:
        for direction, lens, clip, acts, variant in itertools.product(
            ("forward", "reverse", "bidirectional"),
            (False, True),
            (None, 0.7),
            range(len(ACTIVATIONS[op])),
            VARIANTS[op],
        ):
            yield op, direction, lens, clip, acts, variant


def case_id(p) -> str:
    op, direction, lens, clip, acts, variant = p
    extra = "-".join(f"{k}{v}" for k, v in variant.items())
    return f"{op}-{direction}-lens{int(lens)}-clip{clip}-acts{acts}-{extra}".rstrip("-")


@pytest.mark.parametrize("params", list(grid()), ids=case_id)
def test_matches_onnxruntime(params):
    op, direction, lens, clip, acts, variant = params
    directions = 2 if direction == "bidirectional" else 1
    feeds = make_inputs(op, directions, lens, seed=zlib.crc32(case_id(params).encode()))
    attrs = {"direction": direction, **variant}
    if clip is not None:
        attrs["clip"] = clip
    if acts:
        names = ACTIVATIONS[op][acts]
        # a different activation list per direction where there are two
        attrs["activations"] = names * directions if directions == 1 else names + names[::-1]
        attrs["activation_alpha"] = [0.3, 0.6, 0.9] * 2
        attrs["activation_beta"] = [0.2, 0.4, 0.1] * 2
    model = make_model(op, feeds, attrs)
    run_feeds = {k: v for k, v in feeds.items() if v is not None}
    expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, run_feeds)
    actual = onyx.InferenceSession(model).run(None, run_feeds)
    for name, e, a in zip(("Y", "Y_h", "Y_c"), expected, actual):
        assert a.shape == e.shape and a.dtype == e.dtype, name
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("op", list(GATES))
def test_layout_1_is_the_transposed_layout_0(op):
    # onnxruntime rejects layout=1: compare with onyx's own layout-0 run on transposed tensors
    feeds = make_inputs(op, 2, True, seed=7)
    run0 = {k: v for k, v in feeds.items() if v is not None}
    run1 = {k: (v.swapaxes(0, 1).copy() if k in ("X", "h0", "c0") else v) for k, v in run0.items()}
    attrs = {"direction": "bidirectional"}
    y0 = onyx.InferenceSession(make_model(op, feeds, attrs)).run(None, run0)
    y1 = onyx.InferenceSession(make_model(op, run1, {**attrs, "layout": 1})).run(None, run1)
    # layout 1: Y is [batch, seq, dirs, hidden], states [batch, dirs, hidden]
    np.testing.assert_array_equal(y1[0], y0[0].transpose(2, 0, 1, 3))
    for a, b in zip(y1[1:], y0[1:]):
        np.testing.assert_array_equal(a, b.swapaxes(0, 1))


_LSTM_CASES = [  # steps, batch, inputs, hidden, direction, initial states
    (7, 1, 5, 16, "forward", False),  # steps x batch <= 8: the projection is a GEMV
    (3, 2, 6, 32, "bidirectional", True),  # (its rows for both directions' gates)
    (6, 3, 8, 32, "reverse", True),
    (5, 9, 4, 48, "bidirectional", True),  # batch past a multiple of 4
]


@pytest.mark.parametrize("case", _LSTM_CASES)
def test_native_lstm_matches_the_numpy_recurrence(case, monkeypatch):
    """The common LSTM's native recurrence (rnn.c) against the numpy loop it replaces (and so,
    transitively, onnxruntime): H, Y_h and Y_c within float32 rounding."""
    from onyx.runtime import native
    from onyx.runtime.kernels.rnn import lstm

    if not native.recurrence_ok(16, 1, 1):
        pytest.skip("no native LSTM (AVX-512)")
    T, B, I, H, direction, states = case
    D = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(T * B)
    X = rng.standard_normal((T, B, I)).astype(np.float32)
    W, R = (rng.standard_normal((D, 4 * H, n)).astype(np.float32) * 0.3 for n in (I, H))
    W.flags.writeable = R.flags.writeable = False
    bias = rng.standard_normal((D, 8 * H)).astype(np.float32) * 0.3
    h0, c0 = (rng.standard_normal((D, B, H)).astype(np.float32) if states else None for _ in "hc")
    X[0, 0, 0] = 40.0  # saturated gates
    calls, run = [], native.lstm_f32
    monkeypatch.setattr(native, "lstm_f32", lambda *a: calls.append(1) or run(*a))
    got = lstm(X, W, R, bias, None, h0, c0, hidden_size=H, direction=direction)
    assert calls, "the native recurrence did not run"
    monkeypatch.setattr(native, "recurrence_ok", lambda *shape: False)
    want = lstm(X, W, R, bias, None, h0, c0, hidden_size=H, direction=direction)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)


def test_native_lstm_leaves_the_other_variants_to_numpy(monkeypatch):
    """Peepholes, clipping and partial sequences keep the numpy loop (onnxruntime parity is
    tested above for them)."""
    from onyx.runtime import native
    from onyx.runtime.kernels.rnn import lstm

    calls, run = [], native.lstm_f32
    monkeypatch.setattr(native, "lstm_f32", lambda *a: calls.append(1) or run(*a))
    rng = np.random.default_rng(0)
    X = rng.standard_normal((4, 2, 3)).astype(np.float32)
    W, R = (rng.standard_normal((1, 64, n)).astype(np.float32) for n in (3, 16))
    lstm(X, W, R, P=np.ones((1, 48), np.float32), hidden_size=16)
    lstm(X, W, R, clip=0.5, hidden_size=16)
    lstm(X, W, R, sequence_lens=np.array([4, 2], np.int32), hidden_size=16)
    lstm(X, W, R, activations=["Sigmoid", "Tanh", "Relu"], hidden_size=16)
    assert calls == []


@pytest.mark.parametrize("case", _LSTM_CASES)
def test_native_gru_matches_the_numpy_recurrence(case, monkeypatch):
    """PyTorch's GRU (linear_before_reset) on the native recurrence against the numpy loop."""
    from onyx.runtime import native
    from onyx.runtime.kernels.rnn import gru

    if not native.recurrence_ok(16, 1, 1):
        pytest.skip("no native recurrences (AVX-512)")
    T, B, I, H, direction, states = case
    D = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(T + B)
    X = rng.standard_normal((T, B, I)).astype(np.float32)
    W, R = (rng.standard_normal((D, 3 * H, n)).astype(np.float32) * 0.3 for n in (I, H))
    W.flags.writeable = R.flags.writeable = False
    bias = rng.standard_normal((D, 6 * H)).astype(np.float32) * 0.3
    h0 = rng.standard_normal((D, B, H)).astype(np.float32) if states else None
    calls, run = [], native.gru_f32
    monkeypatch.setattr(native, "gru_f32", lambda *a: calls.append(1) or run(*a))
    attrs = {"hidden_size": H, "direction": direction, "linear_before_reset": 1}
    got = gru(X, W, R, bias, None, h0, **attrs)
    assert calls, "the native recurrence did not run"
    monkeypatch.setattr(native, "recurrence_ok", lambda *shape: False)
    want = gru(X, W, R, bias, None, h0, **attrs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)
    calls.clear()
    monkeypatch.undo()
    monkeypatch.setattr(native, "gru_f32", lambda *a: calls.append(1) or run(*a))
    gru(X, W, R, bias, None, h0, hidden_size=H, direction=direction)  # linear_before_reset 0
    assert calls == []


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_native_recurrences_read_layout_1(op, monkeypatch):
    """rnn.c's projections come from X's transpose: layout 1 ([batch, seq, in]) gives the same
    bits as layout 0 on the transposed tensors, both directions."""
    from onyx.runtime import native
    from onyx.runtime.kernels import rnn

    if not native.recurrence_ok(16, 1, 1):
        pytest.skip("no native recurrences (AVX-512)")
    name = op.lower() + "_f32"
    calls, run = [], getattr(native, name)
    monkeypatch.setattr(native, name, lambda *a: calls.append(1) or run(*a))
    kernel, g = getattr(rnn, op.lower()), GATES[op]
    rng = np.random.default_rng(3)
    X = rng.standard_normal((6, 5, 7)).astype(np.float32)
    W, R = (rng.standard_normal((2, g * 16, n)).astype(np.float32) * 0.3 for n in (7, 16))
    h0 = rng.standard_normal((2, 5, 16)).astype(np.float32)
    attrs = {"hidden_size": 16, "direction": "bidirectional", "linear_before_reset": 1}
    if op == "LSTM":
        del attrs["linear_before_reset"]
    y0 = kernel(X, W, R, None, None, h0, **attrs)
    y1 = kernel(X.swapaxes(0, 1), W, R, None, None, h0.swapaxes(0, 1), layout=1, **attrs)
    assert len(calls) == 2
    np.testing.assert_array_equal(y1[0], y0[0].transpose(2, 0, 1, 3))
    for a, b in zip(y1[1:], y0[1:]):
        np.testing.assert_array_equal(a, b.swapaxes(0, 1))


def test_a_session_packs_the_native_projection_once(monkeypatch):
    """The input projection's weights are packed (for the native GEMM) on the first run only
    (a repack of a 4 MB W every run had cost more than the projection itself)."""
    from onyx.runtime import native

    if not native.recurrence_ok(16, 1, 1):
        pytest.skip("no native recurrences (AVX-512)")
    packs, pack = [], native.PackedGemm
    monkeypatch.setattr(native, "PackedGemm", lambda *a: packs.append(1) or pack(*a))
    rng = np.random.default_rng(5)
    # (a projection too large for rnn.c to make itself: kernels/rnn.py's _SELF_PROJECTED_MACS)
    W, R = (rng.standard_normal((1, 64, n)).astype(np.float32) * 0.3 for n in (64, 16))
    node = helper.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=16)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [40, 2, 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.tobytes(), raw=True)
         for n, a in (("W", W), ("R", R))],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    session = onyx.InferenceSession(model.SerializeToString())
    X = rng.standard_normal((40, 2, 64)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for _ in range(3):
        np.testing.assert_allclose(session.run(None, {"X": X})[0],
                                   want.run(None, {"X": X})[0], rtol=1e-5, atol=1e-5)  # fmt: skip
    assert packs == [1]
