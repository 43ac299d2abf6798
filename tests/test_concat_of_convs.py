"""Concat of conv outputs (SqueezeNet's fire modules, Inception's blocks, DenseNet's growing
concats) with random weights, against onnxruntime: onnx's light models carry constant weights,
so a conv that put its channels in the wrong slice of the Concat would pass there unseen. Run
on the native kernels, on the numpy kernels, and in a process limited to AVX2. The shapes are
small editions of the light models' (13x13-28x28 images, 8-48 channels)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native

_RNG = np.random.default_rng(23)


class _Graph:
    """A graph under construction: nodes, weights and outputs with fresh names."""

    def __init__(self, channels: int, size: int):
        self.nodes, self.weights, self.outputs, self.count = [], [], [], 0
        self.channels = {"x": channels}
        self.input = helper.make_tensor_value_info(
            "x", TensorProto.FLOAT, ["N", channels, size, size]
        )

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def conv(self, x: str, m: int, k: int, stride: int = 1, relu: bool = True) -> str:
        c = self.channels[x]
        w, b, y = self.name("w"), self.name("b"), self.name("conv")
        scale = 1 / np.sqrt(c * k * k)
        self.weights += [
            numpy_helper.from_array(_RNG.normal(0, scale, (m, c, k, k)).astype(np.float32), w),
            numpy_helper.from_array(_RNG.normal(0, 0.1, m).astype(np.float32), b),
        ]
        attrs = dict(kernel_shape=[k, k], strides=[stride] * 2, pads=[k // 2] * 4)
        self.nodes.append(helper.make_node("Conv", [x, w, b], [y], **attrs))
        self.channels[y] = m
        if not relu:
            return y
        r = self.name("relu")
        self.nodes.append(helper.make_node("Relu", [y], [r]))
        self.channels[r] = m
        return r

    def pool(self, op: str, x: str, **attrs) -> str:
        y = self.name(op.lower())
        self.nodes.append(helper.make_node(op, [x], [y], **attrs))
        self.channels[y] = self.channels[x]
        return y

    def concat(self, *xs: str) -> str:
        y = self.name("concat")
        self.nodes.append(helper.make_node("Concat", list(xs), [y], axis=1))
        self.channels[y] = sum(self.channels[x] for x in xs)
        return y

    def model(self, *outputs: str, opset: int = 13) -> bytes:
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
        graph = helper.make_graph(self.nodes, "g", [self.input], outs, self.weights)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        return model.SerializeToString()


def fire_modules() -> bytes:
    """Two SqueezeNet fire modules (squeeze 1x1, expand 1x1 and 3x3, concat) and the
    ceil-mode MaxPool between them."""
    g = _Graph(24, 27)
    x = "x"
    for squeeze, expand in ((8, 16), (12, 24)):
        s = g.conv(x, squeeze, 1)
        x = g.concat(g.conv(s, expand, 1), g.conv(s, expand, 3))
        if squeeze == 8:
            x = g.pool("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    return g.model(x)


def inception_block() -> bytes:
    """An Inception v2 block (1x1; 1x1 then 3x3; 1x1 then two 3x3; average pool then 1x1)
    and a reduction block whose MaxPool branch (pads at the end only) joins the stride-2 convs."""
    g = _Graph(32, 28)
    a = g.conv("x", 16, 1)
    b = g.conv(g.conv("x", 12, 1), 16, 3)
    c = g.conv(g.conv(g.conv("x", 8, 1), 12, 3), 12, 3)
    pooled = g.pool("AveragePool", "x", kernel_shape=[3, 3], pads=[1] * 4)
    block = g.concat(a, b, c, g.conv(pooled, 8, 1))
    down = g.conv(g.conv(block, 16, 1), 24, 3, stride=2)
    deep = g.conv(g.conv(g.conv(block, 16, 1), 16, 3), 16, 3, stride=2)
    skip = g.pool("MaxPool", block, kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])
    return g.model(g.concat(down, deep, skip))


def dense_block() -> bytes:
    """A DenseNet block: each layer's concat takes the previous concat and a new conv, so every
    concat but the last is also read elsewhere; the first one and a conv feeding a concat are
    graph outputs as well."""
    g = _Graph(16, 14)
    x, outputs = "x", []
    for _ in range(4):
        new = g.conv(g.conv(x, 32, 1), 8, 3, relu=False)
        x = g.concat(x, new)
        outputs = outputs or [x, new]
    return g.model(x, *outputs)


def shared_input() -> bytes:
    """A concat that takes one conv's output twice and also feeds it to another conv."""
    g = _Graph(8, 13)
    a = g.conv("x", 8, 3)
    both = g.concat(a, g.conv("x", 8, 1), a)
    return g.model(g.conv(both, 8, 3), a)


MODELS = {
    "fire": fire_modules,
    "inception": inception_block,
    "dense": dense_block,
    "shared": shared_input,
}


def _feeds(batch: int, model: bytes) -> dict:
    shape = ort.InferenceSession(model).get_inputs()[0].shape
    size = [batch] + list(shape[1:])
    return {"x": np.random.default_rng(batch).standard_normal(size).astype(np.float32)}


def _expected(model: bytes, feeds: dict) -> list:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


def _assert_close(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("numpy_only", [False, True], ids=["native", "numpy"])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_concat_of_convs_matches_onnxruntime(name, batch, numpy_only, monkeypatch):
    if numpy_only:
        # (every family joined first: one first imported while the library is hidden would
        # stay unbound once it is back, failing the tests that run after this one)
        assert native.FAMILIES
        monkeypatch.setattr(native._core, "lib", None)  # noqa: SLF001 (the numpy kernels)
    model = MODELS[name]()
    feeds = _feeds(batch, model)
    got = onyx.InferenceSession(model).run(None, feeds)
    _assert_close(got, _expected(model, feeds))
    again = onyx.InferenceSession(model).run(None, feeds)  # (a second run: reused buffers)
    for g, a in zip(got, again):
        np.testing.assert_array_equal(g, a)


@pytest.mark.parametrize("threads", [1, 2])
def test_concat_of_convs_under_threads(threads):
    model = inception_block()
    feeds = _feeds(2, model)
    options = onyx.SessionOptions()
    options.intra_op_num_threads = threads
    _assert_close(onyx.InferenceSession(model, options).run(None, feeds), _expected(model, feeds))


def test_concat_of_convs_on_avx2(tmp_path):
    """The same graphs in a process whose native kernels stop at AVX2."""
    for name, make in MODELS.items():
        (tmp_path / f"{name}.onnx").write_bytes(make())
    code = (
        "import sys, numpy as np, onyx\n"
        "for path in sys.argv[1:]:\n"
        "    s = onyx.InferenceSession(path)\n"
        "    x = np.load(path + '.npy')\n"
        "    for i, y in enumerate(s.run(None, {'x': x})):\n"
        "        np.save(f'{path}.{i}.out.npy', y)\n"
    )
    paths = []
    for name in MODELS:
        path = str(tmp_path / f"{name}.onnx")
        model = open(path, "rb").read()
        np.save(path + ".npy", _feeds(2, model)["x"])
        paths.append(path)
    env = {**os.environ, "ONYX_NATIVE_ISA": "avx2"}
    done = subprocess.run([sys.executable, "-c", code, *paths], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    for path in paths:
        model = open(path, "rb").read()
        want = _expected(model, {"x": np.load(path + ".npy")})
        got = [np.load(f"{path}.{i}.out.npy") for i in range(len(want))]
        _assert_close(got, want)
