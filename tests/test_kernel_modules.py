"""The kernel modules a session loads (issue 23's cold start): a float model's session reads
and runs the kernels of its op families, not the rare convs, pools and integer products that
once shared their modules; and a model that uses those still finds, loads and runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import onyx
from onyx.runtime import registry

TINY = Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx"

#: (domain, op) of the split-off families -> the module that registers them now
RARE = {
    ("", "ConvInteger"): "quantized_conv",
    ("", "QLinearConv"): "quantized_conv",
    ("ai.onyx", "QLinearConvLookup"): "quantized_conv",
    ("", "ConvTranspose"): "conv_transpose",
    ("", "DeformConv"): "deform_conv",
    ("", "CausalConvWithState"): "causal_conv",
    ("", "LpPool"): "lp_pool",
    ("", "GlobalLpPool"): "lp_pool",
    ("", "MaxUnpool"): "max_unpool",
    ("", "MaxRoiPool"): "roi_pool",
    ("", "RoiAlign"): "roi_pool",
    ("com.microsoft", "QLinearAveragePool"): "qlinear_pool",
    ("com.microsoft", "QLinearGlobalAveragePool"): "qlinear_pool",
    ("", "MatMulInteger"): "quantized_matmul",
    ("com.microsoft", "QLinearAdd"): "contrib",
    ("com.microsoft", "DynamicQuantizeMatMul"): "contrib",
    ("", "QuantizeLinear"): "quantize",
    ("", "BatchNormalization"): "batch_norm",
}


def _fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _registered_rare(session_code: str) -> str:
    """What a fresh process that runs ``session_code`` registered of the rare families."""
    return _fresh(
        "import sys, numpy as np, onyx\n"
        "from onyx.runtime import registry\n"
        f"{session_code}\n"
        f"rare = {sorted(RARE)!r}\n"
        "print(sorted(k[1] for k in map(tuple, rare) if k in registry._KERNELS))\n"
    )


def test_a_float_cnns_session_registers_none_of_the_rare_convs_pools_or_integer_products():
    # (conv.py held every convolution, pool.py every pool, linalg.py MatMulInteger: the tiny
    # CNN's Conv, MaxPool and Gemm had its session unmarshal and run all of their code)
    code = (
        f"s = onyx.InferenceSession({str(TINY)!r})\n"
        "i = s.get_inputs()[0]\n"
        "s.run(None, {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape],\n"
        "    np.float32)})"
    )
    assert _registered_rare(code) == "[]"


def test_a_float_transformers_skip_layer_norm_registers_no_quantized_op(tmp_path):
    # (SkipLayerNormalization was contrib.py's, which imports quantize.py: a float transformer
    # registered QLinearAdd, DynamicQuantizeMatMul and QuantizeLinear with it; and its layer
    # norm, normalization.py's, came with every BatchNormalization)
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.ones(8, np.float32), n) for n in ("g", "b")]
    node = helper.make_node(
        "SkipLayerNormalization", ["x", "s", "g", "b"], ["y"], domain="com.microsoft"
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 8]) for n in ("x", "s")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    path = tmp_path / "skip_ln.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=opsets).SerializeToString())
    code = (
        f"s = onyx.InferenceSession({str(path)!r})\n"
        "x = np.arange(16, dtype=np.float32).reshape(2, 8)\n"
        "y, = s.run(None, {'x': x, 's': x})\n"
        "print(y.shape, 'onyx.runtime.kernels.quantize' in sys.modules)"
    )
    assert _registered_rare(code) == "(2, 8) False\n[]"


@pytest.mark.parametrize(("key", "module"), sorted(RARE.items()))
def test_each_rare_op_is_found_in_its_own_module(key, module):
    kernel = registry.lookup(key[1], key[0])
    assert kernel is not None and kernel.fn.__module__ == f"onyx.runtime.kernels.{module}"


def _model(nodes, inputs, outputs, inits=(), opset=19):
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_sessions_of_the_split_families_load_and_run_them(tmp_path):
    # (each session finds its kernels through the index, in a process that had none loaded;
    # the values are onnxruntime's)
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    w = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    model = _model(
        [
            helper.make_node("ConvTranspose", ["x", "w"], ["t"], strides=[2, 2]),
            helper.make_node("LpPool", ["t"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("GlobalLpPool", ["p"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", f, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", f, None)],
        [numpy_helper.from_array(w, "w")],
    )
    path = tmp_path / "rare.onnx"
    path.write_bytes(model.SerializeToString())
    np.save(tmp_path / "x.npy", x)
    code = (
        "import sys, numpy as np, onyx\n"
        f"s = onyx.InferenceSession({str(path)!r})\n"
        f"y, = s.run(None, {{'x': np.load({str(tmp_path / 'x.npy')!r})}})\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, y)\n"
        "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m in (\n"
        "    'onyx.runtime.kernels.conv_transpose', 'onyx.runtime.kernels.lp_pool',\n"
        "    'onyx.runtime.kernels.quantized_conv', 'onyx.runtime.kernels.roi_pool')))"
    )
    assert _fresh(code) == "['conv_transpose', 'lp_pool']"
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = ref.run(None, {"x": x})
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-5, atol=1e-5)


def test_a_sessions_creation_makes_no_dataclass_of_the_registrys_classes():
    # (registry.py's Kernel and OpTraits were @dataclass-decorated at its import: their
    # annotations read on every cold start, though a session never asks for their fields)
    code = (
        f"s = onyx.InferenceSession({str(TINY)!r})\n"
        "from onyx.ir.frozen import _PendingFields\n"
        "print(sorted(c.__name__ for c in (registry.Kernel, registry.OpTraits)\n"
        "    if not isinstance(c.__dict__['__dataclass_fields__'], _PendingFields)))"
    )
    assert _registered_rare(code) == "[]\n[]"


def test_the_registrys_classes_are_dataclasses_when_asked_and_traits_merge_declarations():
    import dataclasses

    assert [f.name for f in dataclasses.fields(registry.OpTraits)] == [
        "elementwise",
        "deterministic",
        "threads",
    ]
    with pytest.raises(TypeError, match="unknown trait"):  # (the names: OpTraits' fields)
        registry.op("Twice", since=1, domain="test.kernel_modules", elemwise=True)
    assert "attr_defaults" in {f.name for f in dataclasses.fields(registry.Kernel)}
    assert repr(registry.traits("Relu")) == (
        "OpTraits(elementwise=True, deterministic=True, threads=None)"
    )
    # (a second registration's traits update the first's, as dataclasses.replace did)
    key = ("test.kernel_modules", "Twice")
    try:
        registry.op(key[1], since=1, domain=key[0], elementwise=True)(lambda x: x)
        registry.op(key[1], since=2, domain=key[0], threads="pool")(lambda x: x)
        assert registry.traits(key[1], key[0]) == registry.OpTraits(
            elementwise=True, threads="pool"
        )
    finally:  # (the index's test compares every registered op with kernels/_index.py)
        tables = (registry._KERNELS, registry._TRAITS, registry._SOURCES)  # noqa: SLF001
        for table in tables:
            table.pop(key, None)


def test_erfs_series_table_is_the_float64_products_of_numpy():
    from onyx.runtime.kernels import elementwise

    want = tuple(
        1 / float(np.prod(np.arange(2 * n + 1, 0, -2, dtype=np.float64)))
        for n in range(elementwise._ERF_SERIES_TERMS - 1, -1, -1)  # noqa: SLF001
    )
    assert elementwise._ERF_SERIES == want  # noqa: SLF001


def test_a_quantized_cnns_session_registers_no_float_conv_or_pool(tmp_path):
    # (QLinearConv was conv.py's, and QLinearGlobalAveragePool pool.py's: a quantized CNN's
    # session read and ran the float Conv and the pools with conv1d, small_cnn and winograd)
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    consts = {
        "xs": np.float32(0.05), "xz": np.uint8(128), "w": rng.integers(-9, 9, (4, 3, 3, 3),
        dtype=np.int8), "ws": np.float32(0.01), "wz": np.int8(0), "ys": np.float32(0.1),
        "yz": np.uint8(100), "ps": np.float32(0.1), "pz": np.uint8(90),
    }  # fmt: skip
    nodes = [
        helper.make_node(
            "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["c"], pads=[1] * 4
        ),
        helper.make_node(
            "QLinearGlobalAveragePool", ["c", "ys", "yz", "ps", "pz"], ["y"],
            domain="com.microsoft",
        ),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    path = tmp_path / "qcnn.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=opsets).SerializeToString())
    code = (
        f"s = onyx.InferenceSession({str(path)!r})\n"
        "y, = s.run(None, {'x': np.full((1, 3, 8, 8), 140, np.uint8)})\n"
        "print(y.shape, sorted(k[1] for k in (('', 'Conv'), ('', 'MaxPool'))\n"
        "    if k in registry._KERNELS))"
    )
    # (without the native library the integer conv's numpy path runs: conv.py's im2col core)
    from onyx.runtime import native

    want = "[]" if native.available() else "['Conv']"
    assert _registered_rare(code).splitlines()[0] == f"(1, 4, 1, 1) {want}"


def test_a_cnn_whose_activations_are_fused_registers_no_activation_kernel(tmp_path):
    # (fused.py took FusedConv's sigmoid, hard sigmoid and hard swish from activation.py:
    # a ResNet's or a U-Net's session read and ran every activation kernel for them)
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )
    path = tmp_path / "cnn.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    code = (
        f"s = onyx.InferenceSession({str(path)!r})\n"
        "y, = s.run(None, {'x': np.ones((1, 3, 8, 8), np.float32)})\n"
        "print(sorted(n.op_type for n in s.plan.graph), y.shape,\n"
        "    sorted(k[1] for k in (('', 'Relu'), ('', 'Softmax')) if k in registry._KERNELS))"
    )
    got = _registered_rare(code).splitlines()[0]
    assert got == "['FusedConv', 'GlobalAveragePool'] (1, 4, 1, 1) []"
