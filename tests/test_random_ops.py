"""Random operators: their outputs cannot be compared with fixed expected data (onnx's node-suite
cases for Bernoulli are left out of the backend suite for that reason), so they are checked by
their statistics, their types and shapes, and the seed's reproducibility."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onyx

N = 200_000


def run(op: str, feeds: dict, out_type=TensorProto.FLOAT, opset: int = 15, **attrs):
    inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for name, v in feeds.items()
    ]
    node = helper.make_node(op, list(feeds), ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info("y", out_type, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return onyx.InferenceSession(model.SerializeToString()).run(None, feeds)[0]


def assert_mean(sample: np.ndarray, mean: float, std: float):
    # 6 standard errors: a false alarm about once in 500 million runs
    assert abs(sample.mean() - mean) < 6 * std / np.sqrt(sample.size), (sample.mean(), mean)


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.93, 1.0])
def test_bernoulli_draws_ones_with_probability_p(p):
    x = np.full(N, p, np.float32)
    y = run("Bernoulli", {"x": x})
    assert y.dtype == np.float32 and y.shape == x.shape
    assert set(np.unique(y)) <= {0.0, 1.0}
    assert_mean(y, p, np.sqrt(p * (1 - p)) or 1e-9)


def test_bernoulli_dtype_attribute_and_seed():
    x = np.random.default_rng(0).uniform(0, 1, 1000)
    a = run("Bernoulli", {"x": x}, TensorProto.INT32, dtype=TensorProto.INT32, seed=3.0)
    b = run("Bernoulli", {"x": x}, TensorProto.INT32, dtype=TensorProto.INT32, seed=3.0)
    c = run("Bernoulli", {"x": x}, TensorProto.INT32, dtype=TensorProto.INT32, seed=4.0)
    assert a.dtype == np.int32
    np.testing.assert_array_equal(a, b)  # the same seed, the same draws
    assert (a != c).any()
    # draws follow the per-element probability
    assert_mean(a - x, 0.0, 0.5)


def test_unseeded_draws_differ_between_runs():
    x = np.full(1000, 0.5, np.float64)
    assert (
        run("Bernoulli", {"x": x}, TensorProto.DOUBLE)
        != run("Bernoulli", {"x": x}, TensorProto.DOUBLE)
    ).any()


def test_random_uniform_and_normal():
    u = run("RandomUniform", {}, shape=[N], low=-2.0, high=3.0, seed=1.0)
    assert u.dtype == np.float32 and u.shape == (N,)
    assert u.min() >= -2.0 and u.max() < 3.0
    assert_mean(u, 0.5, 5 / np.sqrt(12))
    n = run("RandomNormal", {}, TensorProto.DOUBLE, shape=[N], mean=1.5, scale=2.0,
            dtype=TensorProto.DOUBLE)  # fmt: skip
    assert n.dtype == np.float64
    assert_mean(n, 1.5, 2.0)
    assert abs(n.std() - 2.0) < 0.05


def test_like_forms_take_shape_and_type_from_input():
    x = np.zeros((3, 4), np.float64)
    u = run("RandomUniformLike", {"x": x}, TensorProto.DOUBLE, seed=2.0)
    n = run("RandomNormalLike", {"x": x}, TensorProto.FLOAT, dtype=TensorProto.FLOAT, seed=2.0)
    assert u.shape == (3, 4) and u.dtype == np.float64
    assert n.shape == (3, 4) and n.dtype == np.float32


def test_multinomial_frequencies_follow_the_softmax_of_the_logits():
    logits = np.log(np.array([[0.2, 0.5, 0.3], [0.9, 0.05, 0.05]], np.float32))
    y = run("Multinomial", {"x": logits}, TensorProto.INT32, opset=7, sample_size=N, seed=5.0)
    assert y.shape == (2, N) and y.dtype == np.int32
    for row, probs in zip(y, np.exp(logits)):
        freq = np.bincount(row, minlength=3) / N
        np.testing.assert_allclose(freq, probs, atol=6 * 0.5 / np.sqrt(N))
