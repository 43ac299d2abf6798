"""MaxPool and AveragePool nodes in a session bind (registry.binds): the geometry is worked out
and the native task (native.bound_pool2d) made once per input shape, each run one native call;
a MaxPool whose Indices are wanted, or a shape the native pool does not take, runs the kernel
as written. The bits are the unbound kernel's and the numpy path's, for every geometry."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native
from onyx.runtime.kernels import pool

_ELEM = {np.float32: TensorProto.FLOAT, np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}


def _model(op: str, shape, dtype, indices: bool = False, opset: int = 19, **attrs) -> bytes:
    outs = ["y", "i"] if indices else ["y"]
    node = helper.make_node(op, ["x"], outs, **attrs)
    elem = _ELEM[dtype]
    out_info = [helper.make_tensor_value_info("y", elem, None)]
    if indices:
        out_info.append(helper.make_tensor_value_info("i", TensorProto.INT64, None))
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", elem, list(shape))], out_info
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    return model.SerializeToString()


@pytest.fixture
def setups(monkeypatch):
    """The bound pooling set-ups made from now on (input shape, dtype; not the declined)."""
    made = []
    real = native.bound_pool2d

    def counted(shape, dtype, *args):
        call = real(shape, dtype, *args)
        if call is not None:
            made.append((tuple(shape), np.dtype(dtype)))
        return call

    monkeypatch.setattr(native, "bound_pool2d", counted)
    return made


def _data(shape, dtype, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == np.float32:
        x = rng.standard_normal(shape).astype(np.float32)
        x.reshape(-1)[::7] = 0.0  # (ties, and zeros of both signs)
        x.reshape(-1)[::11] = -0.0
        return x
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


_MAX = [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 2], dilations=[2, 1]),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(kernel_shape=[2, 2], strides=[2, 2]),  # (small_cnn's 2x2 path: not bound_pool2d)
]
_AVERAGE = [
    dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, pads=[0, 0, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, count_include_pad=1, pads=[1, 1, 1, 1]),
    dict(kernel_shape=[2, 2], strides=[3, 3], dilations=[2, 2], pads=[1, 0, 1, 0]),
]


def _runs(data: bytes, x: np.ndarray, times: int = 3) -> list[np.ndarray]:
    sess = onyx.InferenceSession(data)
    return [sess.run(None, {"x": x})[0] for _ in range(times)]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("shape", [(1, 16, 7, 7), (2, 5, 14, 13)])
@pytest.mark.parametrize("attrs", _MAX)
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint8])
def test_max_pool_bound_bits(setups, attrs, shape, dtype):
    x = _data(shape, dtype)
    runs = _runs(_model("MaxPool", shape, dtype, opset=12, **attrs), x)
    unbound = pool.max_pool_values(
        x, attrs["kernel_shape"], attrs.get("auto_pad", "NOTSET"), attrs.get("pads"),
        attrs.get("strides"), attrs.get("dilations"), attrs.get("ceil_mode", 0),
    )  # fmt: skip
    for y in runs:
        assert _same_bits(y, unbound)
    # (the numpy path: equal values; the sign of a tie of zeros is either's)
    p = pool._pool_of(shape, attrs["kernel_shape"], attrs.get("auto_pad", "NOTSET"),
                      attrs.get("pads"), attrs.get("strides"), attrs.get("dilations"),
                      attrs.get("ceil_mode", 0), "MaxPool")  # fmt: skip
    np.testing.assert_array_equal(
        runs[0], pool._window_max(x, p.pads, p.out, p.kernel, p.strides, p.dilations)
    )
    two = pool._small_cnn.max_pool_2x2(x, [2, 2], "NOTSET", None, attrs["strides"], None, 0)
    two = attrs["kernel_shape"] == [2, 2] and two is not None
    tiled = dtype != np.float32 and pool._tiled_max(
        x, attrs["kernel_shape"], "NOTSET", attrs.get("pads"), attrs.get("strides"), None
    ) is not None  # fmt: skip
    dilated = dtype != np.float32 and "dilations" in attrs
    if native.available() and not (two or tiled or dilated):
        assert setups == [(shape, np.dtype(dtype))]  # once, at the first run
    else:
        assert setups == []


@pytest.mark.parametrize("shape", [(1, 16, 7, 7), (2, 5, 14, 13)])
@pytest.mark.parametrize("attrs", _AVERAGE)
@pytest.mark.parametrize("opset", [11, 19])
def test_average_pool_bound_bits(setups, attrs, shape, opset):
    x = _data(shape, np.float32)
    runs = _runs(_model("AveragePool", shape, np.float32, opset=opset, **attrs), x)
    fn = pool.average_pool if opset >= 19 else pool.average_pool_1
    unbound = fn(x, **attrs)
    for y in runs:
        assert _same_bits(y, unbound)
    # the numpy path's bits (native off for the call)
    geometry = [attrs["kernel_shape"], attrs.get("auto_pad", "NOTSET"), attrs.get("pads"),
                attrs.get("strides"), attrs.get("dilations"), attrs.get("ceil_mode", 0)]  # fmt: skip
    last = (attrs.get("strides") or [1])[-1]
    p = pool._pool_of(shape, *geometry, "AveragePool")
    by_columns = opset < 19 and last <= 2
    total = p.sum(p.pad(x, 0), by_columns)
    total += 0
    total /= p.count(x, bool(attrs.get("count_include_pad", 0))).astype(np.float32)
    assert _same_bits(runs[0], total.astype(np.float32))
    assert setups == ([(shape, np.dtype(np.float32))] if native.available() else [])


def test_max_pool_with_indices_is_not_bound(setups):
    shape = (1, 4, 9, 9)
    x = _data(shape, np.float32)
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    sess = onyx.InferenceSession(_model("MaxPool", shape, np.float32, indices=True, **attrs))
    for _ in range(2):
        y, i = sess.run(None, {"x": x})
        assert _same_bits(y, pool.max_pool_values(x, [3, 3], "NOTSET", [1] * 4, [2, 2], None, 0))
        assert i.dtype == np.int64 and i.shape == y.shape
    assert setups == []


def test_bound_pool_new_shape_and_layout(setups):
    """A new input shape sets up again; a non-contiguous feed gets the same bits."""
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    data = _model("MaxPool", ["n", 6, "h", "w"], np.float32, **attrs)
    sess = onyx.InferenceSession(data)
    for shape in [(1, 6, 10, 10), (2, 6, 7, 9), (1, 6, 10, 10)]:
        x = _data(shape, np.float32)
        y = sess.run(None, {"x": x})[0]
        assert _same_bits(y, pool.max_pool_values(x, [3, 3], "NOTSET", [1] * 4, [2, 2], None, 0))
        wide = np.zeros(shape[:3] + (2 * shape[3],), np.float32)
        wide[..., ::2] = x
        assert _same_bits(sess.run(None, {"x": wide[..., ::2]})[0], y)
    if native.available():
        assert setups == [((1, 6, 10, 10), np.dtype(np.float32)), ((2, 6, 7, 9), np.float32)]


def test_bound_pool2d_refuses_what_it_does_not_run():
    if not native.available():
        pytest.skip("no native library")
    geometry = ((3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (4, 4))
    assert native.bound_pool2d((1, 2, 4, 4), np.float64, *geometry) is None
    assert native.bound_pool2d((1, 2, 4, 4), np.int8, *geometry, (True, False, False)) is None
    assert native.bound_pool2d((0, 2, 4, 4), np.float32, *geometry) is None
    call = native.bound_pool2d((1, 2, 4, 4), np.float32, *geometry)
    with pytest.raises(TypeError):
        call(np.zeros((1, 2, 4, 4), np.float64))


def test_fused_conv_max_pool_binds_its_pool(setups):
    """A 2-D Conv + Relu + MaxPool the stem kernel does not take (a ResNet's 3x3 stride-1
    pool) becomes one FusedConvMaxPool step whose conv and pool are set up once; its bits are
    the three nodes' run one by one."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], pads=[1] * 4),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    data = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9
    ).SerializeToString()
    plain = onyx.SessionOptions()
    plain.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = onyx.InferenceSession(data)
    ops = [s.node.op_type for s in sess.plan.default_schedule]
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    got = [sess.run(None, {"x": x})[0] for _ in range(3)]
    made = list(setups)
    want = onyx.InferenceSession(data, plain).run(None, {"x": x})[0]
    assert all(_same_bits(y, want) for y in got)
    if native.avx512() and ops == ["FusedConvMaxPool"]:  # (where the FusedConv binds)
        assert made == [((1, 16, 32, 32), np.dtype(np.float32))]
