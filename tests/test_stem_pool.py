"""A 2-D stem (a FusedConv + Relu of few input values per output, SqueezeNet's first conv) and
the MaxPool after it: ConvMaxPoolFusion makes them one ai.onyx FusedConvMaxPool node, whose
native kernel (depthwise.c's stem_pool) pools bands of the conv's rows as it computes them;
the unfused pair's bits, natively and on the numpy path (ONYX_NATIVE=0)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native


def _model(conv: dict, pool: dict, out_channels: int = 20, relu: bool = True,
           size: int = 45) -> bytes:  # fmt: skip
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(
            rng.standard_normal((out_channels, 3, 3, 3)).astype(np.float32), "w"
        ),
        numpy_helper.from_array(rng.standard_normal(out_channels).astype(np.float32), "b"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], **conv)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
    nodes.append(helper.make_node("MaxPool", ["r" if relu else "c"], ["y"], **pool))
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "g", [info("x", TensorProto.FLOAT, ["N", 3, size, size + 3])],
        [info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


CONVS = [dict(strides=[2, 2]), dict(pads=[1, 1, 1, 1]), dict(strides=[2, 2], pads=[1, 0, 1, 0])]
POOLS = [
    dict(kernel_shape=[3, 3], strides=[2, 2]),  # (SqueezeNet's)
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),  # (ResNet's)
    dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[5, 3], strides=[3, 2], pads=[2, 1, 0, 1], ceil_mode=1),
]


def _ops(sess) -> list[str]:
    return [s.node.op_type for s in sess.plan.default_schedule]


def _runs(model: bytes, threads: int) -> tuple:
    opts = onyx.SessionOptions()
    opts.intra_op_num_threads = threads
    fast = onyx.InferenceSession(model, opts)
    plain = onyx.InferenceSession(model, opts, disabled_optimizers=["ConvMaxPoolFusion"])
    return fast, plain


@pytest.mark.parametrize("conv", CONVS)
@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("threads", [1, 2])
def test_fused_stem_pool_same_bits(conv, pool, threads):
    """The fused node's output is the pair's, bit for bit (batches of 1 and 2, channels not a
    multiple of 16), and onnxruntime's within float tolerance."""
    model = _model(conv, pool)
    fast, plain = _runs(model, threads)
    assert _ops(fast) == ["FusedConvMaxPool"]
    assert _ops(plain) == ["FusedConv", "MaxPool"]
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for n in (1, 2):
        x = np.random.default_rng(n).standard_normal((n, 3, 45, 48)).astype(np.float32)
        got = fast.run(None, {"x": x})[0]
        want = plain.run(None, {"x": x})[0]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
        np.testing.assert_allclose(got, oracle.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_the_native_stem_pool_runs(monkeypatch):
    """Where the native library is on, the fused node runs as one StemPool call (bound to
    the step); SqueezeNet's geometry at 224 gives the pair's bits."""
    if not native.available() or not native.avx512():
        pytest.skip("the native AVX-512 kernels are off")
    from onyx.runtime.native import depthwise

    calls = []
    run = depthwise.StemPool.__call__

    def counted(self, *a):
        calls.append(1)
        return run(self, *a)

    monkeypatch.setattr(depthwise.StemPool, "__call__", counted)
    model = _model(CONVS[0], POOLS[0], out_channels=64, size=224)
    fast, plain = _runs(model, 2)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 227)).astype(np.float32)
    got = fast.run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, plain.run(None, {"x": x})[0])
    assert calls


def test_numpy_path(monkeypatch):
    """ONYX_NATIVE=0: the fused node's kernel is the pair's kernels, the same bits."""
    monkeypatch.setenv("ONYX_NATIVE", "0")
    model = _model(CONVS[2], POOLS[2])
    fast, plain = _runs(model, 1)
    assert _ops(fast) == ["FusedConvMaxPool"]
    x = np.random.default_rng(5).standard_normal((2, 3, 45, 48)).astype(np.float32)
    np.testing.assert_array_equal(fast.run(None, {"x": x})[0], plain.run(None, {"x": x})[0])


@pytest.mark.parametrize(
    "kw",
    [
        {"relu": False},  # (no activation: the native stem pools only a Relu's output)
        {"pool": dict(kernel_shape=[2, 2], strides=[2, 2])},  # (small_cnn.py's 2x2 pool)
        {"out_channels": 4},  # (fewer than 8 outputs: not a stem kernel's)
    ],
)
def test_not_a_pooled_stem(kw):
    args = {"conv": CONVS[0], "pool": POOLS[0], **kw}
    fast = onyx.InferenceSession(_model(**args))
    assert "MaxPool" in _ops(fast)


def test_stems_sharing_weights_keep_their_own_geometry():
    """Two stems of one weight whose convs differ (pads 0 and 1) but whose pools come out
    the same size: each fused node runs its own conv (the set-up kept per weight was keyed
    by the input and pool alone, and the second node ran the first one's conv)."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"),
    ]
    nodes = []
    for i, pads in enumerate(([0, 0, 0, 0], [1, 1, 1, 1])):  # (conv 17x17 and 18x18: pool 8x8)
        nodes += [
            helper.make_node(
                "Conv", ["x", "w", "b"], [f"c{i}"], kernel_shape=[3, 3], strides=[2, 2], pads=pads
            ),  # fmt: skip
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
            helper.make_node("MaxPool", [f"r{i}"], [f"y{i}"], kernel_shape=[3, 3], strides=[2, 2]),
        ]
    info = helper.make_tensor_value_info
    outputs = [info(f"y{i}", TensorProto.FLOAT, None) for i in range(2)]
    graph = helper.make_graph(
        nodes, "g", [info("x", TensorProto.FLOAT, [1, 3, 35, 35])], outputs, inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    data = model.SerializeToString()
    fast, plain = _runs(data, 1)
    assert _ops(fast) == ["FusedConvMaxPool"] * 2
    x = rng.standard_normal((1, 3, 35, 35)).astype(np.float32)
    for _ in range(2):  # (the second run: the bound steps)
        for got, want in zip(fast.run(None, {"x": x}), plain.run(None, {"x": x})):
            np.testing.assert_array_equal(got, want)
