"""Float products with a constant B on the native packed GEMM (gemm_f32.c) and its epilogue
(bias, ReLU): Gemm, FusedGemm, and the ai.onyx MatMulAdd / MatMulAddRelu that the optimizer
makes of MatMul + Add [+ Relu]; against numpy (native.disabled()) and onnxruntime. Under
ONYX_NATIVE=0 the same tests check the numpy paths."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native
from onyx.runtime.kernels.fused import fused_gemm, matmul_add, matmul_add_relu
from onyx.runtime.kernels.linalg import gemm

needs_native = pytest.mark.skipif(not native.sgemm_ok(), reason=f"native: {native.status()}")


def _const(a: np.ndarray) -> np.ndarray:
    """As a session's initializers are: read-only (the packed copies are kept per weight)."""
    a = np.array(a, np.float32)
    a.flags.writeable = False
    return a


class _CountNative:
    """Counts the native pool's jobs while active."""

    def __enter__(self):
        self.calls, self.lib = [], native.library()
        self.run = self.lib.onyx_parallel
        self.lib.onyx_parallel = lambda *a: self.calls.append(1) or self.run(*a)
        return self

    def __exit__(self, *exc):
        self.lib.onyx_parallel = self.run


def _both(fn, *args, **kw):
    """fn's result, and numpy's (the native library off); whether the pool ran."""
    if native.library() is None:
        y = fn(*args, **kw)
        return y, y, False
    with _CountNative() as c:
        got = fn(*args, **kw)
    with native.disabled():
        want = fn(*args, **kw)
    return got, want, bool(c.calls)


@pytest.mark.parametrize("rows", [3, 16, 37, 200])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape, beta", [(None, 1.0), ((45,), 1.0), ((1, 45), 0.5), ("MN", 1.0)])
def test_gemm_packed_matches_numpy(rows, trans_b, c_shape, beta):
    rng = np.random.default_rng(rows + trans_b)
    a = rng.standard_normal((rows, 70), dtype=np.float32)
    b = _const(rng.standard_normal((45, 70) if trans_b else (70, 45)))
    shape = (rows, 45) if c_shape == "MN" else c_shape
    c = None if shape is None else _const(rng.standard_normal(shape))
    got, want, ran = _both(gemm, a, b, c, beta=beta, transB=trans_b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got.dtype == np.float32 and got.shape == (rows, 45)
    # the packed GEMM takes 16+ rows and a bias of one value per column (else numpy's path)
    if native.sgemm_ok():
        assert ran == (rows >= native.SGEMM_ROWS and c_shape != "MN") or rows <= native.GEMV_ROWS


def test_gemm_alpha_and_transposed_a_keep_numpy_path():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 32), dtype=np.float32)
    b = _const(rng.standard_normal((32, 20)))
    c = _const(rng.standard_normal(20))
    for kw, x in (({"alpha": 2.0}, a), ({"transA": 1}, np.ascontiguousarray(a[:32, :32].T))):
        got, want, ran = _both(gemm, x, b[: x.shape[1]] if "transA" not in kw else b, c, **kw)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert not ran


@pytest.mark.parametrize("rows", [5, 64])
def test_fused_gemm_relu_epilogue(rows):
    rng = np.random.default_rng(rows)
    a = rng.standard_normal((rows, 48), dtype=np.float32)
    a[1, 3] = np.nan  # a NaN row stays NaN through the ReLU (as Relu)
    b = _const(rng.standard_normal((40, 48)))
    c = _const(rng.standard_normal(40))
    got, want, ran = _both(fused_gemm, a, b, c, activation="Relu", transB=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.isnan(got[1]).all() and (np.nan_to_num(got) >= 0).all()
    # (few rows: the native GEMV; many: the packed GEMM)
    assert ran == native.sgemm_ok()


@pytest.mark.parametrize("shape", [(2, 9, 64), (1, 3, 64), (64,), (5, 2, 8, 64)])
@pytest.mark.parametrize("fn", [matmul_add, matmul_add_relu])
def test_matmul_add_kernels(shape, fn):
    rng = np.random.default_rng(len(shape))
    a = rng.standard_normal(shape, dtype=np.float32)
    b = _const(rng.standard_normal((64, 100)))
    bias = _const(rng.standard_normal(100))
    got, want, ran = _both(fn, a, b, bias)
    expect = a @ b + bias
    if fn is matmul_add_relu:
        expect = np.maximum(expect, 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4)
    assert got.shape == shape[:-1] + (100,)
    rows = a.size // 64  # (many rows: the packed GEMM; a few: the GEMV)
    assert ran == (native.sgemm_ok() if rows >= native.SGEMM_ROWS else native.gemv_ok())


@pytest.mark.parametrize("shape", [(1, 1, 48), (48,), (3, 48), (2, 4, 48), (11, 48), (40, 48)])
def test_matmul_constant_b_native_paths(shape):
    """MatMul by a constant B: a few rows on the GEMV, many on the packed GEMM, between them
    (and a writeable B) numpy's."""
    from onyx.runtime.kernels.linalg import mat_mul

    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    b = _const(rng.standard_normal((48, 20)))
    got, want, ran = _both(mat_mul, a, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    rows = a.size // 48
    if rows >= native.SGEMM_ROWS:
        assert ran == native.sgemm_ok()
    else:
        assert ran == (rows <= native.GEMV_ROWS and native.gemv_ok())
    _, _, ran = _both(mat_mul, a, np.array(b))  # (writeable: not a constant, numpy's path)
    assert not ran


def _ffn_model(relu: bool, a_shape) -> bytes:
    """x @ W1 + b1 [-> Relu] -> @ W2 + b2, x of rank 3 (a transformer's feed-forward)."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((32, 96)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(96).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((96, 32)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["b1", "h"], ["hb"]),  # (bias first, as PyTorch exports it)
        helper.make_node("Relu" if relu else "Identity", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["o"]),
        helper.make_node("Add", ["o", "b2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "ffn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, a_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("batch", [1, 4])
def test_matmul_bias_fusion_matches_onnxruntime(relu, batch, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model = _ffn_model(relu, ["N", 12, 32])
    x = np.random.default_rng(batch).standard_normal((batch, 12, 32)).astype(np.float32)
    so = onyx.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    got = onyx.InferenceSession(model, so).run(None, {"x": x})[0]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    ops = [n.op_type for n in onyx.load(str(tmp_path / "opt.onnx")).graph]
    assert ops == (["MatMulAddRelu", "MatMulAdd"] if relu else ["MatMulAdd", "MatMulAdd"])
    # the saved model carries the fused ops' bodies: onnxruntime runs it as it is
    saved = ort.InferenceSession(str(tmp_path / "opt.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(saved.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-4)


def test_matmul_bias_fusion_leaves_2d_and_non_constant_products():
    """A 2-D product becomes a Gemm (MatMulAddFusion); a bias that is not a constant [N]
    stays an Add."""
    m2 = onyx.optimize(onyx.load(_ffn_model(True, [7, 32])))
    assert [n.op_type for n in m2.graph] == ["FusedGemm", "Gemm"]
    model = onyx.load(_ffn_model(False, ["N", 12, 32]))
    model.graph.initializers["b2"].const_value = onyx.ir.Tensor(np.ones((12, 32), np.float32))
    ops = [n.op_type for n in onyx.optimize(model).graph]
    assert ops == ["MatMulAdd", "MatMul", "Add"]


@needs_native
def test_constant_products_run_on_the_pool():
    """A model whose products have constant float32 weights runs them on onyx's pool, and BLAS
    gets one thread (its spinning threads would take the cores from the pool's)."""
    sess = onyx.InferenceSession(_ffn_model(True, ["N", 12, 32]))
    assert sess._pool_heavy


@needs_native
def test_products_too_large_to_pack_keep_blas(monkeypatch):
    """A weight the packed GEMM does not take (over PACKED_B_BYTES) stays BLAS work, so BLAS
    keeps its threads for it."""
    from onyx.runtime.kernels import linalg

    monkeypatch.setattr(linalg, "PACKED_B_BYTES", 1024)
    sess = onyx.InferenceSession(_ffn_model(True, ["N", 12, 32]))
    assert not sess._pool_heavy


@pytest.mark.parametrize("shape", [(2, 4, 32, 32), (3, 37), (5, 1), (1, 200)])
def test_softmax_rows_match_numpy(shape):
    from onyx.runtime.kernels.activation import _softmax

    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32) * 8
    with np.errstate(invalid="ignore"):
        if shape[-1] > 1:
            x.reshape(-1, shape[-1])[0, 0] = np.nan  # the row becomes NaN, as numpy's does
            x.reshape(-1, shape[-1])[-1, :] = -np.inf  # all masked: NaN too (x - max)
        want = np.exp(x - x.max(-1, keepdims=True))
        want /= want.sum(-1, keepdims=True)
    got = _softmax(x, -1)
    assert got.shape == x.shape and got.dtype == np.float32
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want), rtol=2e-6, atol=1e-7)


def test_softmax_non_finite_rows_match_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    node = helper.make_node("Softmax", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 20])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(0).standard_normal((4, 20)).astype(np.float32)
    x[0, 3], x[1, :], x[2, 7] = np.nan, -np.inf, np.inf
    got = onyx.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[3], want[3], rtol=1e-5)


@needs_native
def test_packed_gemm_bias_of_each_call():
    """The GEMM keeps a constant bias's address between calls: another bias, or a writeable
    one changed in place, is still read as it is at each call."""
    rng = np.random.default_rng(5)
    b = _const(rng.standard_normal((24, 40)))
    a = rng.standard_normal((20, 24)).astype(np.float32)
    gemm = native.PackedGemm(b)
    c1, c2 = _const(rng.standard_normal(40)), _const(rng.standard_normal(40))
    for c in (c1, c2, c1):
        np.testing.assert_allclose(gemm(a, c), a @ b + c, rtol=1e-5, atol=1e-5)
    w = rng.standard_normal(40).astype(np.float32)
    gemm(a, w)
    w += 1
    np.testing.assert_allclose(gemm(a, w), a @ b + w, rtol=1e-5, atol=1e-5)
    strided = _const(rng.standard_normal(80))[::2]
    np.testing.assert_allclose(gemm(a, strided), a @ b + strided, rtol=1e-5, atol=1e-5)
