"""Scratch memory the native kernels keep per thread (pool.c's onyx_scratch) is freed when the
thread exits: a server that runs each request on a new Python thread must not leak each
thread's blocks (the kernels run on the calling thread at one intra-op thread)."""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest
from onnx import helper, numpy_helper

import onyx
from onyx.runtime import native
from onyx.runtime.native import _core

pytestmark = pytest.mark.skipif(not native.available(), reason="native library not loaded")


def _conv1d_session() -> onyx.InferenceSession:
    w = np.random.default_rng(0).standard_normal((8, 64, 5)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[2, 2])],
        "g",
        [helper.make_tensor_value_info("x", 1, [1, 64, 6000])],
        [helper.make_tensor_value_info("y", 1, None)],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    options = onyx.SessionOptions()
    options.intra_op_num_threads = 1
    return onyx.InferenceSession(model.SerializeToString(), options)


def _settled(live, want: int, seconds: float = 5.0) -> int:
    """live() once it equals ``want``, or after ``seconds``."""
    deadline = time.monotonic() + seconds
    while live() != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return live()


def test_a_threads_scratch_is_freed_when_it_exits():
    live = _core.lib.onyx_scratch_sets
    live.restype = ctypes.c_int64
    sess = _conv1d_session()
    x = np.ones((1, 64, 6000), np.float32)
    (want,) = sess.run(None, {"x": x})
    before, during, got = live(), [], []

    def run() -> None:
        got.append(sess.run(None, {"x": x})[0])
        during.append(live())

    for _ in range(4):
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        # none is left once it has exited (its key's destructor runs after join returns:
        # Python's join waits for the thread's Python state, not for the OS thread's end, so
        # wait for it before the next thread counts, or that one sees both sets)
        assert _settled(live, before) == before
    assert during == [before + 1] * 4  # each thread had its own set while it ran
    assert all(np.array_equal(g, want) for g in got)
