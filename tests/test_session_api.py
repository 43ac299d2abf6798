"""onnxruntime's Python API beyond run(), on onyx. Tests marked "adapted:" follow the named
test of onnxruntime's own suite (onnxruntime/test/python/onnxruntime_test_python.py and
onnxruntime_test_python_iobinding.py), rewritten for onyx and CPU."""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import options as options_module

X = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=np.float32)
SQUARES = np.array([[1.0, 4.0], [9.0, 16.0], [25.0, 36.0]], dtype=np.float32)


def make(nodes, inputs, outputs, inits=(), opsets=(("", 17),)):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], producer_name="t"
    )
    model.ir_version = 8
    return model.SerializeToString()


def mul_1() -> bytes:
    """onnxruntime's testdata/mul_1.onnx: Y = X * W, W the same values as the test's X."""
    return make(
        [helper.make_node("Mul", ["X", "W"], ["Y"])],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 2])],
        [numpy_helper.from_array(X, "W")],
    )


def identity(elem, shape) -> bytes:
    return make(
        [helper.make_node("Identity", ["X"], ["Y"])],
        [helper.make_tensor_value_info("X", elem, shape)],
        [helper.make_tensor_value_info("Y", elem, shape)],
    )


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each test sees the warn-once warnings anew."""
    monkeypatch.setattr(options_module, "_warned", set())


# -- the surface matches onnxruntime's --------------------------------------------------------

#: Session methods of onnxruntime onyx leaves out: device memory and EP device queries.
NOT_PROVIDED = {
    "get_input_memory_infos", "get_output_memory_infos", "get_input_epdevices",
    "get_provider_graph_assignment_info",
}  # fmt: skip


def public(obj) -> set[str]:
    return {a for a in dir(obj) if not a.startswith("_")}


#: OrtValue constructors onyx leaves out: DLPack and sparse tensors.
ORTVALUE_NOT_PROVIDED = {"from_dlpack", "as_sparse_tensor", "ort_value_from_sparse_tensor"}


def test_every_option_field_and_method_exists():
    assert public(ort.SessionOptions()) <= public(onyx.SessionOptions())
    assert public(ort.RunOptions()) <= public(onyx.RunOptions())
    assert public(ort.OrtValue) - ORTVALUE_NOT_PROVIDED <= public(onyx.OrtValue)
    assert public(ort.IOBinding) <= public(onyx.IOBinding)
    assert public(ort.InferenceSession) - NOT_PROVIDED <= public(onyx.InferenceSession)


SESSION_FIELDS = ["log_severity_level", "log_verbosity_level", "logid", "execution_mode",
                  "execution_order", "inter_op_num_threads", "intra_op_num_threads",
                  "enable_mem_pattern", "enable_mem_reuse", "use_deterministic_compute",
                  "use_per_session_threads", "graph_optimization_level", "enable_cpu_mem_arena",
                  "optimized_model_filepath", "enable_profiling"]  # fmt: skip
RUN_FIELDS = ["log_severity_level", "log_verbosity_level", "logid", "terminate",
              "only_execute_path_to_fetches"]  # fmt: skip


def plain(value):
    """An enum member as its number, so onnxruntime's and onyx's enums compare."""
    return value if isinstance(value, str) else int(value)


def test_defaults_match_onnxruntime():
    for name in SESSION_FIELDS:
        assert plain(getattr(onyx.SessionOptions(), name)) == plain(
            getattr(ort.SessionOptions(), name)
        ), name
    for name in RUN_FIELDS:
        assert getattr(onyx.RunOptions(), name) == getattr(ort.RunOptions(), name), name


def test_ignored_options_warn_once():
    so = onyx.SessionOptions()
    with pytest.warns(onyx.IgnoredOptionWarning, match="execution_mode"):
        so.execution_mode = onyx.ExecutionMode.ORT_PARALLEL
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        so.execution_mode = onyx.ExecutionMode.ORT_PARALLEL  # once only
        so.execution_mode = onyx.ExecutionMode.ORT_SEQUENTIAL  # the default asks for nothing
        so.enable_mem_pattern = False  # no observable difference in onyx: no warning
        so.intra_op_num_threads = 2  # works
    with pytest.warns(onyx.IgnoredOptionWarning, match="compiled custom-op libraries"):
        so.register_custom_ops_library("./libcustom_op_library.so")
    with pytest.warns(onyx.IgnoredOptionWarning, match="add_provider"):
        so.add_provider("CUDAExecutionProvider", {})
    with pytest.warns(onyx.IgnoredOptionWarning, match="keyword 'enable_magic'"):
        onyx.InferenceSession(mul_1(), enable_magic=True)
    with pytest.warns(onyx.IgnoredOptionWarning, match="read_config_from_model"):
        onyx.InferenceSession(mul_1(), read_config_from_model=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        onyx.InferenceSession(mul_1(), enable_fallback=True, read_config_from_model=0)
    with pytest.warns(onyx.IgnoredOptionWarning, match="CUDAExecutionProvider"):
        onyx.InferenceSession(mul_1(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])


# adapted: test_session_options_add_config_entry, test_invalid_session_options_config_entry
def test_config_entries():
    so = onyx.SessionOptions()
    with pytest.warns(onyx.IgnoredOptionWarning):
        so.add_session_config_entry("CONFIG_KEY", "CONFIG_VAL")
    assert so.get_session_config_entry("CONFIG_KEY") == "CONFIG_VAL"
    with pytest.raises(RuntimeError, match="does not have configuration with key: INVALID_KEY"):
        so.get_session_config_entry("INVALID_KEY")
    ro = onyx.RunOptions()
    with pytest.raises(RuntimeError, match="INVALID_KEY"):
        ro.get_run_config_entry("INVALID_KEY")


# adapted: test_session_options_add_initializer
def test_add_initializer_overrides_the_models():
    so = onyx.SessionOptions()
    w = onyx.OrtValue.ortvalue_from_numpy(
        np.array([[2.0, 1.0], [4.0, 3.0], [6.0, 5.0]], np.float32)
    )
    so.add_initializer("W", w)
    sess = onyx.InferenceSession(mul_1(), sess_options=so, providers=["CPUExecutionProvider"])
    (y,) = sess.run(["Y"], {"X": X})
    np.testing.assert_array_equal(y, [[2.0, 2.0], [12.0, 12.0], [30.0, 30.0]])
    model = onyx.load(mul_1())
    onyx.InferenceSession(model, so)
    assert onyx.to_array(model.graph.initializers["W"].const_value)[0, 0] == 1.0  # not edited


# adapted: test_session_options_add_free_dimension_override_by_name / _by_denotation
def test_free_dimension_overrides():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["Dim1", "Dim2", 5])
    dims = x.type.tensor_type.shape.dim
    dims[0].denotation, dims[1].denotation = "DATA_BATCH", "DATA_CHANNEL"
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["Dim1", "Dim2", 5])
    data = make([helper.make_node("Abs", ["x"], ["y"])], [x], [y])
    so = onyx.SessionOptions()
    so.add_free_dimension_override_by_name("Dim1", 4)
    so.add_free_dimension_override_by_name("Dim2", 6)
    assert onyx.InferenceSession(data, so).get_inputs()[0].shape == [4, 6, 5]
    so = onyx.SessionOptions()
    so.add_free_dimension_override_by_denotation("DATA_BATCH", 3)
    so.add_free_dimension_override_by_denotation("DATA_CHANNEL", 5)
    sess = onyx.InferenceSession(data, so)
    assert sess.get_inputs()[0].shape == [3, 5, 5]
    with pytest.raises(onyx.InvalidArgument, match="dimension 0 must be 3"):
        sess.run(None, {"x": np.zeros((2, 5, 5), np.float32)})


def test_disabled_optimizers_keyword():
    w = np.ones((2, 3, 3, 3), np.float32)
    data = make(
        [helper.make_node("Conv", ["x", "W"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2, 2])],
        [numpy_helper.from_array(w, "W")],
    )
    fused = onyx.InferenceSession(data)
    kept = onyx.InferenceSession(data, disabled_optimizers=["ConvActivationFusion"])
    assert [s.node.op_type for s in fused.plan.steps] == ["FusedConv"]
    assert [s.node.op_type for s in kept.plan.steps] == ["Conv", "Relu"]
    assert kept.get_session_options().disabled_optimizers == ["ConvActivationFusion"]


# adapted: test_list_as_input, test_string_list_as_input
def test_lists_as_inputs():
    sess = onyx.InferenceSession(mul_1())
    np.testing.assert_array_equal(sess.run([], {"X": X.tolist()})[0], SQUARES)
    strings = onyx.InferenceSession(identity(TensorProto.STRING, [2, 2]))
    x = np.array(["this", "is", "identity", "test"], dtype=str).reshape((2, 2))
    np.testing.assert_equal(strings.run([], {"X": x.tolist()})[0], x)


# adapted: test_run_model_multiple_threads (each thread with its own RunOptions)
def test_runs_in_threads_with_their_own_run_options():
    so = onyx.SessionOptions()
    so.log_verbosity_level = 1
    so.logid = "MultiThreadsTest"
    sess = onyx.InferenceSession(mul_1(), sess_options=so)
    failures, stopped = [], []

    def work(ro, n):
        for _ in range(n):
            try:
                np.testing.assert_allclose(sess.run([], {"X": X}, run_options=ro)[0], SQUARES)
            except onyx.RuntimeFailure:
                stopped.append(ro.logid)
            except Exception as e:  # noqa: BLE001
                failures.append(e)

    runs = [onyx.RunOptions(logid=f"thread{i}") for i in range(4)]
    runs[0].terminate = True  # this thread's runs stop; the others' must not
    threads = [threading.Thread(target=work, args=(ro, 50)) for ro in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert set(stopped) == {"thread0"} and len(stopped) == 50


# adapted: test_model_serialization, test_deserialization_from_path_object, test_run_model_from_bytes
def test_paths_bytes_and_optimized_model(tmp_path):
    path = tmp_path / "mul_1.onnx"
    path.write_bytes(mul_1())
    so = onyx.SessionOptions()
    so.log_severity_level = 1
    so.logid = "TestModelSerialization"
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    onyx.InferenceSession(str(path), sess_options=so)
    assert (tmp_path / "optimized.onnx").is_file()
    for source in (path, path.read_bytes()):
        np.testing.assert_array_equal(onyx.InferenceSession(source).run([], {"X": X})[0], SQUARES)


# adapted: test_boolean_inputs, test_graph_optimization_level
def test_boolean_inputs_at_every_level():
    data = make(
        [helper.make_node("And", ["input1:0", "input:0"], ["output:0"])],
        [helper.make_tensor_value_info("input1:0", TensorProto.BOOL, [2, 2]),
         helper.make_tensor_value_info("input:0", TensorProto.BOOL, [2, 2])],
        [helper.make_tensor_value_info("output:0", TensorProto.BOOL, [2, 2])],
    )  # fmt: skip
    a = np.array([[True, True], [False, False]])
    b = np.array([[True, False], [True, False]])
    opt = onyx.SessionOptions()
    assert opt.graph_optimization_level == onyx.GraphOptimizationLevel.ORT_ENABLE_ALL
    opt.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    sess = onyx.InferenceSession(data, sess_options=opt)
    assert [i.name for i in sess.get_inputs()] == ["input1:0", "input:0"]
    assert sess.get_inputs()[0].type == "tensor(bool)" and sess.get_outputs()[0].shape == [2, 2]
    (out,) = sess.run([], {"input1:0": a, "input:0": b})
    np.testing.assert_array_equal(out, [[True, False], [False, False]])
    # adapted: test_raise_wrong_num_inputs (a ValueError in both)
    with pytest.raises(ValueError, match="input1:0"):
        sess.run([], {"input:0": a})


# adapted: test_string_input1, test_input_bytes, test_input_object
@pytest.mark.parametrize("dtype", [str, bytes, object])
def test_string_inputs(dtype):
    sess = onyx.InferenceSession(identity(TensorProto.STRING, [2, 2]))
    assert sess.get_inputs()[0].type == "tensor(string)"
    words = ["this", "is", "identity", "test"]
    x = np.array([w.encode() if dtype is bytes else w for w in words], dtype=dtype).reshape(2, 2)
    (out,) = sess.run([], {"X": x})
    text = [[w.decode() if isinstance(w, bytes) else w for w in row] for row in out.tolist()]
    assert text == [["this", "is"], ["identity", "test"]]


# adapted: test_profiler_with_session_options
def test_profile_file(tmp_path):
    import json

    so = onyx.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "profile")
    sess = onyx.InferenceSession(mul_1(), sess_options=so)
    sess.run([], {"X": X})
    events = json.loads(Path(sess.end_profiling()).read_text())
    assert events and all({"pid", "dur", "ts", "ph", "name", "args"} <= set(e) for e in events)


# -- RunOptions.terminate ---------------------------------------------------------------------


# adapted: test_run_model_with_terminate (onnxruntime raises when terminate is set before run)
def test_terminate_set_before_the_run():
    sess = onyx.InferenceSession(mul_1())
    ro = onyx.RunOptions()
    ro.terminate = True
    with pytest.raises(onyx.RuntimeFailure, match="terminate flag"):
        sess.run(None, {"X": X}, ro)
    ro.terminate = False
    np.testing.assert_array_equal(sess.run(None, {"X": X}, ro)[0], SQUARES)


def test_terminate_stops_a_running_model_between_nodes():
    ro = onyx.RunOptions()
    calls = []

    def slow_step(x):  # stands for a long node; another thread sets terminate meanwhile
        calls.append(1)
        ro.terminate = True
        return x

    data = make(
        [helper.make_node("Step", ["x"], ["a"], domain="test"),
         helper.make_node("Step", ["a"], ["y"], domain="test")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        opsets=(("", 17), ("test", 1)),
    )  # fmt: skip
    so = onyx.SessionOptions()
    so.register_custom_op("Step", slow_step, domain="test")
    sess = onyx.InferenceSession(data, so)
    with pytest.raises(onyx.RuntimeFailure, match="terminate flag"):
        sess.run(None, {"x": np.zeros(2, np.float32)}, ro)
    assert calls == [1]  # the second node never ran


# -- logging -----------------------------------------------------------------------------------


def test_log_severity_drives_the_onyx_logger(caplog):
    caplog.set_level(logging.DEBUG, logger="onyx")
    logging.getLogger("onyx").setLevel(logging.NOTSET)  # the session decides
    so = onyx.SessionOptions()
    so.log_severity_level = 0
    so.log_verbosity_level = 1
    so.logid = "mine"
    sess = onyx.InferenceSession(mul_1(), so)
    sess.run(None, {"X": X})
    text = caplog.text
    assert "[mine] loaded model: 1 nodes" in text
    assert "session created in" in text and "optimizations applied" in text
    assert "run took" in text
    caplog.clear()
    onyx.InferenceSession(mul_1()).run(None, {"X": X})  # default severity: warnings only
    assert "loaded model" not in caplog.text


def test_fallback_to_a_function_body_is_logged(caplog):
    caplog.set_level(logging.DEBUG, logger="onyx")
    logging.getLogger("onyx").setLevel(logging.NOTSET)
    data = make(
        [helper.make_node("Foo", ["x"], ["y"], domain="local")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        opsets=(("", 17), ("local", 1)),
    )
    model = onyx.load(data)
    from onnx import load_from_string

    proto = load_from_string(data)
    proto.functions.append(
        helper.make_function(
            "local",
            "Foo",
            ["a"],
            ["b"],
            [helper.make_node("Neg", ["a"], ["b"])],
            [helper.make_opsetid("", 17)],
        )  # fmt: skip
    )
    so = onyx.SessionOptions()
    so.log_severity_level = 0
    so.graph_optimization_level = 0
    onyx.InferenceSession(proto.SerializeToString(), so)
    assert "runs as its function body" in caplog.text
    del model


# -- OrtValue ----------------------------------------------------------------------------------


# adapted: test_ort_value
def test_ort_value():
    v = onyx.OrtValue.ortvalue_from_numpy(X)
    assert v.device_name() == "cpu" and v.shape() == [3, 2]
    assert v.data_type() == "tensor(float)" and v.is_tensor()
    assert v.tensor_size_in_bytes() == 4 * 2 * 3 and v.element_type() == 1
    np.testing.assert_array_equal(v.numpy(), X)
    sess = onyx.InferenceSession(mul_1())
    np.testing.assert_array_equal(sess.run(["Y"], {"X": v})[0], SQUARES)
    out = sess.run_with_ort_values(["Y"], {"X": v})
    assert isinstance(out[0], onyx.OrtValue)
    np.testing.assert_array_equal(out[0].numpy(), SQUARES)
    np.testing.assert_array_equal(v.numpy(), X)  # still valid after the run
    typed = onyx.OrtValue.ortvalue_from_numpy_with_onnx_type(X, 1)
    assert typed.is_tensor() and typed.element_type() == 1 and typed.shape() == [3, 2]
    with pytest.raises(onyx.InvalidArgument, match="CPU only"):
        onyx.OrtValue.ortvalue_from_numpy(X, "cuda", 0)


# adapted: test_ort_value_array_protocol
def test_ort_value_shares_memory():
    arr = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    v = onyx.OrtValue.ortvalue_from_numpy(arr)
    assert np.asarray(v).ctypes.data == v.data_ptr() == arr.ctypes.data
    assert np.asarray(v, dtype=np.float64).dtype == np.float64
    v.update_inplace(np.full((2, 2), 7, np.float32))
    assert arr[0, 0] == 7
    empty = onyx.OrtValue.ortvalue_from_shape_and_type([3, 2], np.int64)
    assert empty.shape() == [3, 2] and empty.data_type() == "tensor(int64)"
    seq = onyx.OrtValue([np.zeros(2, np.float32)])
    assert seq.is_tensor_sequence() and seq.data_type() == "seq(tensor(float))"


# -- IOBinding ---------------------------------------------------------------------------------


# adapted: test_bind_input_to_cpu_arr
def test_bind_cpu_input():
    sess = onyx.InferenceSession(mul_1(), providers=onyx.get_available_providers())
    binding = sess.io_binding()
    binding.bind_cpu_input("X", X)
    binding.bind_output("Y")
    sess.run_with_iobinding(binding)
    binding.synchronize_outputs()
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], SQUARES)


# adapted: test_bind_input_types
@pytest.mark.parametrize(
    "dtype",
    [np.float32, np.float64, np.int32, np.uint32, np.int64, np.uint64, np.int16, np.uint16,
     np.int8, np.uint8, np.float16, np.bool_],
)  # fmt: skip
def test_bind_input_types(dtype):
    x = np.arange(8).reshape((-1, 2)).astype(dtype)
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    sess = onyx.InferenceSession(identity(elem, [None, 2]))
    bind = onyx.SessionIOBinding(sess)
    device = onyx.OrtDevice(onyx.OrtDevice.cpu(), onyx.OrtDevice.default_memory(), 0)
    bind.bind_ortvalue_input("X", onyx.OrtValue.ortvalue_from_numpy(x, device))
    bind.bind_output("Y", device)
    sess.run_with_iobinding(bind, None)
    np.testing.assert_array_equal(bind.get_outputs()[0].numpy(), x)


# adapted: test_bind_input_only, test_bind_input_and_preallocated_output
def test_bind_raw_pointers():
    sess = onyx.InferenceSession(mul_1())
    binding = sess.io_binding()
    source = onyx.OrtValue.ortvalue_from_numpy(X.copy())
    binding.bind_input("X", "cpu", 0, np.float32, [3, 2], source.data_ptr())
    output = onyx.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32, "cpu", 0)
    binding.bind_output("Y", "cpu", 0, np.float32, [3, 2], output.data_ptr())
    binding.synchronize_inputs()
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], SQUARES)
    np.testing.assert_array_equal(output.numpy(), SQUARES)  # written into the buffer


# adapted: test_bind_input_and_non_preallocated_output
def test_outputs_allocated_by_the_run():
    sess = onyx.InferenceSession(mul_1())
    binding = sess.io_binding()
    binding.bind_input(
        "X", "cpu", 0, np.float32, [3, 2], onyx.OrtValue.ortvalue_from_numpy(X).data_ptr()
    )
    binding.bind_output("Y", "cpu")
    sess.run_with_iobinding(binding)
    for _ in range(2):  # get_outputs can be called repeatedly
        (out,) = binding.get_outputs()
        assert out.device_name() == "cpu"
        np.testing.assert_array_equal(out.numpy(), SQUARES)
    binding.bind_cpu_input("X", X * 2)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.get_outputs()[0].numpy(), 2 * SQUARES)


# adapted: test_bind_input_and_bind_output_with_ortvalues
def test_bind_ortvalues_both_ways():
    sess = onyx.InferenceSession(mul_1())
    binding = sess.io_binding()
    binding.bind_ortvalue_input("X", onyx.OrtValue.ortvalue_from_numpy(X))
    out = onyx.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32, "cpu", 0)
    binding.bind_ortvalue_output("Y", out)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(out.numpy(), SQUARES)
    binding.bind_ortvalue_input("X", onyx.OrtValue.ortvalue_from_numpy(2 * X))
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(out.numpy(), 2 * SQUARES)
    assert binding.get_outputs()[0] is out
    binding.clear_binding_outputs()
    with pytest.raises(onyx.InvalidArgument, match="no output is bound"):
        sess.run_with_iobinding(binding)
    binding.clear_binding_inputs()
    binding.bind_output("Y")
    with pytest.raises(onyx.InvalidArgument, match="missing input"):
        sess.run_with_iobinding(binding)


ORT_SCRIPT = """
import numpy as np
import onnxruntime

sess = onnxruntime.InferenceSession(MODEL, providers=["CPUExecutionProvider"])
x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=np.float32)
x_ortvalue = onnxruntime.OrtValue.ortvalue_from_numpy(x, "cpu", 0)
y_ortvalue = onnxruntime.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32, "cpu", 0)
io_binding = sess.io_binding()
io_binding.bind_input(name="X", device_type=x_ortvalue.device_name(), device_id=0,
                      element_type=np.float32, shape=x_ortvalue.shape(),
                      buffer_ptr=x_ortvalue.data_ptr())
io_binding.bind_output(name="Y", device_type=y_ortvalue.device_name(), device_id=0,
                       element_type=np.float32, shape=y_ortvalue.shape(),
                       buffer_ptr=y_ortvalue.data_ptr())
sess.run_with_iobinding(io_binding)
first = y_ortvalue.numpy().copy()
io_binding.bind_cpu_input("X", x * 3)
io_binding.bind_output("Y")
sess.run_with_iobinding(io_binding)
RESULT = [first, io_binding.copy_outputs_to_cpu()[0], io_binding.get_outputs()[0].numpy(),
          onnxruntime.get_device(), sess.get_providers()]
"""


def test_an_onnxruntime_iobinding_script_runs_unchanged(monkeypatch):
    results = {}
    for name, module in [("onnxruntime", ort), ("onyx", onyx)]:
        monkeypatch.setitem(sys.modules, "onnxruntime", module)
        scope = {"MODEL": mul_1()}
        exec(ORT_SCRIPT, scope)
        results[name] = scope["RESULT"]
    theirs, mine = results["onnxruntime"], results["onyx"]
    for a, b in zip(theirs[:3], mine[:3]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(mine[1], 3 * SQUARES)  # (3x) * W
    assert mine[3:] == theirs[3:] == ["CPU", ["CPUExecutionProvider"]]


# -- run_async, providers, metadata, pickling --------------------------------------------------


# adapted: test_run_async
def test_run_async():
    event = threading.Event()
    seen = {}

    class MyData:
        def __init__(self, id):
            self.id = id

    def callback(results, data, err):
        seen.update(results=results, id=data.id, err=err, thread=threading.current_thread())
        event.set()

    so = onyx.SessionOptions()
    so.intra_op_num_threads = 2
    sess = onyx.InferenceSession(mul_1(), so, providers=["CPUExecutionProvider"])
    assert sess.run_async(["Y"], {"X": X}, callback, MyData(123456)) is None
    assert event.wait(10)
    assert seen["err"] == "" and seen["id"] == 123456
    assert seen["thread"] is not threading.current_thread()
    np.testing.assert_array_equal(seen["results"][0], SQUARES)
    event.clear()
    sess.run_async(["Y"], {"X": X[:1]}, callback, MyData(1))
    assert event.wait(10)
    assert seen["results"] is None and "dimension 0 must be 3" in seen["err"]


# adapted: test_get_providers, test_run_device, test_invalid_set_providers
def test_providers_and_device():
    assert onyx.get_device() == "CPU"
    assert onyx.get_all_providers()[-1] == "CPUExecutionProvider"
    assert "CPUExecutionProvider" in onyx.get_available_providers()
    sess = onyx.InferenceSession(mul_1(), providers=onyx.get_available_providers())
    assert sess.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(RuntimeError, match="Unknown Provider Type: InvalidProvider"):
        sess.set_providers(["InvalidProvider"])
    with pytest.warns(onyx.IgnoredOptionWarning):
        sess.set_providers(["CUDAExecutionProvider"])
    sess.set_providers(["CPUExecutionProvider"])
    assert onyx.get_version_string() == onyx.__version__
    assert "Build Info" in onyx.get_build_info()


# adapted: test_model_meta, test_profiler_get_start_time_ns
def test_metadata_and_profiling_start(tmp_path):
    meta = onyx.InferenceSession(mul_1()).get_modelmeta()
    assert meta.producer_name == "t" and meta.graph_name == "g" and meta.domain == ""
    starts = []
    for _ in range(3):
        so = onyx.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = str(tmp_path / "p")
        sess = onyx.InferenceSession(mul_1(), so)
        starts.append(sess.get_profiling_start_time_ns())
        sess.end_profiling()
    assert 0 < starts[0] <= starts[1] <= starts[2]
    assert onyx.InferenceSession(mul_1()).get_profiling_start_time_ns() == 0


def _run_pickled(sess):
    return sess.run(None, {"X": X})[0]


def test_sessions_pickle(tmp_path):
    so = onyx.SessionOptions()
    so.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_ENABLE_BASIC
    path = tmp_path / "mul.onnx"
    path.write_bytes(mul_1())
    for source in (mul_1(), str(path), onyx.load(mul_1())):
        sess = onyx.InferenceSession(source, so)
        clone = pickle.loads(pickle.dumps(sess))
        assert clone.get_session_options().graph_optimization_level == 1
        np.testing.assert_array_equal(clone.run(None, {"X": X})[0], SQUARES)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork")
def test_sessions_go_to_other_processes():
    from concurrent.futures import ProcessPoolExecutor

    sess = onyx.InferenceSession(mul_1())
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        np.testing.assert_array_equal(pool.submit(_run_pickled, sess).result(timeout=60), SQUARES)


# -- custom ops --------------------------------------------------------------------------------


def custom_model(op="Scale", domain="com.example") -> bytes:
    return make(
        [helper.make_node(op, ["x"], ["y"], domain=domain, factor=3.0)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        opsets=(("", 17), (domain, 1)),
    )


def test_global_custom_op_with_shape_rule():
    def shape(ctx):
        ctx.same(0, 0)

    @onyx.register_op("Scale", domain="com.example", shape=shape)
    def scale(x, *, factor=1.0):
        return x * np.float32(factor)

    try:
        sess = onyx.InferenceSession(custom_model())
        np.testing.assert_array_equal(sess.run(None, {"x": np.ones((2, 2), np.float32)})[0], 3)
        typed = onyx.infer_shapes(onyx.load(custom_model()))
        assert list(typed.graph.outputs[0].shape.dims) == [2, 2]
    finally:
        onyx.unregister_op("Scale", domain="com.example")
    with pytest.raises(onyx.NotImplementedOp, match="Scale"):
        onyx.InferenceSession(custom_model())


def test_per_session_custom_op():
    so = onyx.SessionOptions()
    so.register_custom_op("Scale2", lambda x, *, factor: x * np.float32(factor), domain="my")
    sess = onyx.InferenceSession(custom_model("Scale2", "my"), so)
    np.testing.assert_array_equal(sess.run(None, {"x": np.ones((2, 2), np.float32)})[0], 3)
    with pytest.raises(onyx.NotImplementedOp):  # other sessions do not see it
        onyx.InferenceSession(custom_model("Scale2", "my"))
