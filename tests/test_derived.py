"""Weight forms derived once per session (kernels/derived.py): cached for constants only."""

from __future__ import annotations

import gc

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.ir import DataType, Tensor
from onyx.runtime.kernels import derived as derived_mod
from onyx.runtime.kernels.derived import derived, from_attributes, value_key
from onyx.runtime.values import ALIGN_MIN_BYTES, ALIGNMENT, tensor_value

U8, I8 = TensorProto.UINT8, TensorProto.INT8


def test_read_only_array_is_computed_once_and_dropped_with_it():
    calls = []
    w = np.arange(6.0)
    w.flags.writeable = False
    for _ in range(3):
        assert derived(w, "k", lambda w=w: calls.append(1) or w * 2)[5] == 10
    assert len(calls) == 1
    derived(w, "other key", lambda: calls.append(1))
    assert len(calls) == 2
    gc.collect()  # (earlier tests' garbage first: only w's entries may go below)
    n = derived_mod.entries()[0]
    del w
    gc.collect()
    assert derived_mod.entries()[0] == n - 2


def test_writeable_array_is_never_cached():
    calls = []
    w = np.arange(3.0)
    for i in range(3):
        w[0] = i
        assert derived(w, "k", lambda: calls.append(1) or w.copy())[0] == i
    assert len(calls) == 3


def test_value_key_tells_values_and_types_apart():
    assert value_key(np.uint8(3)) == value_key(np.array(3, np.uint8))
    assert value_key(np.uint8(3)) != value_key(np.int8(3))
    assert value_key(np.array([1, 2])) != value_key(np.array([[1, 2]]))
    assert value_key(None) is None


def _qlinear_conv_model(weight_as_input: bool) -> bytes:
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (8, 4, 3, 3), dtype=np.int8)
    inits = [
        numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
        numpy_helper.from_array(np.array(128, np.uint8), "xz"),
        numpy_helper.from_array(np.full(8, 0.01, np.float32), "ws"),
        numpy_helper.from_array(np.zeros(8, np.int8), "wz"),
        numpy_helper.from_array(np.array(0.05, np.float32), "ys"),
        numpy_helper.from_array(np.array(120, np.uint8), "yz"),
    ]
    inputs = [helper.make_tensor_value_info("x", U8, [1, 4, 10, 10])]
    if weight_as_input:
        inputs.append(helper.make_tensor_value_info("w", I8, [8, 4, 3, 3]))
    else:
        inits.append(numpy_helper.from_array(w, "w"))
    node = helper.make_node(
        "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1, 1, 1, 1]
    )
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info("y", U8, None)], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("weight_as_input", [False, True])
def test_qlinear_conv_matches_onnxruntime_run_after_run(weight_as_input):
    """A weight fed as an input and changed in place between runs is never served stale."""
    model = _qlinear_conv_model(weight_as_input)
    sess = onyx.InferenceSession(model)
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (1, 4, 10, 10), dtype=np.uint8)
    w = rng.integers(-127, 128, (8, 4, 3, 3), dtype=np.int8)
    # Read-only views of arrays the caller keeps changing: the same objects every run.
    x_ro, w_ro = x.view(), w.view()
    x_ro.flags.writeable = w_ro.flags.writeable = False
    feeds = {"x": x_ro, "w": w_ro} if weight_as_input else {"x": x_ro}
    outputs = []
    for _ in range(3):
        got = sess.run(None, feeds)[0]
        np.testing.assert_array_equal(got, oracle.run(None, feeds)[0])
        outputs.append(got)
        x += 7  # the same array objects, new contents
        w //= 2
    assert not np.array_equal(outputs[0], outputs[1])


def test_matmul_integer_with_constant_weight_matches_onnxruntime_run_after_run():
    rng = np.random.default_rng(2)
    b = rng.integers(0, 256, (300, 16), dtype=np.uint8)
    inits = [
        numpy_helper.from_array(b, "b"),
        numpy_helper.from_array(np.array(7, np.uint8), "bz"),
    ]
    node = helper.make_node("MatMulInteger", ["a", "b", "", "bz"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("a", U8, [2, 300])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    data = model.SerializeToString()
    sess = onyx.InferenceSession(data)
    oracle = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for seed in range(3):
        a = np.random.default_rng(seed).integers(0, 256, (2, 300), dtype=np.uint8)
        np.testing.assert_array_equal(sess.run(None, {"a": a})[0], oracle.run(None, {"a": a})[0])


def _raw_at(data: np.ndarray, offset: int) -> Tensor:
    """A zero-copy tensor of ``data`` at ``offset`` bytes past a cache line (as protobuf may
    place raw_data)."""
    buf = bytearray(offset + data.nbytes + ALIGNMENT)
    base = np.frombuffer(buf, np.uint8)
    start = (-base.ctypes.data % ALIGNMENT) + offset
    buf[start : start + data.nbytes] = data.tobytes()
    return Tensor.from_raw(memoryview(buf)[start : start + data.nbytes], DataType.FLOAT, data.shape)


@pytest.mark.parametrize("offset", [0, 1, 4, 16])
def test_constants_reach_kernels_aligned(offset):
    """A big initializer at an odd address is copied to a cache-line boundary: numpy's matmul
    would skip BLAS for it, and SIMD loads prefer whole lines."""
    data = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    assert data.nbytes >= ALIGN_MIN_BYTES
    arr = tensor_value(_raw_at(data, offset))
    assert arr.ctypes.data % ALIGNMENT == 0
    assert not arr.flags.writeable
    np.testing.assert_array_equal(arr, data)


@pytest.mark.parametrize("offset", [1, 4, 16])
def test_small_constants_are_copied_only_when_misaligned_for_their_type(offset):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = _raw_at(data, offset)
    arr = tensor_value(t)
    assert arr.ctypes.data % data.itemsize == 0
    assert np.shares_memory(arr, t.numpy()) == (offset % data.itemsize == 0)
    assert not arr.flags.writeable
    np.testing.assert_array_equal(arr, data)


def test_from_attributes_compiles_once_per_attribute_objects():
    calls = []
    nodes, modes = [1, 2, 3], ["LEAF"]
    for _ in range(3):
        assert from_attributes((nodes, modes, 5), lambda: calls.append(1) or len(calls)) == 1
    # Equal but distinct objects are another node's attributes: compiled again.
    assert from_attributes(([1, 2, 3], modes, 5), lambda: calls.append(1) or len(calls)) == 2


def test_from_attributes_keeps_a_bounded_number_of_entries():
    for i in range(derived_mod.MEMO_ENTRIES + 10):
        from_attributes(([i],), lambda: None)
    assert derived_mod.entries()[1] == derived_mod.MEMO_ENTRIES


def test_concurrent_runs_of_one_session_agree():
    """Several threads running one session at once (cached weights, per-thread scratch)."""
    from concurrent.futures import ThreadPoolExecutor

    sess = onyx.InferenceSession(_qlinear_conv_model(False))
    rng = np.random.default_rng(3)
    xs = [rng.integers(0, 256, (1, 4, 10, 10), dtype=np.uint8) for _ in range(16)]
    expected = [sess.run(None, {"x": x})[0] for x in xs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: sess.run(None, {"x": x})[0], xs * 4))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, expected[i % len(xs)])


def test_from_attributes_keeps_a_model_of_many_small_ensembles():
    """skl2onnx writes an IsolationForest of 100 trees as 100 TreeEnsembleRegressor nodes: each
    node's compiled forest must survive a run over all of them (it was recompiled on every
    call when the memo held fewer entries than the model had nodes)."""
    attributes = [([float(i)], [i]) for i in range(200)]
    made = []
    for _ in range(2):
        for attrs in attributes:
            from_attributes(attrs, lambda attrs=attrs: made.append(attrs) or len(made))
    assert len(made) == len(attributes)
