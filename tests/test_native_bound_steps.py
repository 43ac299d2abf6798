"""Bound steps (registry.binds, plan.BoundCall): a kernel that sets up its call once per input
signature must answer exactly as the kernel called as written, for every signature a node
meets (alternating shapes, strided and read-only inputs, values that change), with constants
told apart from fed inputs, and under concurrent runs. Runs with the native library off too
(ONYX_NATIVE=0: CI's kernel tests), where the numpy paths bind or decline."""

from __future__ import annotations

import threading
import types

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

import onyx
from onyx.runtime.plan import BoundCall
from onyx.runtime.registry import lookup

F = TensorProto.FLOAT
RNG = np.random.default_rng(7)


def _model(op, inputs, consts, attrs=None, domain="", opset=17, outputs=1, fed_const=()):
    """One node; ``inputs`` the fed names (float, any shape), ``consts`` name -> array
    (initializers; ``fed_const`` also declared as graph inputs: overridable)."""
    outs = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, list(inputs), outs, domain=domain, **(attrs or {}))
    graph_inputs = [helper.make_tensor_value_info(n, F, None) for n in inputs if n not in consts]
    graph_inputs += [helper.make_tensor_value_info(n, F, None) for n in fed_const]
    graph = helper.make_graph(
        [node],
        "g",
        graph_inputs,
        [helper.make_tensor_value_info(o, F, None) for o in outs],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    options = onyx.SessionOptions()
    options.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onyx.InferenceSession(model.SerializeToString(), options)


def _frozen(a: np.ndarray) -> np.ndarray:
    """A read-only view of a, as a session passes constants and feeds (the kernels' paths
    key on it; the layout is kept: numpy's products of strided operands differ in bits)."""
    a = a.view()
    a.flags.writeable = False
    return a


def _want(op, domain, opset, args, attrs):
    kernel = lookup(op, domain, opset)
    if kernel.takes_ctx:  # (MaxPool: a node of one output)
        args = [types.SimpleNamespace(n_outputs=1, outputs_wanted=(True,)), *args]
    out = kernel.fn(*args, **{**kernel.attr_defaults, **(attrs or {})})
    return out if isinstance(out, tuple) else (out,)


def _same(got, want):
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == w.dtype and g.shape == w.shape


def _bound(sess) -> BoundCall:
    (step,) = sess.plan.steps
    assert step.fn.__class__ is BoundCall
    return step.fn


def _strided(x: np.ndarray) -> np.ndarray:
    """x's values in a non-contiguous array (every other element of a wider one)."""
    wide = np.empty(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
    wide[..., ::2] = x
    return wide[..., ::2]


#: op, domain, fed input shapes (two signatures), constants, attributes
CASES = [
    ("Gemm", "", [(3, 32)], [(20, 32)], {"b": (32, 48), "c": (48,)}, {}),  # GEMV, packed
    ("Gemm", "", [(1, 16)], [(5, 16)], {"b": (4, 16), "c": (4,)}, {"transB": 1}),  # numpy
    ("Gemm", "", [(20, 8)], [(2, 8)], {"b": (8, 300), "c": (1, 300)}, {"beta": 0.5}),
    ("Gemm", "", [(2, 8)], [(3, 8)], {"b": (8, 200)}, {"alpha": 2.0}),
    # (a small product's bias added into a fresh array: C of every broadcasting shape)
    ("Gemm", "", [(2, 16)], [(6, 16)], {"b": (16, 4), "c": (1, 1)}, {}),
    ("Gemm", "", [(2, 16)], [(1, 16)], {"b": (4, 16), "c": (1, 4)}, {"transB": 1}),
    ("Gemm", "", [(1, 16)], [(8, 16)], {"b": (16, 8), "c": (8,)}, {}),  # 8 x 8 cells: in place
    ("MatMul", "", [(2, 17, 64)], [(1, 3, 64)], {"b": (64, 40)}, {}),
    (
        "FusedGemm",
        "com.microsoft",
        [(20, 32)],
        [(2, 32)],
        {"b": (32, 40), "c": (40,)},
        {"activation": "Relu"},
    ),
    (
        "FusedGemm",
        "com.microsoft",
        [(1, 64)],
        [(4, 64)],
        {"b": (1, 64), "c": (1,)},
        {"activation": "Sigmoid", "transB": 1},
    ),
    ("MatMulAdd", "ai.onyx", [(32, 1, 24)], [(2, 1, 24)], {"b": (24, 36), "bias": (36,)}, {}),
    ("MatMulAddRelu", "ai.onyx", [(1, 32, 24)], [(3, 24)], {"b": (24, 36), "bias": (36,)}, {}),
    ("MatMulAddRelu", "ai.onyx", [(1, 12, 64)], [(12, 64)], {"b": (64, 5), "bias": (5,)}, {}),
    ("MatMul", "", [(12, 64)], [(2, 6, 64)], {"b": (64, 5)}, {}),  # (numpy's path)
    (
        "SkipLayerNormalization",
        "com.microsoft",
        [(1, 8, 32), (1, 8, 32)],
        [(2, 3, 32), (2, 3, 32)],
        {"gamma": (32,), "beta": (32,)},
        {"epsilon": 1e-5},
    ),
    ("ReduceMean", "", [(1, 32, 16)], [(2, 4, 16)], {}, {"axes": [1]}),
    ("ReduceMean", "", [(1, 6, 25)], [(3, 2, 7)], {}, {"axes": [-1], "keepdims": 0}),
    ("ReduceMean", "", [(2, 3, 4, 5)], [(1, 3, 4, 5)], {}, {"axes": [2, 3]}),
    ("InstanceNormalization", "", [(1, 4, 5, 6)], [(2, 4, 33)], {"s": (4,), "bb": (4,)}, {}),
    (
        "FusedConv",
        "com.microsoft",
        [(1, 8, 20)],
        [(2, 8, 7)],
        {"w": (6, 8, 3), "bb": (6,)},
        {"activation": "Relu", "pads": [1, 1]},
    ),  # fmt: skip
    (
        "FusedConv",
        "com.microsoft",
        [(1, 8, 20)],
        [(1, 8, 9)],
        {"w": (6, 8, 3)},
        {"activation": "LeakyRelu", "activation_params": [0.1], "strides": [2]},
    ),  # fmt: skip
    ("LayerNormalization", "", [(1, 8, 32)], [(3, 32)], {"s": (32,), "bb": (32,)}, {}),
    ("LayerNormalization", "", [(1, 8, 32)], [(2, 2, 32)], {"s": (32,)}, {"epsilon": 1e-3}),
    (
        "BatchNormalization",
        "",
        [(1, 4, 5, 6)],
        [(2, 4, 3, 3)],
        {"s": (4,), "bb": (4,), "m": (4,), "v": (4,)},
        {},
    ),
    (
        "BatchNormRelu",
        "ai.onyx",
        [(1, 4, 5, 6)],
        [(2, 4, 3, 3)],
        {"s": (4,), "bb": (4,), "m": (4,), "v": (4,)},
        {},
    ),
    (
        "MaxPool",
        "",
        [(1, 16, 7, 7)],
        [(2, 5, 14, 13)],
        {},
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    ),
    (
        "MaxPool",
        "",
        [(1, 16, 32, 32)],
        [(1, 32, 16, 16)],
        {},
        {"kernel_shape": [2, 2], "strides": [2, 2]},
    ),  # (small_cnn's 2x2 set-up)
    (
        "AveragePool",
        "",
        [(1, 64, 14, 14)],
        [(1, 8, 7, 7)],
        {},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    ),
    (
        "AveragePool",
        "",
        [(1, 4, 9, 9)],
        [(2, 3, 8, 5)],
        {},
        {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1},
    ),
]


def _case(op, domain, first, consts, attrs):
    fed = [f"x{i}" for i in range(len(first))]
    names = fed + list(consts)
    arrays = {n: RNG.standard_normal(s).astype(np.float32) for n, s in consts.items()}
    if op.startswith("BatchNorm"):
        arrays["v"] = np.abs(arrays["v"]) + 0.5
    opset = 13 if op == "ReduceMean" else 17
    sess = _model(op, names, arrays, attrs, domain, opset)
    return sess, fed, [_frozen(arrays[n]) for n in consts], opset


@pytest.mark.parametrize("op, domain, first, second, consts, attrs", CASES)
def test_bound_step_answers_as_the_kernel(op, domain, first, second, consts, attrs):
    sess, fed, constants, opset = _case(op, domain, first, consts, attrs)
    for shapes in (first, second, first, second):
        xs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
        for variant in (xs, [_strided(x) for x in xs]):
            got = sess.run(None, dict(zip(fed, variant)))
            _same(got, _want(op, domain, opset, [_frozen(x) for x in variant] + constants, attrs))
    assert len(_bound(sess).calls) == 2  # (one per signature, made once)


def test_a_small_products_bias_that_does_not_broadcast_fails_as_the_kernel():
    """C (2, 4) fits A of 2 rows; A of one row would make += refuse it: the bound call's
    fresh sum must not give a (2, 4) result instead."""
    sess, fed, _, _ = _case("Gemm", "", [(2, 16)], {"b": (16, 4), "c": (2, 4)}, {})
    assert sess.run(None, {"x0": RNG.standard_normal((2, 16)).astype(np.float32)})[0].shape == (
        2,
        4,
    )
    with pytest.raises(onyx.OnyxError):
        sess.run(None, {"x0": RNG.standard_normal((1, 16)).astype(np.float32)})


def test_a_graph_input_is_no_constant():
    """B fed at run time (or an initializer a feed may override) changes between runs: a
    bound step must not keep what it derived from the first run's B."""
    b0 = RNG.standard_normal((32, 48)).astype(np.float32)
    sess = _model("MatMul", ["a", "b"], {"b": b0}, fed_const=["b"])
    assert _bound(sess).constant == (False, False)
    a = RNG.standard_normal((20, 32)).astype(np.float32)
    for _ in range(3):
        b = RNG.standard_normal((32, 48)).astype(np.float32)
        (got,) = sess.run(None, {"a": a, "b": b})
        _same([got], _want("MatMul", "", 17, [_frozen(a), _frozen(b)], {}))
    (got,) = sess.run(None, {"a": a})  # (the initializer, as the default)
    np.testing.assert_allclose(got, a @ b0, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op, domain, first, second, consts, attrs", [c for c in CASES if c[4]])
def test_an_overridable_constant_never_binds(op, domain, first, second, consts, attrs):
    """Every constant of these cases is one the kernel's binds declares it needs (its
    ``constants``): declared a graph input too (a feed may override it), the node never calls
    ``make`` and its runs answer as the kernel."""
    fed = [f"x{i}" for i in range(len(first))]
    arrays = {n: RNG.standard_normal(s).astype(np.float32) for n, s in consts.items()}
    if op.startswith("BatchNorm"):
        arrays["v"] = np.abs(arrays["v"]) + 0.5
    sess = _model(op, fed + list(consts), arrays, attrs, domain, fed_const=list(consts))
    bound = _bound(sess)
    assert bound.make is None
    for shapes in (first, second):
        xs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
        got = sess.run(None, dict(zip(fed, xs)))
        args = [_frozen(x) for x in xs] + [_frozen(arrays[n]) for n in consts]
        _same(got, _want(op, domain, 17, args, attrs))
    assert not bound.calls


def test_outputs_are_fresh_arrays():
    """A bound call's result is the caller's own: never a buffer a later run writes."""
    sess, fed, _, _ = _case("Gemm", "", [(20, 32)], {"b": (32, 48), "c": (48,)}, {})
    x = RNG.standard_normal((20, 32)).astype(np.float32)
    (first,) = sess.run(None, {fed[0]: x})
    kept = first.copy()
    sess.run(None, {fed[0]: x + 1})
    np.testing.assert_array_equal(first, kept)
    assert first.flags.writeable


def test_concurrent_runs_are_bit_identical():
    sess, fed, constants, opset = _case(
        "SkipLayerNormalization",
        "com.microsoft",
        [(1, 8, 32), (1, 8, 32)],
        {"gamma": (32,), "beta": (32,)},
        {"epsilon": 1e-5},
    )
    feeds = [{n: RNG.standard_normal((1, 8, 32)).astype(np.float32) for n in fed} for _ in range(8)]
    want = [sess.run(None, f) for f in feeds]
    failures = []

    def worker(k):
        for _ in range(200):
            got = sess.run(None, feeds[k])
            if not all(np.array_equal(g, w) for g, w in zip(got, want[k])):
                failures.append(k)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_signatures_are_bounded():
    sess, fed, _, _ = _case("ReduceMean", "", [(1, 4, 5)], {}, {"axes": [1]})
    bound = _bound(sess)
    for n in range(1, 20):
        x = RNG.standard_normal((1, 4, n)).astype(np.float32)
        (got,) = sess.run(None, {fed[0]: x})
        np.testing.assert_array_equal(got, np.add.reduce(x, axis=(1,), keepdims=True) / 4)
    assert 0 < len(bound.calls) <= 8


def test_a_make_that_declines_runs_the_kernel():
    """Inputs a bind does not take (float64 here) run the kernel as written, every time."""
    sess, fed, _, _ = _case("ReduceMean", "", [(1, 4, 5)], {}, {"axes": [1]})
    bound = _bound(sess)
    x = RNG.standard_normal((2, 3, 4))
    got = bound(x)
    np.testing.assert_array_equal(got, np.add.reduce(x, axis=(1,), keepdims=True) / 3)
    assert list(bound.calls.values()) == [None]  # (declined: the kernel as written)
    assert bound.key(([x],)) is None  # (no ndarray: no signature, the kernel decides)


@pytest.mark.parametrize("target", [[0, -1], [-1, 4], [2, 0, -1], [0, 0, 0, 1]])
def test_reshape(target):
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F, None)],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.array(target, np.int64), "shape")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = onyx.InferenceSession(model.SerializeToString())
    _bound(sess)
    for shape in ((2, 4, 3), (2, 8, 1), (2, 4, 3)):
        x = RNG.standard_normal(shape).astype(np.float32)
        for variant in (x, _strided(x)):
            (got,) = sess.run(None, {"x": variant})
            args = [_frozen(variant), _frozen(np.array(target, np.int64))]
            _same([got], _want("Reshape", "", 17, args, {}))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(mode):
    pads = np.array([0, 0, 1, 2, 0, 1, 2, -1], np.int64)
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode=mode)],
        "g",
        [helper.make_tensor_value_info("x", F, None)],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(pads, "pads"), numpy_helper.from_array(np.float32(1.5), "value")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    sess = onyx.InferenceSession(model.SerializeToString())
    _bound(sess)
    want_mode = {"constant": "constant", "reflect": "reflect", "edge": "edge"}[mode]
    for shape in ((1, 3, 6, 7), (2, 2, 5, 4), (1, 3, 6, 7)):
        x = RNG.standard_normal(shape).astype(np.float32)
        for variant in (x, _strided(x)):
            (got,) = sess.run(None, {"x": variant})
            cropped = variant[:, :, :, :-1]
            widths = [(0, 0), (0, 1), (1, 2), (2, 0)]
            extra = {"constant_values": 1.5} if mode == "constant" else {}
            np.testing.assert_array_equal(got, np.pad(cropped, widths, mode=want_mode, **extra))
            args = [_frozen(variant), _frozen(pads), _frozen(np.array(1.5, np.float32))]
            _same([got], _want("Pad", "", 18, args, {"mode": mode}))


@pytest.mark.parametrize(
    "attrs, scales, sizes",
    [
        ({"mode": "nearest"}, [1, 1, 2, 2], None),
        (
            {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
            [1, 1, 2, 1.5],
            None,
        ),
        ({"mode": "linear"}, None, [1, 3, 7, 9]),
        ({"mode": "cubic"}, [1, 1, 1.5, 2], None),
    ],
)
def test_resize(attrs, scales, sizes):
    consts = {"roi": np.array([], np.float32)}
    names = ["x", "roi"]
    if scales is not None:
        consts["scales"] = np.array(scales, np.float32)
        names.append("scales")
    else:
        consts["sizes"] = np.array(sizes, np.int64)
        names += ["", "sizes"]
    graph = helper.make_graph(
        [helper.make_node("Resize", names, ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", F, None)],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    sess = onyx.InferenceSession(model.SerializeToString())
    _bound(sess)
    args = [_frozen(consts["roi"])]
    args += [_frozen(consts["scales"])] if scales is not None else [None, _frozen(consts["sizes"])]
    for shape in ((1, 3, 4, 5), (1, 3, 6, 2), (1, 3, 4, 5)):
        x = RNG.standard_normal(shape).astype(np.float32)
        for variant in (x, _strided(x)):
            (got,) = sess.run(None, {"x": variant})
            _same([got], _want("Resize", "", 13, [_frozen(variant)] + args, attrs))


def test_the_runner_calls_the_bound_call_itself(monkeypatch):
    """After a signature's first run the generated runner finds its call inline: no pass
    through BoundCall.__call__ (which a new signature still takes)."""
    sess, fed, _, _ = _case("Gemm", "", [(20, 32)], {"b": (32, 48), "c": (48,)}, {})
    x = RNG.standard_normal((20, 32)).astype(np.float32)
    sess.run(None, {fed[0]: x})
    entered = []
    original = BoundCall.__call__

    def counting(self, *inputs):
        entered.append(len(inputs))
        return original(self, *inputs)

    monkeypatch.setattr(BoundCall, "__call__", counting)
    for _ in range(3):
        sess.run(None, {fed[0]: x})
    assert entered == []
    sess.run(None, {fed[0]: x[:5]})  # (a new signature: bound at its first call)
    assert entered


@pytest.mark.parametrize(
    "op, axes", [("Squeeze", [1, -1]), ("Squeeze", None), ("Unsqueeze", [0, -1])]
)
def test_squeeze_and_unsqueeze(op, axes):
    inputs, consts = ["x"], []
    if axes is not None:
        inputs.append("axes")
        consts.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F, None)],
        [helper.make_tensor_value_info("y", F, None)],
        consts,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    sess = onyx.InferenceSession(model.SerializeToString())
    _bound(sess)
    for shape in ((2, 1, 3, 1), (4, 1, 2, 1), (2, 1, 3, 1)):
        x = RNG.standard_normal(shape).astype(np.float32)
        for variant in (x, _strided(x)):
            (got,) = sess.run(None, {"x": variant})
            args = [_frozen(variant)]
            if axes is not None:
                args.append(_frozen(np.array(axes, np.int64)))
            _same([got], _want(op, "", 13, args, {}))


@pytest.mark.parametrize("op", ["SignalMagnitude", "ConvMagnitude"])
def test_audio_magnitude(op):
    """An STFT as a conv and its magnitude (optimizer/audio.py's ops): the bound 1-D conv and
    slices answer as the kernel."""
    w = RNG.standard_normal((10, 1, 16)).astype(np.float32)
    consts = {"w": w}
    bounds = {"rs": [0], "re": [5], "is": [5], "ie": [10], "ax": [1]}
    consts.update({k: np.array(v, np.int64) for k, v in bounds.items()})
    consts["eps"] = np.array(1e-6, np.float32)
    names = ["w", "rs", "re", "is", "ie", "ax", "eps"]
    if op == "SignalMagnitude":
        consts["ua"] = np.array([1], np.int64)
        names = ["x", "ua"] + names
    else:
        names = ["x"] + names
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], domain="ai.onyx", strides=[8])],
        "g",
        [helper.make_tensor_value_info("x", F, None)],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onyx", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    sess = onyx.InferenceSession(model.SerializeToString())
    _bound(sess)
    shapes = ((1, 64), (2, 40)) if op == "SignalMagnitude" else ((1, 1, 64), (2, 1, 40))
    for shape in shapes + shapes[:1]:
        x = RNG.standard_normal(shape).astype(np.float32)
        for variant in (x, _strided(x)):
            (got,) = sess.run(None, {"x": variant})
            args = [_frozen(variant)] + [_frozen(consts[n]) for n in names[1:]]
            _same([got], _want(op, "ai.onyx", 1, args, {"strides": [8]}))


#: 2-D float convs (fed X shapes: two signatures), their constants and attributes: the small
#: direct conv (small_cnn.c), the implicit GEMM (a strided conv), a stem-sized 1x1, a GEMV (one
#: pixel), a depthwise conv (declined: the kernel as written)
CONVS_2D = [
    ([(1, 8, 16, 16)], [(2, 8, 8, 8)], {"w": (16, 8, 3, 3), "bb": (16,)}, {"pads": [1] * 4}),
    ([(1, 16, 20, 20)], [(2, 16, 9, 11)], {"w": (24, 16, 3, 3)}, {"strides": [2, 2]}),
    ([(1, 32, 8, 8)], [(1, 32, 40, 40)], {"w": (16, 32, 1, 1), "bb": (16,)}, {}),
    ([(1, 64, 1, 1)], [(3, 64, 1, 1)], {"w": (32, 64, 1, 1), "bb": (32,)}, {}),
    ([(1, 8, 10, 10)], [(2, 8, 6, 6)], {"w": (8, 1, 3, 3)}, {"group": 8, "pads": [1] * 4}),
]


def _conv_consts(consts):
    return {n: RNG.standard_normal(s).astype(np.float32) for n, s in consts.items()}


def _native_bound(bound: BoundCall, declines: bool = False) -> None:
    """With the native library on, the conv was bound (not declined) for each signature."""
    from onyx.runtime import native

    if native.conv_f32_ok() and not declines:
        assert all(call is not None for call in bound.calls.values())


@pytest.mark.parametrize("fused", [False, True])
def test_a_small_conv_binds_to_one_frame(fused):
    """A conv small_cnn.c takes (a U-Net's layer) binds to SmallConv.bound's call in one
    frame, with the kernel's bits: contiguous, strided and read-only x; under another thread
    setting the kernel as written."""
    from onyx.runtime import native

    if not native.small_conv_ok():
        pytest.skip("no small conv kernel here")
    op, domain = ("FusedConv", "com.microsoft") if fused else ("Conv", "")
    attrs = {"pads": [1] * 4, **({"activation": "Relu"} if fused else {})}
    arrays = _conv_consts({"w": (16, 8, 3, 3), "bb": (16,)})
    sess = _model(op, ["x", "w", "bb"], arrays, attrs, domain)
    constants = [_frozen(a) for a in arrays.values()]
    x = RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)
    sess.run(None, {"x": x})
    (call,) = _bound(sess).calls.values()
    assert call.__qualname__.endswith("one_frame")
    for variant in (x, _strided(x), _frozen(x)):
        want = _want(op, domain, 17, [_frozen(variant), *constants], attrs)
        _same([call(variant, *constants)], want)
        _same(sess.run(None, {"x": variant}), want)
        with native.threads(1 if native.thread_setting() != 1 else 2):
            _same([call(variant, *constants)], want)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("first, second, consts, attrs", CONVS_2D)
def test_conv_2d(fused, first, second, consts, attrs):
    """A bound 2-D Conv / FusedConv answers as the kernel for alternating shapes, strided
    (non-contiguous) and read-only feeds."""
    op, domain = ("FusedConv", "com.microsoft") if fused else ("Conv", "")
    if fused:
        attrs = {**attrs, "activation": "LeakyRelu", "activation_params": [0.2]}
    arrays = _conv_consts(consts)
    sess = _model(op, ["x", *consts], arrays, attrs, domain)
    constants = [_frozen(a) for a in arrays.values()]
    for shape in (first, second, first, second):
        x = RNG.standard_normal(shape[0]).astype(np.float32)
        for variant in (x, _strided(x)):
            (got,) = sess.run(None, {"x": variant})
            # (a conv no native kernel takes, a 1x1 without AVX-512, runs on BLAS, whose bits
            # depend on its thread count: the session's runs' count, 0 the library's own)
            with threadpool_limits(sess._run_blas or None, "blas"):
                want = _want(op, domain, 17, [_frozen(variant), *constants], attrs)
            _same([got], want)
    bound = _bound(sess)
    assert len(bound.calls) == 2
    _native_bound(bound, declines=attrs.get("group", 1) > 1)


def test_fused_conv_2d_with_a_fed_residual():
    """FusedConv's Z, fed (part of the signature): added as the kernel adds it, broadcast too."""
    arrays = _conv_consts({"w": (16, 8, 3, 3), "bb": (16,)})
    attrs = {"activation": "Relu", "pads": [1] * 4}
    graph = helper.make_graph(
        [
            helper.make_node(
                "FusedConv", ["x", "w", "bb", "z"], ["y"], domain="com.microsoft", **attrs
            )
        ],
        "g",
        [helper.make_tensor_value_info(n, F, None) for n in ("x", "z")],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(v, n) for n, v in arrays.items()],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    sess = onyx.InferenceSession(
        helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()
    )
    shapes = [((1, 8, 12, 12), (1, 16, 12, 12)), ((2, 8, 8, 8), (1, 16, 1, 1))]
    for x_shape, z_shape in shapes + shapes:
        x = RNG.standard_normal(x_shape).astype(np.float32)
        z = RNG.standard_normal(z_shape).astype(np.float32)
        for xv, zv in ((x, z), (_strided(x), _strided(z))):
            (got,) = sess.run(None, {"x": xv, "z": zv})
            args = [_frozen(xv), *(_frozen(a) for a in arrays.values()), _frozen(zv)]
            _same([got], _want("FusedConv", "com.microsoft", 1, args, attrs))
    bound = _bound(sess)
    assert len(bound.calls) == 2
    _native_bound(bound)


@pytest.mark.parametrize(
    "first, second, consts, attrs",
    [  # the small conv's 2x2 / 2 upsampling (width a multiple of 8), convtranspose.c's
        ((1, 16, 8, 8), (2, 16, 4, 16), {"w": (16, 8, 2, 2), "bb": (8,)}, {"strides": [2, 2]}),
        ((1, 8, 5, 6), (1, 8, 7, 7), {"w": (8, 4, 3, 3)}, {"strides": [2, 2], "pads": [1] * 4}),
    ],
)
def test_conv_transpose_2d(first, second, consts, attrs):
    arrays = _conv_consts(consts)
    sess = _model("ConvTranspose", ["x", *consts], arrays, attrs)
    constants = [_frozen(a) for a in arrays.values()]
    for shape in (first, second, first, second):
        x = RNG.standard_normal(shape).astype(np.float32)
        for variant in (x, _strided(x)):
            (got,) = sess.run(None, {"x": variant})
            _same([got], _want("ConvTranspose", "", 17, [_frozen(variant), *constants], attrs))
    bound = _bound(sess)
    assert len(bound.calls) == 2
    from onyx.runtime import native

    if native.conv_transpose_ok():
        assert all(call is not None for call in bound.calls.values())


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_a_fed_conv_weight_declines(op):
    """W fed (or an initializer a feed may override): no set-up is kept for it."""
    w0 = RNG.standard_normal((8, 8, 3, 3)).astype(np.float32)
    sess = _model(op, ["x", "w"], {"w": w0}, {"pads": [1] * 4}, fed_const=["w"])
    x = RNG.standard_normal((1, 8, 8, 8)).astype(np.float32)
    for _ in range(3):
        w = RNG.standard_normal((8, 8, 3, 3)).astype(np.float32)
        (got,) = sess.run(None, {"x": x, "w": w})
        _same([got], _want(op, "", 17, [_frozen(x), _frozen(w)], {"pads": [1] * 4}))
    assert not any(_bound(sess).calls.values())  # (no set-up kept: declined or not made)


def test_a_bound_conv_under_another_thread_setting():
    """A set-up's work split is its thread setting's: under another one the bound call answers
    as the kernel does there."""
    from onyx.runtime import native

    arrays = _conv_consts({"w": (32, 16, 3, 3), "bb": (32,)})
    attrs = {"pads": [1] * 4}
    sess = _model("Conv", ["x", "w", "bb"], arrays, attrs)
    x = RNG.standard_normal((2, 16, 24, 24)).astype(np.float32)
    sess.run(None, {"x": x})
    (call,) = _bound(sess).calls.values()
    if call is None:
        pytest.skip("declined here (no native conv)")
    args = [_frozen(x), *(_frozen(a) for a in arrays.values())]
    for n in (1, 2, 3):
        with native.threads(n):
            _same([call(*args)], _want("Conv", "", 17, args, attrs))


def test_concurrent_bound_convs_are_bit_identical():
    arrays = _conv_consts({"w": (16, 8, 3, 3), "bb": (16,)})
    sess = _model("Conv", ["x", "w", "bb"], arrays, {"pads": [1] * 4})
    feeds = [{"x": RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)} for _ in range(8)]
    want = [sess.run(None, f) for f in feeds]
    failures = []

    def worker(k):
        for _ in range(100):
            (got,) = sess.run(None, feeds[k])
            if not np.array_equal(got, want[k][0]):
                failures.append(k)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
