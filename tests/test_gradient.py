"""ai.onnx.preview.training::Gradient: gradient_graph against finite differences and the suite.

Each case builds a forward graph plus a Gradient node with the IR, asks gradient_graph for the
gradient graph, runs it (its outer captures made graph inputs) and compares dy/dx with central
differences of sum(y) in float64, computed by running the forward graph itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onyx
from onyx import ir
from onyx.ir.dtypes import from_numpy
from onyx.runtime.gradient import gradient_graph

TRAINING = "ai.onnx.preview.training"
rng = np.random.default_rng(0)


def _tensor_value(name: str, arr: np.ndarray, typed: bool) -> ir.Value:
    shape = arr.shape if typed is True else None  # typed="elem": element type, no shape
    t = ir.TensorType(from_numpy(arr.dtype), shape) if typed else None
    return ir.Value(name, t)


def _forward(spec, feeds, consts, typed=True):
    """Values by name and the forward nodes of ``spec`` [(op, inputs, outputs, attrs), ...]."""
    values = {k: _tensor_value(k, a, typed) for k, a in feeds.items()}
    for k, a in consts.items():
        values[k] = ir.Value(k, ir.TensorType(from_numpy(a.dtype), a.shape), ir.Tensor(a))
    nodes = []
    for op_type, ins, outs, attrs in spec:
        n = ir.Node(op_type, [values[i] if i else None for i in ins], list(outs), attrs or None)
        values.update((v.name, v) for v in n.outputs)
        nodes.append(n)
    return values, nodes


def _session(graph: ir.Graph, opset: int):
    model = ir.Model(graph, opset_imports={"": opset, TRAINING: 1})
    return onyx.InferenceSession(model)


def run_gradient(spec, feeds, xs, y, *, zs=(), consts=None, opset=18, typed=True):
    """dy/dx per x of xs, from gradient_graph's graph run on its own."""
    consts = consts or {}
    values, nodes = _forward(spec, feeds, consts, typed)
    attrs = {"xs": list(xs), "y": y, **({"zs": list(zs)} if zs else {})}
    grad = ir.Node("Gradient", [values[n] for n in [*xs, *zs]], len(xs), attrs, TRAINING, "grad")
    outer_inputs = [values[k] for k in feeds]
    outer = ir.Graph(outer_inputs, [values[y]], [*nodes, grad], [values[k] for k in consts])
    g = gradient_graph(grad, outer, opset=opset)
    for v in ir.captured_values(g):  # the enclosing scope, made this graph's inputs
        if v.name in consts:
            g.add_initializer(v)
        else:
            g.inputs.append(v)
    sess = _session(g, opset)
    feed = {v.name: feeds[n] for v, n in zip(g.inputs, [*xs, *zs])}
    feed.update((v.name, feeds[v.name]) for v in g.inputs[len(xs) + len(zs) :])
    return sess.run(None, feed)


def numeric_gradient(spec, feeds, xs, y, *, consts=None, opset=18, eps=1e-6):
    """Central differences of sum(y) for each x of xs (float64)."""
    values, nodes = _forward(spec, feeds, consts or {})
    graph = ir.Graph(
        [values[k] for k in feeds], [values[y]], nodes, [values[k] for k in consts or {}]
    )
    sess = _session(graph, opset)

    def f(fd):
        return float(np.sum(sess.run(None, fd)[0]))

    grads = []
    for x in xs:
        base = feeds[x]
        g = np.zeros(base.shape)
        for i in np.ndindex(base.shape):
            hi, lo = base.copy(), base.copy()
            hi[i] += eps
            lo[i] -= eps
            g[i] = (f({**feeds, x: hi}) - f({**feeds, x: lo})) / (2 * eps)
        grads.append(g)
    return grads


def check(spec, feeds, xs, y, *, consts=None, opset=18, typed=True, rtol=1e-5, atol=1e-6):
    got = run_gradient(spec, feeds, xs, y, consts=consts, opset=opset, typed=typed)
    want = numeric_gradient(spec, feeds, xs, y, consts=consts, opset=opset)
    assert len(got) == len(xs)
    for x, g, w in zip(xs, got, want):
        assert g.shape == feeds[x].shape, (x, g.shape)
        assert g.dtype == feeds[x].dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=x)


def r(*shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, shape)


def pos(*shape):
    return r(*shape, low=0.5, high=2.0)


# -- elementwise ----------------------------------------------------------------------------------
BINARY = [
    ("Add", (2, 3), (3,)),
    ("Sub", (2, 1, 3), (4, 1)),
    ("Mul", (2, 3), (2, 1)),
    ("Div", (3, 4), (1, 4)),
    ("Mul", (), (2, 2)),
    ("Add", (2, 3), (2, 3)),
]


@pytest.mark.parametrize("typed", [True, False], ids=["typed", "untyped"])
@pytest.mark.parametrize("op_type,sa,sb", BINARY)
def test_binary_broadcasting(op_type, sa, sb, typed):
    feeds = {"a": r(*sa), "b": pos(*sb)}
    check([(op_type, ["a", "b"], ["y"], None)], feeds, ["a", "b"], "y", typed=typed)


@pytest.mark.parametrize("opset", [12, 18])
def test_broadcasting_static_shapes_at_old_opsets(opset):
    feeds = {"a": r(2, 3), "b": r(3)}
    spec = [("Mul", ["a", "b"], ["c"], None), ("Add", ["c", "a"], ["y"], None)]
    check(spec, feeds, ["a", "b"], "y", opset=opset)


UNARY = {
    "Identity": r,
    "Neg": r,
    "Exp": r,
    "Log": pos,
    "Sqrt": pos,
    "Abs": lambda *s: r(*s) + np.sign(r(*s)) * 0.1,
    "Relu": lambda *s: np.where(np.abs(v := r(*s)) < 0.05, 0.5, v),
    "Sigmoid": r,
    "Tanh": r,
}


@pytest.mark.parametrize("op_type", sorted(UNARY))
def test_unary(op_type):
    feeds = {"x": UNARY[op_type](3, 4)}
    check([(op_type, ["x"], ["y"], None)], feeds, ["x"], "y")


def test_pow_constant_exponent():
    feeds = {"a": pos(2, 3)}
    consts = {"p": np.array(3.0)}
    check([("Pow", ["a", "p"], ["y"], None)], feeds, ["a"], "y", consts=consts)


def test_pow_float_exponent_of_other_type_and_variable_exponent():
    feeds = {"a": pos(2, 3).astype(np.float32), "p": pos(3).astype(np.float32)}
    got = run_gradient([("Pow", ["a", "p"], ["y"], None)], feeds, ["a", "p"], "y")
    a, p = feeds["a"].astype(np.float64), feeds["p"].astype(np.float64)
    np.testing.assert_allclose(got[0], p * a ** (p - 1), rtol=1e-5)
    np.testing.assert_allclose(got[1], np.sum(a**p * np.log(a), axis=0), rtol=1e-5)
    consts = {"k": np.array(2, dtype=np.int64)}
    got = run_gradient([("Pow", ["a", "k"], ["y"], None)], feeds, ["a"], "y", consts=consts)
    assert got[0].dtype == np.float32
    np.testing.assert_allclose(got[0], 2 * feeds["a"], rtol=1e-6)


# -- linear algebra -------------------------------------------------------------------------------
MATMUL = [
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)),
    ((2, 1, 2, 3), (3, 3, 4)),
    ((3,), (3, 4)),
    ((2, 3, 4), (4,)),
    ((3,), (3,)),
    ((3,), (2, 3, 4)),
]


@pytest.mark.parametrize("sa,sb", MATMUL)
def test_matmul(sa, sb):
    feeds = {"a": r(*sa), "b": r(*sb)}
    check([("MatMul", ["a", "b"], ["y"], None)], feeds, ["a", "b"], "y")


@pytest.mark.parametrize("sa,sb", [((2, 3), (3, 4)), ((2, 1, 2, 3), (3, 3, 4))])
def test_matmul_unknown_ranks(sa, sb):
    feeds = {"a": r(*sa), "b": r(*sb)}
    check([("MatMul", ["a", "b"], ["y"], None)], feeds, ["a", "b"], "y", typed=False)


@pytest.mark.parametrize("c_shape", [None, (4,), (1, 4), (3, 1), (3, 4), ()])
@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm(ta, tb, c_shape):
    feeds = {"a": r(*((2, 3) if ta else (3, 2))), "b": r(*((4, 2) if tb else (2, 4)))}
    ins = ["a", "b"]
    if c_shape is not None:
        feeds["c"] = r(*c_shape)
        ins.append("c")
    attrs = {"transA": ta, "transB": tb, "alpha": 0.7, "beta": 1.5}
    check([("Gemm", ins, ["y"], attrs)], feeds, ins, "y")


# -- shapes and reductions ------------------------------------------------------------------------
def test_reshape_and_transpose():
    feeds = {"x": r(2, 3, 4), "w": r(4, 6)}
    consts = {"s": np.array([4, 6], dtype=np.int64)}
    spec = [
        ("Transpose", ["x"], ["t"], {"perm": [1, 2, 0]}),
        ("Reshape", ["t", "s"], ["u"], None),
        ("Mul", ["u", "w"], ["v"], None),
        ("Transpose", ["v"], ["y"], None),
    ]
    check(spec, feeds, ["x", "w"], "y", consts=consts)


REDUCE = [
    ({"keepdims": 0}, [1]),
    ({"keepdims": 1}, [0, -1]),
    ({"keepdims": 0}, None),
    ({"keepdims": 1}, None),
]


@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("attrs,axes", REDUCE)
@pytest.mark.parametrize("opset", [12, 18])
def test_reductions(op_type, attrs, axes, opset):
    feeds = {"x": r(2, 3, 4), "w": r(2, 3, 4)}
    axes_as_input = opset >= (18 if op_type == "ReduceMean" else 13)
    consts, ins, attrs = {}, ["p"], dict(attrs)
    if axes is not None and axes_as_input:
        consts["axes"] = np.array(axes, dtype=np.int64)
        ins.append("axes")
    elif axes is not None:
        attrs["axes"] = axes
    spec = [
        ("Mul", ["x", "w"], ["p"], None),
        (op_type, ins, ["q"], attrs),
        ("Exp", ["q"], ["y"], None),
    ]
    check(spec, feeds, ["x", "w"], "y", consts=consts, opset=opset)


def test_reduce_sum_noop_with_empty_axes():
    feeds = {"x": r(2, 3)}
    spec = [("ReduceSum", ["x"], ["q"], {"noop_with_empty_axes": 1}), ("Exp", ["q"], ["y"], None)]
    check(spec, feeds, ["x"], "y")


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(18, None), (18, 1), (13, 0), (12, None), (12, 1), (11, 2)])
def test_softmax(op_type, opset, axis):
    feeds = {"x": r(2, 3, 4), "w": r(2, 3, 4)}
    attrs = None if axis is None else {"axis": axis}
    spec = [(op_type, ["x"], ["s"], attrs), ("Mul", ["s", "w"], ["y"], None)]
    check(spec, feeds, ["x", "w"], "y", opset=opset)


# -- whole graphs ---------------------------------------------------------------------------------
def test_mlp_with_zs_and_captured_bias():
    """Two layers and a cross-entropy-like loss; the data X comes in through zs."""
    feeds = {"W1": r(4, 5), "W2": r(5, 3), "X": r(6, 4), "b1": r(5)}
    spec = [
        ("Gemm", ["X", "W1", "b1"], ["h"], None),
        ("Relu", ["h"], ["a"], None),
        ("MatMul", ["a", "W2"], ["z"], None),
        ("Softmax", ["z"], ["p"], {"axis": 1}),
        ("Log", ["p"], ["lp"], None),
        ("ReduceMean", ["lp"], ["loss"], {"keepdims": 0}),
    ]
    got = run_gradient(spec, feeds, ["W1", "W2"], "loss", zs=["X"])
    want = numeric_gradient(spec, feeds, ["W1", "W2"], "loss")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)


def test_zs_values_are_the_gradient_inputs():
    """The gradient is taken at the values fed to Gradient, not at the graph's own tensors."""
    feeds = {"x": r(3), "z": r(3)}
    values, nodes = _forward([("Mul", ["x", "z"], ["y"], None)], feeds, {})
    x1, z1 = ir.Value("x1", values["x"].type), ir.Value("z1", values["z"].type)
    grad = ir.Node("Gradient", [x1, z1], 1, {"xs": ["x"], "zs": ["z"], "y": "y"}, TRAINING)
    outer = ir.Graph([values["x"], values["z"], x1, z1], [values["y"]], [*nodes, grad])
    g = gradient_graph(grad, outer)
    assert ir.captured_values(g) == []
    z_at = r(3)
    (dx,) = _session(g, 18).run(None, {g.inputs[0].name: r(3), g.inputs[1].name: z_at})
    np.testing.assert_allclose(dx, z_at)


def test_intermediate_x_keeps_upstream_values_captured():
    """xs may name an intermediate H: nodes before H are not recomputed, other tensors captured."""
    feeds = {"X": r(2, 3), "W": r(2, 3)}
    spec = [("Add", ["X", "X"], ["H"], None), ("Mul", ["H", "W"], ["Y"], None)]
    values, nodes = _forward(spec, feeds, {})
    grad = ir.Node("Gradient", [values["H"]], 1, {"xs": ["H"], "y": "Y"}, TRAINING, "g")
    outer = ir.Graph([values["X"], values["W"]], [values["Y"]], [*nodes, grad])
    g = gradient_graph(grad, outer)
    assert [v.name for v in ir.captured_values(g)] == ["W"]
    assert all(n.op_type != "Add" or n.inputs[0] is not values["X"] for n in g)


def test_multiple_uses_accumulate_and_independent_x_is_zero():
    feeds = {"a": r(2, 3), "b": r(2, 3), "c": r(4)}
    spec = [("Mul", ["a", "a"], ["s"], None), ("Mul", ["s", "b"], ["t"], None)]
    spec.append(("Add", ["t", "a"], ["y"], None))
    got = run_gradient(spec, feeds, ["a", "b", "c"], "y")
    a, b = feeds["a"], feeds["b"]
    np.testing.assert_allclose(got[0], 2 * a * b + 1)
    np.testing.assert_allclose(got[1], a * a)
    np.testing.assert_array_equal(got[2], np.zeros(4))


def test_y_in_xs_is_ones():
    feeds = {"a": r(2, 3).astype(np.float32), "b": r(3).astype(np.float32)}
    got = run_gradient([("Add", ["a", "b"], ["y"], None)], feeds, ["a", "b"], "a")
    np.testing.assert_array_equal(got[0], np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(got[1], np.zeros(3, np.float32))
    assert got[1].dtype == np.float32


def test_float32_and_float16_keep_their_element_type():
    for dt in (np.float32, np.float16):
        feeds = {"a": pos(2, 3).astype(dt), "b": pos(3).astype(dt)}
        spec = [("Div", ["a", "b"], ["c"], None), ("Sigmoid", ["c"], ["y"], None)]
        for typed in (True, False):
            got = run_gradient(spec, feeds, ["a", "b"], "y", typed=typed, opset=18)
            assert [g.dtype for g in got] == [dt, dt]
            s = 1 / (1 + np.exp(-(feeds["a"].astype(np.float64) / feeds["b"])))
            want = s * (1 - s) / feeds["b"].astype(np.float64)
            np.testing.assert_allclose(got[0], want, rtol=1e-2 if dt == np.float16 else 1e-5)


# -- errors ---------------------------------------------------------------------------------------
def test_unsupported_op_names_node_and_op():
    feeds = {"x": r(3)}
    with pytest.raises(onyx.NotImplementedOp, match=r"'sin_node'.*Sin"):
        values, nodes = _forward([], feeds, {})
        sin = ir.Node("Sin", [values["x"]], ["s"], name="sin_node")
        grad = ir.Node("Gradient", [values["x"]], 1, {"xs": ["x"], "y": "s"}, TRAINING)
        gradient_graph(grad, ir.Graph([values["x"]], sin.outputs, [sin, grad]))


def test_unknown_shapes_before_opset_13_are_refused():
    feeds = {"a": r(2, 3), "b": r(3)}
    with pytest.raises(onyx.NotImplementedOp, match="opset 13"):
        run_gradient(
            [("Add", ["a", "b"], ["y"], None)], feeds, ["a", "b"], "y", typed="elem", opset=12
        )


def test_unknown_name_is_an_error():
    feeds = {"x": r(3)}
    values, _ = _forward([], feeds, {})
    grad = ir.Node("Gradient", [values["x"]], 1, {"xs": ["x"], "y": "nope"}, TRAINING)
    with pytest.raises(onyx.OnyxError, match="nope"):
        gradient_graph(grad, ir.Graph([values["x"]], [], [grad]))


# -- through InferenceSession (the plan compiles Gradient with gradient_graph) ----------------------
def _session_model():
    t = ir.TensorType(from_numpy(np.float32), (2, 3))
    x, w = ir.Value("X", t), ir.Value("W", t)
    add = ir.Node("Add", [x, x], ["H"])
    mul = ir.Node("Mul", [add.outputs[0], w], ["Y"])
    attrs = {"xs": ["H", "W"], "y": "Y"}
    grad = ir.Node("Gradient", [add.outputs[0], w], ["dH", "dW"], attrs, TRAINING)
    graph = ir.Graph([x, w], list(grad.outputs), [add, mul, grad])
    return ir.Model(graph, opset_imports={"": 18, TRAINING: 1})


def _run_session_model(level):
    options = onyx.SessionOptions()
    options.graph_optimization_level = level
    sess = onyx.InferenceSession(_session_model(), options)
    x, w = r(2, 3).astype(np.float32), r(2, 3).astype(np.float32)
    dh, dw = sess.run(None, {"X": x, "W": w})
    np.testing.assert_array_equal(dh, w)
    np.testing.assert_array_equal(dw, x + x)


def test_session_y_not_a_graph_output():
    _run_session_model(onyx.GraphOptimizationLevel.ORT_DISABLE_ALL)


def test_session_y_not_a_graph_output_optimized():
    _run_session_model(onyx.GraphOptimizationLevel.ORT_ENABLE_ALL)


# -- the node suite's two cases -------------------------------------------------------------------
SUITE = Path(__import__("onnx").__file__).parent / "backend/test/data/simple"


@pytest.mark.parametrize("name", ["test_gradient_of_add", "test_gradient_of_add_and_mul"])
def test_suite_case(name):
    from onnx import load_tensor, numpy_helper

    case = SUITE / name
    sess = onyx.InferenceSession(str(case / "model.onnx"))
    data = case / "test_data_set_0"
    ins = [numpy_helper.to_array(load_tensor(str(p))) for p in sorted(data.glob("input_*.pb"))]
    outs = [numpy_helper.to_array(load_tensor(str(p))) for p in sorted(data.glob("output_*.pb"))]
    got = sess.run(None, {i.name: v for i, v in zip(sess.get_inputs(), ins)})
    for g, w in zip(got, outs, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
