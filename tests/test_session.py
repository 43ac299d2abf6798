"""InferenceSession: the onnxruntime-compatible API, checked against onnxruntime itself."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.tools.cmd_run import EXAMPLE_MODEL


def make_model(nodes, inputs, outputs, inits=(), opset=17, functions=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], functions=list(functions)
    )
    model.ir_version = 8
    return model.SerializeToString()


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.fixture
def add_relu():
    return make_model(
        [
            helper.make_node("Add", ["x", "b"], ["s"], name="add"),
            helper.make_node("Relu", ["s"], ["y"], name="relu"),
        ],
        [vi("x", TensorProto.FLOAT, ["N", 3])],
        [vi("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(np.array([1, -2, 3], np.float32), "b")],
    )


def test_metadata_matches_onnxruntime(add_relu):
    mine, theirs = onyx.InferenceSession(add_relu), ort.InferenceSession(add_relu)
    for a, b in zip(
        mine.get_inputs() + mine.get_outputs(), theirs.get_inputs() + theirs.get_outputs()
    ):
        assert (a.name, a.type, a.shape) == (b.name, b.type, b.shape)
    assert mine.get_providers() == ["CPUExecutionProvider"]


def test_run_matches_onnxruntime(add_relu):
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    got = onyx.InferenceSession(add_relu).run(None, {"x": x})
    want = ort.InferenceSession(add_relu).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])


def test_intermediate_values_can_be_fetched(add_relu):
    x = np.ones((2, 3), np.float32)
    s, y = onyx.InferenceSession(add_relu).run(["s", "y"], {"x": x})
    np.testing.assert_array_equal(s, x + np.array([1, -2, 3], np.float32))
    np.testing.assert_array_equal(y, np.maximum(s, 0))


def test_inputs_are_not_modified_and_outputs_are_writeable():
    model = make_model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [vi("x", TensorProto.FLOAT, [2])],
        [vi("y", TensorProto.FLOAT, [2])],
    )
    x = np.array([1, 2], np.float32)
    (y,) = onyx.InferenceSession(model).run(None, {"x": x})
    y[0] = 99
    assert x[0] == 1


@pytest.mark.parametrize(
    "feed, message",
    [
        ({"x": np.ones((2, 3), np.float64)}, r"expected tensor\(float\)"),
        ({"x": np.ones((3,), np.float32)}, "expected rank 2"),
        ({"x": np.ones((2, 4), np.float32)}, "dimension 1 must be 3"),
        ({}, "missing input"),
        ({"x": np.ones((2, 3), np.float32), "zz": np.ones(1)}, "unknown input 'zz'"),
    ],
)
def test_bad_feeds_are_named(add_relu, feed, message):
    with pytest.raises(onyx.InvalidArgument, match=message):
        onyx.InferenceSession(add_relu).run(None, feed)


def test_unknown_output_name(add_relu):
    with pytest.raises(onyx.InvalidArgument, match="unknown output name 'nope'"):
        onyx.InferenceSession(add_relu).run(["nope"], {"x": np.ones((1, 3), np.float32)})


def test_unknown_op_fails_at_creation_naming_the_node():
    model = make_model(
        [helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery")],
        [vi("x", TensorProto.FLOAT, [1])],
        [vi("y", TensorProto.FLOAT, [1])],
    )
    with pytest.raises(onyx.NotImplementedOp, match="mystery.*NoSuchOp.*17"):
        onyx.InferenceSession(model)


def test_failing_kernel_names_node_and_shapes():
    model = make_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
        [vi("a", TensorProto.FLOAT, None), vi("b", TensorProto.FLOAT, None)],
        [vi("y", TensorProto.FLOAT, None)],
    )
    sess = onyx.InferenceSession(model)
    with pytest.raises(
        onyx.RuntimeFailure, match=r"'mm' \(MatMul\).*float32\[2, 3\].*float32\[4, 5\]"
    ):
        sess.run(None, {"a": np.ones((2, 3), np.float32), "b": np.ones((4, 5), np.float32)})


@pytest.mark.parametrize("target", [[0, 0, 0], [0, -1, 0], [2, 0]])
def test_fed_reshape_shape_with_a_0_past_the_rank_says_so(target):
    """A fed Reshape shape whose 0 (copy the input's dim) lies past the input's rank is a
    RuntimeFailure naming the node that says so (it was an IndexError: tuple index out of
    range)."""
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")],
        [vi("x", TensorProto.FLOAT, None), vi("shape", TensorProto.INT64, [len(target)])],
        [vi("y", TensorProto.FLOAT, None)],
    )
    sess = onyx.InferenceSession(model)
    x = np.ones(6 if len(target) == 2 else (2, 3), np.float32)
    with pytest.raises(onyx.RuntimeFailure, match=r"'r' \(Reshape\).*has 0 at index .* rank") as e:
        sess.run(None, {"x": x, "shape": np.array(target, np.int64)})
    assert "IndexError" not in str(e.value)


def test_local_function_runs():
    fn = helper.make_function(
        "custom",
        "AddTwice",
        ["a", "b"],
        ["c"],
        [
            helper.make_node("Add", ["a", "b"], ["t"]),
            helper.make_node("Add", ["t", "b"], ["c"]),
        ],
        [helper.make_opsetid("", 17)],
    )
    graph = helper.make_graph(
        [helper.make_node("AddTwice", ["x", "y"], ["z"], domain="custom")],
        "g",
        [vi("x", TensorProto.FLOAT, [2]), vi("y", TensorProto.FLOAT, [2])],
        [vi("z", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
        functions=[fn],
    )
    x, y = np.array([1, 2], np.float32), np.array([10, 20], np.float32)
    (z,) = onyx.InferenceSession(model.SerializeToString()).run(None, {"x": x, "y": y})
    np.testing.assert_array_equal(z, x + 2 * y)


def test_bundled_example_matches_onnxruntime():
    x = np.random.default_rng(1).standard_normal((3, 1, 28, 28)).astype(np.float32)
    got = onyx.InferenceSession(str(EXAMPLE_MODEL)).run(None, {"image": x})[0]
    want = ort.InferenceSession(str(EXAMPLE_MODEL)).run(None, {"image": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_cli_run_on_example(capsys):
    from onyx.tools.cli import main

    assert main(["run", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "output probabilities: float32 [1, 10]" in out
    assert "first run" in out and "median of 2 run(s)" in out


def test_node_breaking_its_schema_is_rejected_at_creation():
    model = make_model(
        [helper.make_node("Add", ["x"], ["y"], name="lonely_add")],
        [vi("x", TensorProto.FLOAT, [1])],
        [vi("y", TensorProto.FLOAT, [1])],
    )
    with pytest.raises(onyx.OnyxError, match="lonely_add.*1 inputs?.*takes 2"):
        onyx.InferenceSession(model)
    model = make_model(
        [helper.make_node("Cast", ["x"], ["y"], name="cast_nowhere")],
        [vi("x", TensorProto.FLOAT, [1])],
        [vi("y", TensorProto.FLOAT, [1])],
    )
    with pytest.raises(onyx.OnyxError, match="cast_nowhere.*required attribute.*to"):
        onyx.InferenceSession(model)


def test_profiling_writes_chrome_trace(tmp_path, add_relu):
    import json

    opts = onyx.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "prof")
    sess = onyx.InferenceSession(add_relu, opts)
    sess.run(None, {"x": np.ones((2, 3), np.float32)})
    path = sess.end_profiling()
    events = json.loads(open(path).read())
    nodes = [e for e in events if e["cat"] == "Node"]
    assert [e["args"]["op_name"] for e in nodes] == ["Add", "Relu"]
    assert nodes[0]["name"] == "add" and nodes[0]["args"]["input_type_shape"][0] == "float32[2, 3]"
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)


def _matmul_relu():
    return make_model(
        [
            helper.make_node("MatMul", ["a", "b"], ["p"], name="matmul"),
            helper.make_node("Relu", ["p"], ["y"], name="relu"),
        ],
        [vi("a", TensorProto.FLOAT, ["N", 3]), vi("b", TensorProto.FLOAT, [3, 4])],
        [vi("y", TensorProto.FLOAT, ["N", 4])],
    )


def test_intra_op_threads_limit_blas_during_run():
    from threadpoolctl import threadpool_info

    opts = onyx.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = onyx.InferenceSession(_matmul_relu(), opts)
    seen = []
    for step in sess.plan.default_schedule:  # record the BLAS pool size while kernels run

        def spy(*args, _fn=step.fn, **kwargs):
            seen.extend(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
            return _fn(*args, **kwargs)

        step.fn = spy
    feed = {"a": np.ones((1, 3), np.float32), "b": np.ones((3, 4), np.float32)}
    for _ in range(3):  # (the checked run, then the fast path's)
        sess.run(None, feed)
    assert seen and set(seen) == {1}


@pytest.mark.parametrize("threads", [0, 1, 2])
def test_a_model_without_blas_work_leaves_blas_alone(add_relu, monkeypatch, threads):
    """No op of the model runs BLAS: its runs neither set BLAS's thread count nor wait for
    concurrent runs' BLAS work (what a one-row run of a tree or a scaler paid per call)."""
    from onyx.runtime import concurrency

    calls = []
    monkeypatch.setattr(concurrency, "_enter_blas", lambda n: calls.append(n))
    opts = onyx.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = onyx.InferenceSession(add_relu, opts)
    for _ in range(3):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert calls == []
    matmul = onyx.InferenceSession(_matmul_relu(), opts)
    matmul.run(None, {"a": np.ones((1, 3), np.float32), "b": np.ones((3, 4), np.float32)})
    assert len(calls) == 1


def test_a_model_function_counts_as_blas_work(monkeypatch):
    """A model-local function's body may hold products: its session keeps the BLAS setting."""
    from onnx import helper as h

    from onyx.runtime import concurrency

    body = h.make_function(
        "local", "Prod", ["a", "b"], ["y"], [h.make_node("MatMul", ["a", "b"], ["y"])],
        [h.make_opsetid("", 17)],
    )  # fmt: skip
    model = make_model(
        [helper.make_node("Prod", ["a", "b"], ["y"], domain="local")],
        [vi("a", TensorProto.FLOAT, [2, 3]), vi("b", TensorProto.FLOAT, [3, 4])],
        [vi("y", TensorProto.FLOAT, None)],
        functions=[body],
    )
    calls = []
    monkeypatch.setattr(concurrency, "_enter_blas", lambda n: calls.append(n))
    opts = onyx.SessionOptions()
    opts.intra_op_num_threads = 1
    onyx.InferenceSession(model, opts).run(
        None, {"a": np.ones((2, 3), np.float32), "b": np.ones((3, 4), np.float32)}
    )
    assert calls == [1]


def test_zero_iteration_loop_scan_output_has_declared_type_and_shape():
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Constant", [], ["elem"], value_ints=[1, 2, 3]),
        ],
        "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, [])],
        [vi("cond_out", TensorProto.BOOL, []), vi("elem", TensorProto.INT64, [3])],
    )
    model = make_model(
        [helper.make_node("Loop", ["M", ""], ["scan"], body=body)],
        [vi("M", TensorProto.INT64, [])],
        [vi("scan", TensorProto.INT64, None)],
    )
    feed = {"M": np.array(0, np.int64)}
    (got,) = onyx.InferenceSession(model).run(None, feed)
    (want,) = ort.InferenceSession(model).run(None, feed)
    assert got.dtype == want.dtype == np.int64 and got.shape == want.shape == (0, 3)


def test_sparse_initializer_is_used_densified():
    values = numpy_helper.from_array(np.array([5.0, 7.0], np.float32), "w")
    indices = numpy_helper.from_array(np.array([1, 4], np.int64), "w_idx")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [vi("x", TensorProto.FLOAT, [6])],
        [vi("y", TensorProto.FLOAT, [6])],
        sparse_initializer=[helper.make_sparse_tensor(values, indices, [6])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = np.arange(6, dtype=np.float32)
    (got,) = onyx.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, x + np.array([0, 5, 0, 0, 7, 0], np.float32))


def test_cpu_mem_arena_option_keeps_freed_memory_in_the_heap():
    """enable_cpu_mem_arena (on by default, as in onnxruntime) has glibc keep freed large
    blocks for the next run; off, the allocator is left as it is. In a fresh process: the
    setting is process-wide."""
    import platform
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import sys, onyx
        from onyx.runtime import memory
        path = sys.argv[1]
        options = onyx.SessionOptions()
        options.enable_cpu_mem_arena = False
        onyx.InferenceSession(path, options)
        print(memory.freed_memory_kept())
        onyx.InferenceSession(path)
        print(memory.freed_memory_kept())
        """
    )
    out = subprocess.run([sys.executable, "-c", code, str(EXAMPLE_MODEL)], capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 0, out.stderr
    glibc = sys.platform.startswith("linux") and "glibc" in " ".join(platform.libc_ver())
    assert out.stdout.split() == ["None", str(glibc)]


def _conv_relu_model() -> bytes:
    w = np.random.default_rng(0).standard_normal((8, 40, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


def test_intra_op_threads_reach_the_native_kernels_and_blas(monkeypatch):
    """intra_op_num_threads bounds the native pool's threads; a model whose heavy ops run on
    that pool leaves BLAS one thread (its idle threads spin, taking cores from the pool)."""
    from onyx.runtime import concurrency, native

    seen, limits = [], []
    for kind in (native.FloatConv, native.SmallConv):  # (a small image's conv: SmallConv)
        monkeypatch.setattr(kind, "__call__", lambda self, *a, run=kind.__call__:
                            seen.append(native.thread_setting()) or run(self, *a))  # fmt: skip
    bound = native.SmallConv.bound  # (a bound step calls a SmallConv through its one-frame

    def spied_bound(self):  # call, SmallConv.bound's)
        run = bound(self)
        return lambda *a: seen.append(native.thread_setting()) or run(*a)

    monkeypatch.setattr(native.SmallConv, "bound", spied_bound)
    limit = concurrency.limit_blas
    monkeypatch.setattr(concurrency, "limit_blas", lambda n: limits.append(n) or limit(n))
    options = onyx.SessionOptions()
    options.intra_op_num_threads = 1
    x = np.ones((1, 40, 6, 6), np.float32)
    conv = onyx.InferenceSession(_conv_relu_model(), options)
    conv.run(None, {"x": x})
    assert conv.pool_heavy == native.available()
    if native.conv_f32_ok():
        assert seen == [1]
    options.intra_op_num_threads = 2  # (read at creation, as onnxruntime does: a new session)
    onyx.InferenceSession(_conv_relu_model(), options).run(None, {"x": x})
    assert limits == [1, 1 if native.available() else 2]
    matmul = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                        [vi("a", TensorProto.FLOAT, [2, 3]), vi("b", TensorProto.FLOAT, [3, 4])],
                        [vi("y", TensorProto.FLOAT, None)])  # fmt: skip
    assert not onyx.InferenceSession(matmul, options).pool_heavy


@pytest.mark.parametrize("hidden, on_pool", [(16, True), (6, False)])
def test_an_lstm_the_native_recurrence_takes_counts_as_pool_work(hidden, on_pool):
    """BLAS keeps one thread for a model of native LSTMs (their projection runs on the pool
    too); an LSTM of another hidden size runs on BLAS and keeps BLAS's threads."""
    from onyx.runtime import native

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, 8])
    w = helper.make_tensor("w", TensorProto.FLOAT, [1, 4 * hidden, 8], [0.1] * (32 * hidden))
    r = helper.make_tensor("r", TensorProto.FLOAT, [1, 4 * hidden, hidden], [0.1] * (4 * hidden**2))
    node = helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=hidden)
    graph = helper.make_graph([node], "g", [x], [vi("y", TensorProto.FLOAT, None)], [w, r])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    session = onyx.InferenceSession(model.SerializeToString())
    assert session.pool_heavy == (on_pool and native.available())


def test_creation_asks_each_node_where_its_work_runs_once(monkeypatch):
    """The pool-or-BLAS count and _heavy_work's answer come from one look at each node of
    the main graph (each asked the op's traits twice)."""
    from onyx.runtime import session as session_module

    nodes = [
        helper.make_node("Sin", ["x"], ["a"]),
        helper.make_node("Cos", ["a"], ["b"]),
        helper.make_node("Neg", ["b"], ["y"]),
    ]
    data = make_model(nodes, [vi("x", TensorProto.FLOAT, [3])], [vi("y", TensorProto.FLOAT, [3])])
    asked = []
    real = session_module._threads  # noqa: SLF001
    monkeypatch.setattr(session_module, "_threads", lambda n: asked.append(n) or real(n))
    so = onyx.SessionOptions()
    so.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = onyx.InferenceSession(data, so)
    assert len(asked) == len(set(map(id, asked))) == 3
    x = np.array([0.0, 1.0, 2.0], np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], -np.cos(np.sin(x)), rtol=1e-6)
