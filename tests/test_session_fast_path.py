"""run()'s fast path (feeds exactly as declared, a signature a full run has checked): the
same results and the same errors as the full path, which it leaves every check to."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import session as session_module


def _model(shape=("N", 3)) -> bytes:
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "b"], ["s"], name="add"),
            helper.make_node("Relu", ["s"], ["y"], name="relu"),
            helper.make_node("Identity", ["x"], ["x_copy"], name="copy"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape)),
            helper.make_tensor_value_info("x_copy", TensorProto.FLOAT, list(shape)),
        ],
        [numpy_helper.from_array(np.array([1, -2, 3], np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.fixture
def counted(monkeypatch):
    """A session whose full-path feed checks are counted."""
    sess = onyx.InferenceSession(_model())
    calls = []
    full = getattr(sess, "_bind_inputs")  # noqa: B009  (the full path, watched)
    monkeypatch.setattr(sess, "_bind_inputs", lambda feed: calls.append(1) or full(feed))
    return sess, calls


def test_a_checked_signature_takes_the_fast_path(counted):
    sess, calls = counted
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    first = sess.run(None, {"x": x})
    again = sess.run(None, {"x": x})
    assert len(calls) == 1  # the second run skipped the full path
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    sess.run(None, {"x": np.ones((5, 3), np.float32)})  # a new shape: the full path first
    assert len(calls) == 2
    sess.run(["y"], {"x": x})  # new output names: the full path first
    assert len(calls) == 3
    sess.run(["y"], {"x": x})
    assert len(calls) == 3


def test_fast_outputs_are_fresh_and_inputs_untouched(counted):
    sess, _ = counted
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for _ in range(3):
        y, x_copy = sess.run(None, {"x": x})
        assert x_copy is not x and not np.shares_memory(x_copy, x)
        x_copy[:] = -1
        y[:] = -1
    np.testing.assert_array_equal(x, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert x.flags.writeable


@pytest.mark.parametrize(
    "feed, message",
    [
        ({"x": np.ones((2, 3), np.float64)}, r"expected tensor\(float\)"),
        ({"x": np.ones((3,), np.float32)}, "expected rank 2"),
        ({"x": np.ones((2, 4), np.float32)}, "dimension 1 must be 3"),
        ({}, "missing input"),
        ({"x": np.ones((2, 3), np.float32), "zz": np.ones(1)}, "unknown input 'zz'"),
        ({"zz": np.ones((2, 3), np.float32)}, "unknown input 'zz'"),
        ({"x": [[1.0, 2.0, 3.0]] * 2, "zz": 1}, "unknown input 'zz'"),
    ],
)
def test_bad_feeds_after_fast_runs_raise_as_before(counted, feed, message):
    sess, _ = counted
    for _ in range(2):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
    with pytest.raises(onyx.InvalidArgument, match=message):
        sess.run(None, feed)


def test_unknown_output_name_after_fast_runs(counted):
    sess, _ = counted
    x = np.ones((1, 3), np.float32)
    sess.run(None, {"x": x})
    sess.run(None, {"x": x})
    with pytest.raises(onyx.InvalidArgument, match="unknown output name 'nope'"):
        sess.run(["nope"], {"x": x})


def test_other_feeds_take_the_full_path(counted):
    """Lists and runs with options take the full path, every time."""
    sess, calls = counted
    x = np.ones((2, 3), np.float32)
    sess.run(None, {"x": x})
    sess.run(None, {"x": x.tolist()})
    sess.run(None, {"x": x}, onyx.RunOptions())
    assert len(calls) == 3


def test_the_output_check_runs_for_each_new_signature(monkeypatch):
    """A kernel giving another shape than inference proves is caught at its signature's
    first run, also when an earlier signature already runs fast."""
    sess = onyx.InferenceSession(_model())
    x = np.ones((2, 3), np.float32)
    sess.run(None, {"x": x})
    sess.run(None, {"x": x})
    checked = []
    original = getattr(session_module.InferenceSession, "_run_plan")  # noqa: B009

    def watch(self, inputs, wanted, check=False):
        checked.append(check)
        return original(self, inputs, wanted, check)

    monkeypatch.setattr(session_module.InferenceSession, "_run_plan", watch)
    sess.run(None, {"x": np.ones((4, 3), np.float32)})
    sess.run(None, {"x": np.ones((4, 3), np.float32)})
    assert checked == [True]  # the second run of (4, 3) took the fast path


def _two_inputs() -> bytes:
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Sub", ["a", "b"], ["y"])],
        "g",
        [info("a", TensorProto.FLOAT, ["N", 3]), info("b", TensorProto.FLOAT, ["N", 3])],
        [info("y", TensorProto.FLOAT, ["N", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize(
    "feed, message",
    [
        ({"a": np.ones((2, 3), np.float32), "zz": np.ones((2, 3), np.float32)}, "unknown input"),
        ({"a": np.ones((2, 3), np.float32)}, "missing input"),
        ({"a": np.ones((2, 3), np.float32), "b": None}, "not an array|expected tensor"),
        ({"a": np.ones((2, 3), np.float32), "b": np.ones((2, 3), ">f4")}, "expected tensor"),
    ],
)
def test_two_inputs_bad_feeds_after_fast_runs(feed, message):
    """As many feeds as inputs but one misnamed, one missing, one None or of a non-native
    byte order: the full path's errors, after the signature has run fast."""
    sess = onyx.InferenceSession(_two_inputs())
    good = {"a": np.ones((2, 3), np.float32), "b": np.zeros((2, 3), np.float32)}
    for _ in range(2):
        sess.run(None, good)
    with pytest.raises(onyx.InvalidArgument, match=message):
        sess.run(None, feed)


def test_two_inputs_fed_in_any_order_and_layout():
    """Feeds in another order, strided or of an ndarray subclass: the full path's results,
    whichever path serves them (strided views take the fast path, subclasses the full one)."""
    sess = onyx.InferenceSession(_two_inputs())
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 6)).astype(np.float32)[:, ::2]
    b = np.asfortranarray(rng.standard_normal((2, 3)).astype(np.float32))
    want = a - b
    for feed in ({"a": a, "b": b}, {"b": b, "a": a}, {"a": a, "b": b}):
        np.testing.assert_array_equal(sess.run(None, feed)[0], want)
        np.testing.assert_array_equal(sess.run(("y",), feed)[0], want)
    memmap_like = b.view(type("Sub", (np.ndarray,), {}))
    np.testing.assert_array_equal(sess.run(None, {"a": a, "b": memmap_like})[0], want)


def test_unhashable_output_names_take_the_full_path(counted):
    sess, calls = counted
    x = np.ones((2, 3), np.float32)
    for _ in range(2):
        sess.run(None, {"x": x})
    with pytest.raises((onyx.InvalidArgument, TypeError)):
        sess.run([["y"]], {"x": x})
    assert len(calls) == 2  # (the fast path left it to the full one)


def _zip_map() -> bytes:
    info = helper.make_tensor_value_info
    ml = "ai.onnx.ml"
    graph = helper.make_graph(
        [helper.make_node("ZipMap", ["x"], ["z"], domain=ml, classlabels_int64s=[0, 1, 2])],
        "g",
        [info("x", TensorProto.FLOAT, ["N", 3])],
        [
            helper.make_value_info(
                "z",
                helper.make_sequence_type_proto(
                    helper.make_map_type_proto(
                        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])
                    )
                ),
            )
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ml, 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model.SerializeToString()


def test_zip_map_rows_fresh_on_the_fast_path():
    """ZipMap's rows through the fast path: a plain list of plain dicts, new at every run."""
    sess = onyx.InferenceSession(_zip_map())
    x = np.array([[0.25, 0.5, 0.25]], np.float32)
    runs = [sess.run(None, {"x": x})[0] for _ in range(3)]
    for rows in runs:
        assert type(rows) is list and type(rows[0]) is dict
        assert rows == [{0: 0.25, 1: 0.5, 2: 0.25}]
    runs[1][0][0] = -1.0
    runs[1].append({})
    assert runs[2] == [{0: 0.25, 1: 0.5, 2: 0.25}]
    assert sess.run(None, {"x": x})[0] == [{0: 0.25, 1: 0.5, 2: 0.25}]
