"""com.microsoft contrib kernels against onnxruntime on small one-node models."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from conftest import run_onnx
from onnx import helper, numpy_helper

MS = "com.microsoft"
RNG = np.random.default_rng(1234)


def _model(op_type: str, inputs: dict, out_dtypes=None, initializers=(), **attrs):
    """One `op_type` node; `inputs` maps names (in order, '' for an omitted one) to arrays.

    out_dtypes: numpy dtypes of the outputs (default: one output, the first input's dtype).
    """
    names = list(inputs)
    out_dtypes = out_dtypes or [next(iter(inputs.values())).dtype]
    n_outputs = len(out_dtypes)
    node = helper.make_node(op_type, names, [f"y{i}" for i in range(n_outputs)], domain=MS, **attrs)
    feeds = {k: v for k, v in inputs.items() if k and k not in initializers}
    graph = helper.make_graph(
        [node],
        op_type,
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in feeds.items()
        ],
        [
            helper.make_tensor_value_info(
                f"y{i}", helper.np_dtype_to_tensor_dtype(np.dtype(t)), None
            )
            for i, t in enumerate(out_dtypes)
        ],
        initializer=[numpy_helper.from_array(inputs[k], k) for k in initializers],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
        ir_version=9,
    )
    return model, feeds


def _check(model, feeds, atol=0.0, rtol=0.0, quantized_slack=0):
    expected = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, feeds)
    actual = run_onnx(model, feeds)
    assert len(actual) >= len(expected)
    for e, a in zip(expected, actual):
        a = np.asarray(a)
        assert a.dtype == e.dtype and a.shape == e.shape
        if quantized_slack:  # onnxruntime's quantized kernels may use lookup tables / fixed point
            diff = np.abs(a.astype(np.int32) - e.astype(np.int32))
            assert diff.max(initial=0) <= quantized_slack
        else:
            np.testing.assert_allclose(a, e, atol=atol, rtol=rtol)


def _quant(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op_type", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5))])
def test_qlinear_binary(op_type, dtype, shapes):
    zp = np.array(3 if dtype == np.uint8 else -2, dtype=dtype)
    inputs = {
        "a": _quant(shapes[0], dtype),
        "a_scale": np.array(0.05, np.float32),
        "a_zero_point": zp,
        "b": _quant(shapes[1], dtype),
        "b_scale": np.array(0.03, np.float32),
        "b_zero_point": zp,
        "c_scale": np.array(0.2 if op_type == "QLinearMul" else 0.07, np.float32),
        "c_zero_point": np.array(5 if dtype == np.uint8 else 1, dtype=dtype),
    }
    scalars = [k for k in inputs if "scale" in k or "zero" in k]
    model, feeds = _model(op_type, inputs, initializers=scalars)
    _check(model, feeds, quantized_slack=1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op_type", ["QLinearSigmoid", "QLinearLeakyRelu"])
def test_qlinear_unary(op_type, dtype):
    inputs = {
        "x": _quant((3, 17), dtype),
        "x_scale": np.array(0.04, np.float32),
        "x_zero_point": np.array(10 if dtype == np.uint8 else 0, dtype),
        "y_scale": np.array(1 / 256 if op_type == "QLinearSigmoid" else 0.03, np.float32),
        "y_zero_point": np.array(0 if dtype == np.uint8 else -128, dtype),
    }
    attrs = {"alpha": 0.1} if op_type == "QLinearLeakyRelu" else {}
    scalars = ["x_scale", "x_zero_point", "y_scale", "y_zero_point"]
    model, feeds = _model(op_type, inputs, initializers=scalars, **attrs)
    _check(model, feeds, quantized_slack=1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 1), (12, 1)])
def test_qlinear_softmax(dtype, opset, axis):
    inputs = {
        "x": _quant((2, 3, 8), dtype),
        "x_scale": np.array(0.05, np.float32),
        "x_zero_point": np.array(128 if dtype == np.uint8 else 0, dtype),
        "y_scale": np.array(1 / 256, np.float32),
        "y_zero_point": np.array(0 if dtype == np.uint8 else -128, dtype),
    }
    scalars = ["x_scale", "x_zero_point", "y_scale", "y_zero_point"]
    model, feeds = _model("QLinearSoftmax", inputs, initializers=scalars, opset=opset, axis=axis)
    _check(model, feeds, quantized_slack=1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("x_scale", [0.05, 0.2, 2.0])  # (2.0: exps past the unshifted path)
def test_qlinear_softmax_by_lookup_is_the_dequantizing_kernel(dtype, x_scale, monkeypatch):
    """Softmax over the last axis of bytes by tabulated exps: the same bits as dequantizing
    them first (the general path)."""
    from onyx.runtime.kernels import contrib

    x = _quant((2, 4, 33, 40), dtype)
    x[0, 0, 0] = np.iinfo(dtype).max  # (either end of the range)
    args = (x, np.array(x_scale, np.float32), np.array(10, dtype),
            np.array(1 / 256, np.float32), np.array(0 if dtype == np.uint8 else -128, dtype))  # fmt: skip
    got = contrib.q_linear_softmax(*args, opset=13)
    fast = contrib._softmax_last_of_bytes(*args[:3])  # noqa: SLF001 (the kernels' helper)
    assert (fast is None) == (x_scale == 2.0)
    scalar = (x, np.float32(x_scale), *args[2:])  # (no weak reference to a numpy scalar)
    np.testing.assert_array_equal(contrib.q_linear_softmax(*scalar, opset=13), got)
    monkeypatch.setattr(contrib, "_softmax_last_of_bytes", lambda *a: None)
    np.testing.assert_array_equal(got, contrib.q_linear_softmax(*args, opset=13))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_requantizing_natively_is_the_numpy_rounding(dtype):
    """The contrib ops' requantization in one native pass: the bits of divide, round half to
    even, add the zero point and saturate, ties and both ends of the range included."""
    from onyx.runtime import native
    from onyx.runtime.kernels import contrib
    from onyx.runtime.kernels.quantize import saturate_cast

    rng = np.random.default_rng(1)
    scale, zp = np.array(0.02, np.float32), np.array(-5 if dtype == np.int8 else 9, dtype)
    ties = (rng.integers(-400, 400, 500) + 0.5).astype(np.float32) * np.float32(0.02)
    v = np.concatenate([ties, rng.standard_normal(300).astype(np.float32) * 4, [1e9, -1e9]])
    v = v.astype(np.float32).reshape(2, -1)
    calls, run = [], native.quantize_f32
    native_calls = (lambda *a: calls.append(1) or run(*a)) if native.available() else run
    want = saturate_cast(v / np.float32(scale), zp, dtype)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(native, "quantize_f32", native_calls)
        got = contrib._q(v, scale, zp, dtype)  # noqa: SLF001 (the kernels' helper)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == dtype and calls == ([1] if native.available() else [])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_concat(dtype):
    zp = np.array(7, dtype)
    inputs = {
        "y_scale": np.array(0.1, np.float32),
        "y_zero_point": zp,
        "x0": _quant((2, 3), dtype),
        "s0": np.array(0.1, np.float32),
        "z0": zp,
        "x1": _quant((2, 5), dtype),
        "s1": np.array(0.05, np.float32),
        "z1": np.array(-3 if dtype == np.int8 else 3, dtype),
    }
    scalars = ["y_scale", "y_zero_point", "s0", "z0", "s1", "z1"]
    model, feeds = _model("QLinearConcat", inputs, out_dtypes=[dtype], initializers=scalars, axis=1)
    _check(model, feeds, quantized_slack=1)


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1)])
@pytest.mark.parametrize("quantized_output", [False, True])
@pytest.mark.parametrize("per_column", [False, True])
def test_qgemm(trans_a, trans_b, quantized_output, per_column):
    m, k, n = 4, 6, 5
    a = _quant((k, m) if trans_a else (m, k), np.uint8)
    b = _quant((n, k) if trans_b else (k, n), np.int8)
    b_scale = np.linspace(0.01, 0.05, n).astype(np.float32) if per_column else np.float32(0.02)
    inputs = {
        "a": a,
        "a_scale": np.array(0.03, np.float32),
        "a_zero_point": np.array(100, np.uint8),
        "b": b,
        "b_scale": np.asarray(b_scale, np.float32),
        "b_zero_point": np.zeros(n if per_column else (), np.int8),
        "c": RNG.integers(-500, 500, size=(n,)).astype(np.int32),
    }
    if quantized_output:
        inputs["y_scale"] = np.array(0.5, np.float32)
        inputs["y_zero_point"] = np.array(3, np.uint8)
    scalars = [k for k in inputs if k not in ("a",)]
    out = np.uint8 if quantized_output else np.float32
    model, feeds = _model(
        "QGemm",
        inputs,
        out_dtypes=[out],
        initializers=scalars,
        alpha=0.75,
        transA=trans_a,
        transB=trans_b,
    )
    if quantized_output:
        _check(model, feeds, quantized_slack=1)
    else:
        _check(model, feeds, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_gelu_family(dtype):
    x = RNG.standard_normal((3, 16)).astype(dtype) * 3
    bias = RNG.standard_normal(16).astype(dtype)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 2e-3, "atol": 2e-3}
    _check(*_model("Gelu", {"x": x}), **tol)
    _check(*_model("BiasGelu", {"x": x, "bias": bias}), **tol)
    _check(*_model("FastGelu", {"x": x}), **tol)
    _check(*_model("FastGelu", {"x": x, "bias": bias}), **tol)


@pytest.mark.parametrize("with_beta,with_bias", [(True, True), (False, False), (True, False)])
def test_skip_layer_normalization(with_beta, with_bias):
    hidden = 16
    inputs = {
        "x": RNG.standard_normal((2, 3, hidden)).astype(np.float32),
        "skip": RNG.standard_normal((2, 3, hidden)).astype(np.float32),
        "gamma": RNG.standard_normal(hidden).astype(np.float32),
    }
    if with_beta or with_bias:  # beta is an input slot before bias: "" when omitted
        inputs["beta" if with_beta else ""] = RNG.standard_normal(hidden).astype(np.float32)
    if with_bias:
        inputs["bias"] = RNG.standard_normal(hidden).astype(np.float32)
    model, feeds = _model(
        "SkipLayerNormalization",
        inputs,
        out_dtypes=[np.float32] * 4,
        epsilon=1e-5,
    )
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    actual = run_onnx(model, feeds)
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(actual[3], expected[3], rtol=1e-6, atol=1e-6)
    for e, a in zip(expected[1:3], actual[1:3]):  # mean / inv_std_var: compare the values only
        np.testing.assert_allclose(np.ravel(a), np.ravel(e), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "shape_a,shape_b,attrs",
    [
        ((3, 4), (4, 5), {}),
        ((2, 3, 4), (2, 4, 5), {"alpha": 0.5}),
        ((2, 4, 3), (2, 4, 5), {"transA": 1}),
        ((2, 3, 4), (2, 5, 4), {"transB": 1, "alpha": 2.0}),
        ((3, 2, 4), (2, 4, 5), {"transBatchA": 1}),
        ((2, 3, 4), (4, 2, 5), {"transBatchB": 1}),
        ((3, 2, 4), (5, 2, 4), {"transBatchA": 1, "transBatchB": 1, "transB": 1}),
        ((4, 2, 3), (2, 4, 5), {"transBatchA": 1, "transA": 1}),
    ],
)
def test_fused_matmul(shape_a, shape_b, attrs):
    inputs = {
        "a": RNG.standard_normal(shape_a).astype(np.float32),
        "b": RNG.standard_normal(shape_b).astype(np.float32),
    }
    _check(*_model("FusedMatMul", inputs, **attrs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("per_column", [False, True], ids=["per tensor", "per column"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["", "bias"])
@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
def test_matmul_integer_to_float(per_column, with_bias, b_type):
    N = 6
    inputs = {
        "a": _quant((2, 3, 5), np.uint8),
        "b": _quant((5, N), b_type),
        "a_scale": np.array(0.02, np.float32),
        "b_scale": (np.linspace(0.01, 0.05, N) if per_column else np.array(0.03)).astype(
            np.float32
        ),
        "a_zero_point": np.array(120, np.uint8),
        "b_zero_point": (_quant((N,), b_type) if per_column else np.array(3, b_type)),
    }
    if with_bias:
        inputs["bias"] = RNG.standard_normal(N).astype(np.float32)
    consts = [k for k in inputs if k != "a"]
    model, feeds = _model("MatMulIntegerToFloat", inputs, [np.float32], initializers=consts)
    _check(model, feeds, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("with_bias", [False, True], ids=["", "bias"])
@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
def test_dynamic_quantize_matmul(with_bias, b_type):
    N = 7
    inputs = {
        "a": RNG.standard_normal((4, 9)).astype(np.float32) * 3,
        "b": _quant((9, N), b_type),
        "b_scale": np.linspace(0.01, 0.05, N).astype(np.float32),
        "b_zero_point": np.zeros(N, b_type),
    }
    if with_bias:
        inputs["bias"] = RNG.standard_normal(N).astype(np.float32)
    consts = [k for k in inputs if k != "a"]
    model, feeds = _model("DynamicQuantizeMatMul", inputs, [np.float32], initializers=consts)
    _check(model, feeds, rtol=1e-5, atol=1e-4)


def test_matmul_integer_to_float_takes_one_scale_for_a():
    from onyx.runtime.kernels.contrib import matmul_integer_to_float

    a, b = _quant((2, 3), np.uint8), _quant((3, 2), np.int8)
    with pytest.raises(ValueError, match="a_scale must be one value"):
        matmul_integer_to_float(a, b, np.ones(2, np.float32), np.float32(0.1))


@pytest.mark.parametrize("shape", [(2, 37, 1027), (3, 16), (5, 64)])
def test_bias_gelu_native(shape):
    """BiasGelu's one native pass (elementwise.c: the add and erf32's GELU a row at a time):
    onnxruntime within float tolerance, and the numpy kernels' bits (ONYX_NATIVE off)."""
    import onyx
    from onyx.runtime import native

    x = RNG.standard_normal(shape).astype(np.float32) * 3
    bias = RNG.standard_normal(shape[-1]).astype(np.float32)
    for constants in ((), ("bias",)):  # (the bias fed, and a constant)
        model, feeds = _model("BiasGelu", {"x": x, "bias": bias}, initializers=constants)
        _check(model, feeds, rtol=1e-5, atol=1e-6)
        got = onyx.InferenceSession(model.SerializeToString()).run(None, feeds)
        with native.disabled():
            want = onyx.InferenceSession(model.SerializeToString()).run(None, feeds)
        np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("with_beta,with_bias", [(True, True), (False, True), (True, False)])
def test_skip_layer_normalization_native(with_beta, with_bias):
    """SkipLayerNormalization's one pass a row (rows.c: the sum, then the norm): the bits of
    the sum then the native LayerNormalization, the sum the numpy kernels' bits and the rest
    theirs (ONYX_NATIVE off: BLAS row sums) and onnxruntime's within float tolerance."""
    import onyx
    from onyx.runtime import native

    hidden = 259  # (not a multiple of the kernel's 16 lanes)
    inputs = {
        "x": RNG.standard_normal((2, 37, hidden)).astype(np.float32),
        "skip": RNG.standard_normal((2, 37, hidden)).astype(np.float32),
        "gamma": RNG.standard_normal(hidden).astype(np.float32),
    }
    if with_beta or with_bias:
        inputs["beta" if with_beta else ""] = RNG.standard_normal(hidden).astype(np.float32)
    if with_bias:
        inputs["bias"] = RNG.standard_normal(hidden).astype(np.float32)
    constants = [k for k in ("gamma", "beta", "bias") if k in inputs]
    model, feeds = _model(
        "SkipLayerNormalization",
        inputs,
        out_dtypes=[np.float32] * 4,
        initializers=constants,
        epsilon=1e-5,
    )
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = onyx.InferenceSession(model.SerializeToString()).run(None, feeds)
    with native.disabled():
        want = onyx.InferenceSession(model.SerializeToString()).run(None, feeds)
    np.testing.assert_array_equal(got[3], want[3])
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-5)
    norm = native.layer_norm_f32(got[3], inputs["gamma"], inputs.get("beta"), 1e-5)
    if norm is not None:  # (with the library: the two passes' bits)
        for g, w in zip(got[:3], norm):
            np.testing.assert_array_equal(g, w)
    np.testing.assert_allclose(got[3], expected[3], rtol=1e-6, atol=1e-6)


def test_skip_layer_norm_native_set_up_is_per_signature():
    """The kept set-up of constant parameters (their addresses, the row count's thread split)
    serves only its own signature: a second shape, other parameter arrays and writeable
    (fed) parameters each give the bits of the path that checks everything on each call."""
    from onyx.runtime import native
    from onyx.runtime.native import norms

    if not native.available():
        pytest.skip(f"native: {native.status()}")

    def frozen(a):
        a.flags.writeable = False
        return a

    hidden = 35
    params = [frozen(RNG.standard_normal(hidden).astype(np.float32)) for _ in range(6)]
    calls = [
        ((1, 4), params[0], params[1], None),
        ((3, 9), params[0], params[1], None),  # (a new shape, the same parameters)
        ((3, 9), params[2], None, params[3]),  # (the same shape, other parameters)
        ((3, 9), params[4].copy(), params[5], None),  # (a writeable scale: not kept)
    ]
    for shape, scale, bias, add in calls:
        x, skip = (RNG.standard_normal(shape + (hidden,)).astype(np.float32) for _ in range(2))
        got = native.skip_layer_norm_f32(x, skip, scale, bias, add, 1e-5)
        want = norms.skip_layer_norm_checked(x, skip, scale, bias, add, 1e-5)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_bias_gelu_native_set_up_is_per_signature():
    """BiasGelu's kept set-up of a constant bias (its address, the thread split) serves only
    its own signature: a second shape, another bias and a writeable (fed) bias each give the
    bits of the add then erf_f32's GELU."""
    from onyx.runtime import native
    from onyx.runtime.kernels.contrib_norm import _GELU_SCALE, _P32, _Q32

    if not native.available():
        pytest.skip(f"native: {native.status()}")
    biases = [RNG.standard_normal(24).astype(np.float32) for _ in range(2)]
    for b in biases:
        b.flags.writeable = False
    calls = [
        ((1, 4), biases[0]),
        ((2, 7), biases[0]),
        ((2, 7), biases[1]),
        ((2, 7), biases[1].copy()),
    ]
    for shape, bias in calls:
        x = RNG.standard_normal(shape + (24,)).astype(np.float32) * 3
        got = native.bias_gelu_f32(x, bias, _GELU_SCALE, _P32, _Q32)
        want = x + bias
        assert native.erf_f32(want, want, _GELU_SCALE, True, _P32, _Q32)
        np.testing.assert_array_equal(got, want)
