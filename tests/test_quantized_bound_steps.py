"""Bound quantized steps (registry.binds): QuantizeLinear, DequantizeLinear, QLinearAdd,
QLinearMul, QLinearMatMul, QGemm and QLinearSoftmax with constant scales and zero points set up
their call once per input signature (the native pass, the int8 GEMM's set-up, the softmax's
tables), and must answer exactly as the kernel called as written, for alternating shapes,
strided inputs and values that change. Without the native library (ONYX_NATIVE=0) they
decline and run as written."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native
from onyx.runtime.plan import BoundCall
from onyx.runtime.registry import lookup

RNG = np.random.default_rng(11)
MS = "com.microsoft"
_TYPES = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.int32): TensorProto.INT32,
}


def _session(op, domain, fed: dict, consts: dict, attrs: dict):
    """One node reading ``fed`` (name -> dtype) and ``consts`` (name -> array), in order."""
    names = list(fed) + list(consts)
    order = [n for n in ORDER[op] if n in names]
    node = helper.make_node(op, order, ["y"], domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, _TYPES[np.dtype(t)], None) for n, t in fed.items()],
        [helper.make_tensor_value_info("y", _output_type(op, consts), None)],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    options = onyx.SessionOptions()
    options.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onyx.InferenceSession(model.SerializeToString(), options), order


def _output_type(op: str, consts: dict) -> int:
    if op == "DequantizeLinear":
        return TensorProto.FLOAT
    return _TYPES[consts["z" if op == "QuantizeLinear" else "zy"].dtype]


ORDER = {
    "QuantizeLinear": ["x", "s", "z"],
    "DequantizeLinear": ["x", "s", "z"],
    "QLinearAdd": ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
    "QLinearMul": ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
    "QLinearMatMul": ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
    "QLinearSoftmax": ["x", "s", "z", "sy", "zy"],
    "QGemm": ["a", "sa", "za", "b", "sb", "zb", "c", "sy", "zy"],
}


def _f(v) -> np.ndarray:
    return np.array(v, np.float32)


def _u8(shape) -> np.ndarray:
    return RNG.integers(0, 256, shape).astype(np.uint8)


def _per_tensor(zp_type=np.uint8):
    return {"s": _f(0.037), "z": np.array(3 if zp_type == np.int8 else 131, zp_type)}


def _binary():
    return {"sa": _f(0.05), "za": np.array(120, np.uint8), "sb": _f(0.02),
            "zb": np.array(9, np.uint8), "sy": _f(0.06), "zy": np.array(128, np.uint8)}  # fmt: skip


def _matmul_params(n: int | None):
    per_column = (n,) if n else ()
    return {"sa": _f(0.02), "za": np.array(117, np.uint8),
            "sb": RNG.uniform(0.001, 0.01, per_column).astype(np.float32),
            "zb": np.zeros(per_column, np.int8), "sy": _f(0.09), "zy": np.array(125, np.uint8)}  # fmt: skip


#: op, domain, fed name -> (dtype, two shapes), constants, attributes
CASES = [
    ("QuantizeLinear", "", {"x": (np.float32, (1, 16, 64), (2, 5, 64))}, _per_tensor(), {}),
    (
        "QuantizeLinear",
        "",
        {"x": (np.float32, (16, 1, 64), (3, 7))},
        _per_tensor(np.int8),
        {},
    ),
    ("DequantizeLinear", "", {"x": (np.uint8, (1, 16, 64), (3, 8))}, _per_tensor(), {}),
    (
        "QLinearAdd",
        MS,
        {"a": (np.uint8, (1, 16, 64), (2, 3, 64)), "b": (np.uint8, (1, 16, 64), (2, 3, 64))},
        _binary(),
        {},
    ),
    (
        "QLinearAdd",
        MS,
        {"a": (np.uint8, (16, 1, 64), (2, 64))},
        {**_binary(), "b": _u8((64,))},
        {},
    ),
    (
        "QLinearMul",
        MS,
        {"a": (np.uint8, (1, 4, 16, 16), (2, 4, 3, 16))},
        {**_binary(), "b": _u8((1,))},
        {},
    ),
    (
        "QLinearMatMul",
        "",
        {"a": (np.uint8, (16, 1, 64), (2, 5, 64))},
        {**_matmul_params(96), "b": RNG.integers(-128, 128, (64, 96)).astype(np.int8)},
        {},
    ),
    (
        "QLinearMatMul",
        "",
        {
            "a": (np.uint8, (1, 4, 16, 16), (2, 4, 3, 16)),
            "b": (np.uint8, (1, 4, 16, 16), (2, 4, 16, 5)),
        },
        {**_matmul_params(None), "zb": np.array(121, np.uint8)},
        {},
    ),  # fmt: skip
    (
        "QGemm",
        MS,
        {"a": (np.uint8, (16, 64), (3, 64))},
        {
            **_matmul_params(40),
            "b": RNG.integers(-128, 128, (40, 64)).astype(np.int8),
            "c": RNG.integers(-500, 500, (40,)).astype(np.int32),
        },
        {"transB": 1},
    ),  # fmt: skip
    (
        "QLinearSoftmax",
        MS,
        {"x": (np.uint8, (1, 4, 16, 16), (2, 3, 7))},
        {
            "s": _f(0.11),
            "z": np.array(255, np.uint8),
            "sy": _f(1 / 256),
            "zy": np.array(0, np.uint8),
        },
        {"opset": 13, "axis": -1},
    ),  # fmt: skip
]


def _strided(x: np.ndarray) -> np.ndarray:
    wide = np.empty(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
    wide[..., ::2] = x
    return wide[..., ::2]


def _frozen(a: np.ndarray) -> np.ndarray:
    a = a.view()
    a.flags.writeable = False
    return a


def _feed(dtype, shape) -> np.ndarray:
    if np.dtype(dtype) == np.float32:
        return RNG.uniform(-6, 6, shape).astype(np.float32)
    return _u8(shape)


def _want(op, domain, order, values: dict, attrs):
    kernel = lookup(op, domain, 13 if not domain else 1)
    args = [_frozen(values[n]) for n in order]
    return kernel.fn(*args, **{**kernel.attr_defaults, **attrs})


@pytest.mark.parametrize("op, domain, fed, consts, attrs", CASES)
def test_bound_quantized_step_answers_as_the_kernel(op, domain, fed, consts, attrs):
    sess, order = _session(op, domain, {n: t for n, (t, *_) in fed.items()}, consts, attrs)
    for k in (1, 2, 1, 2):
        xs = {n: _feed(t, shapes[k - 1]) for n, (t, *shapes) in fed.items()}
        for variant in (xs, {n: _strided(x) for n, x in xs.items()}):
            (got,) = sess.run(None, variant)
            want = _want(op, domain, order, {**consts, **variant}, attrs)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    (step,) = sess.plan.steps
    assert step.fn.__class__ is BoundCall
    if native.available() and native.int8_gemm_ok(64):  # (the native set-ups: made, kept)
        assert len(step.fn.calls) == 2 and None not in step.fn.calls.values()


def test_bound_softmax_takes_the_general_path_where_a_sum_vanishes():
    """Bytes whose exps all underflow to 0 (a masked row) leave the byte path's sums 0: the
    bound call hands such an input to the kernel's general path, as the kernel does."""
    consts = {"s": _f(1.0), "z": np.array(255, np.uint8), "sy": _f(1 / 256),
              "zy": np.array(0, np.uint8)}  # fmt: skip
    attrs = {"opset": 13, "axis": -1}
    sess, order = _session("QLinearSoftmax", MS, {"x": np.uint8}, consts, attrs)
    x = _u8((2, 3, 8))
    x[1, 2] = 0  # (exp((0 - 255) * 1.0) is 0 in float32)
    for _ in range(2):
        (got,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(
            got, _want("QLinearSoftmax", MS, order, {**consts, "x": x}, attrs)
        )
