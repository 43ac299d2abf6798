"""Inference BatchNormalization as one per-channel affine map (kernels/batchnorm_fast.py):
onnxruntime's bits, the native pass and numpy's alike, the parameters' form made once."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native
from onyx.runtime.kernels import batchnorm_fast
from onyx.runtime.kernels import derived as derived_mod
from onyx.runtime.kernels.batch_norm import batch_normalization, batch_normalization_7

F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE
SHAPES = [(2, 5, 7, 9), (1, 64, 28, 28), (3, 4), (2, 3, 1000)]


def _params(c: int, dtype, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    scale, bias, mean = (rng.standard_normal(c).astype(dtype) for _ in range(3))
    return [scale, bias, mean, rng.random(c).astype(dtype)]


def _model(shape, elem=F32, biases: int = 1) -> bytes:
    """``biases`` BatchNormalization nodes over x sharing scale, mean and var (one bias each)."""
    dtype = np.float32 if elem == F32 else np.float64
    scale, bias, mean, var = _params(shape[1], dtype)
    inits = [numpy_helper.from_array(v, n) for v, n in ((scale, "s"), (mean, "m"), (var, "v"))]
    nodes, outputs = [], []
    for i in range(biases):
        inits.append(numpy_helper.from_array(bias + dtype(i), f"b{i}"))
        nodes.append(
            helper.make_node("BatchNormalization", ["x", "s", f"b{i}", "m", "v"], [f"y{i}"])
        )
        outputs.append(helper.make_tensor_value_info(f"y{i}", elem, shape))
    x = helper.make_tensor_value_info("x", elem, shape)
    graph = helper.make_graph(nodes, "bn", [x], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]).SerializeToString()


def _feed(shape, dtype) -> np.ndarray:
    x = (np.random.default_rng(1).standard_normal(shape) * 3).astype(dtype)
    x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    return x


@pytest.mark.parametrize("numpy_only", [False, True])
@pytest.mark.parametrize("elem", [F32, F64])
@pytest.mark.parametrize("shape", SHAPES)
def test_bits_of_onnxruntime(shape, elem, numpy_only, monkeypatch):
    """onnxruntime computes x * (scale / sqrt(var + eps)) + (bias - mean * that): so do we."""
    if numpy_only:
        monkeypatch.setattr(native._core, "lib", None)  # noqa: SLF001 (numpy)
    model = _model(shape, elem)
    x = _feed(shape, np.float32 if elem == F32 else np.float64)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = onyx.InferenceSession(model).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])


def test_parameter_form_is_made_once_per_parameter_set(monkeypatch):
    """Two nodes share scale, mean and var and differ in bias: two forms, each made on the
    first run only, each node's own."""
    made, make = [], batchnorm_fast._make_affine  # noqa: SLF001 (counted)
    monkeypatch.setattr(batchnorm_fast, "_make_affine", lambda *a: made.append(1) or make(*a))
    shape = (1, 8, 5, 5)
    model = _model(shape, biases=2)
    x = _feed(shape, np.float32)
    session = onyx.InferenceSession(model)
    first = session.run(None, {"x": x})
    second = session.run(None, {"x": x})
    assert len(made) == 2
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for a, b, w in zip(first, second, want):
        np.testing.assert_array_equal(a, w)
        np.testing.assert_array_equal(b, w)
    assert not np.array_equal(first[0], first[1])


def _reference(x, scale, bias, mean, var, eps, spatial_shape):
    x = x.astype(np.float64)
    p = [v.astype(np.float64).reshape(spatial_shape) for v in (scale, bias, mean, var)]
    return (x - p[2]) / np.sqrt(p[3] + eps) * p[0] + p[1]


def test_other_forms_take_the_general_kernel():
    """float16, parameters of another type and spatial=0's per-feature parameters are not
    this path's: the general kernel answers them, within rounding of the formula."""
    x = _feed((2, 3, 4), np.float32)[..., ::-1]  # (a strided view: numpy's pass)
    p = _params(3, np.float32)
    got = batch_normalization(x, *p)
    np.testing.assert_allclose(got, _reference(x, *p, 1e-5, (1, 3, 1)), rtol=1e-5, atol=1e-5)
    h = x.astype(np.float16)
    assert batchnorm_fast.inference(h, *p, 1e-5) is None
    got = batch_normalization(h, *p)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, _reference(h, *p, 1e-5, (1, 3, 1)), rtol=3e-3, atol=3e-3)
    p16 = [v.astype(np.float16) for v in p]
    assert batchnorm_fast.inference(x, *p16, 1e-5) is None
    feature = [v.reshape(1, 4).repeat(3, 0) for v in _params(4, np.float32)]  # (C, D)
    assert batchnorm_fast.inference(x, *feature, 1e-5) is None
    ctx = type("Ctx", (), {"n_outputs": 1})()
    got = batch_normalization_7(ctx, x, *feature, spatial=0)
    want = _reference(x, *feature, 1e-5, (1, 3, 4))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_bias_that_is_the_scale_is_not_kept():
    """The kept form holds bias, mean and var: one that is the scale itself would keep the
    scale alive, and with it the form, for ever."""
    scale, _, mean, var = _params(4, np.float32)
    for v in (scale, mean, var):
        v.flags.writeable = False
    x = _feed((2, 4, 3), np.float32)
    before = derived_mod.entries()[0]
    got = batch_normalization(x, scale, scale, mean, var)
    assert derived_mod.entries()[0] == before
    want = _reference(x, scale, scale, mean, var, 1e-5, (1, 4, 1))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    batch_normalization(x, scale, mean, mean, var)
    assert derived_mod.entries()[0] == before + 1
