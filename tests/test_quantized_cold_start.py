"""A quantized model's cold start, creation and first run (issue 23): the kernel modules a
session of a QDQ CNN or a dynamically quantized transformer imports are those it runs, the
QDQ fusion's classes make no dataclass fields at import, QDQDataMovement passes over the
nodes that start nothing by their op type alone, and the int8 GEMM's one-time set-up of a
quantized conv takes its zero points' scalar paths (no numpy reduction per zero point) and
packs a pointwise conv's weights from W itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from onyx.runtime import native
from onyx.runtime.native import _core

MODELS = Path(__file__).resolve().parent / "models"

_CHILD = """
import json, sys
import numpy as np
import onyx
from onyx.optimizer import qdq
so = onyx.SessionOptions()
so.intra_op_num_threads = 1
s = onyx.InferenceSession(sys.argv[1], so)
i = s.get_inputs()[0]
s.run(None, {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)})
print(json.dumps(sorted(
    c.__name__ for c in (qdq.QParams, qdq.Output, qdq.Fusion, qdq.Unary)
    if isinstance(c.__dict__["__dataclass_fields__"], dict)
)))
"""


def test_a_qdq_session_makes_no_dataclass_fields_of_the_fusions_classes():
    # (@dataclass read each class's annotations at every import: 0.2 ms of a QDQ model's
    # cold start; the fields are made when asked for, as tests/test_cold_import.py's)
    model = MODELS / "resnet_quant_qdq.onnx"
    out = subprocess.run([sys.executable, "-c", _CHILD, str(model)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == []


_MODULES = """
import sys
import numpy as np
import onyx
s = onyx.InferenceSession(sys.argv[1])
feeds = {
    i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape],
                     np.float32 if "float" in i.type else np.int64)
    for i in s.get_inputs()
}
s.run(None, feeds)
print(" ".join(sorted(m for m in sys.modules if m.startswith("onyx.runtime."))))
"""


def _session_modules(model: Path) -> set[str]:
    """The runtime modules a fresh process's session of ``model`` loaded (creation, a run)."""
    out = subprocess.run(
        [sys.executable, "-c", _MODULES, str(model)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


@pytest.mark.parametrize(
    ("model", "not_loaded"),
    [
        # (contrib.py imported activation.py, fused.py and elementwise.py's ~150 kernels for
        # two helpers and kernels no QDQ CNN runs; the int8 GEMM family imported the depthwise
        # family: a millisecond and a half of a quantized ResNet's cold start)
        (
            "resnet_quant_qdq.onnx",
            [
                "onyx.runtime.kernels.activation",
                "onyx.runtime.kernels.elementwise",
                "onyx.runtime.native.depthwise",
            ],
        ),
        (
            "bert_quant_dynamic.onnx",
            ["onyx.runtime.kernels.fused", "onyx.runtime.native.depthwise"],
        ),
    ],
)
def test_a_quantized_session_imports_only_the_kernels_it_runs(model, not_loaded):
    loaded = _session_modules(MODELS / model)
    assert "onyx.runtime.kernels.contrib" in loaded  # (the probe sees the kernel modules)
    assert [m for m in not_loaded if m in loaded] == []


def test_the_fusions_classes_still_compare_as_dataclasses():
    from dataclasses import fields

    from onyx.optimizer import qdq

    assert [f.name for f in fields(qdq.Unary)] == ["fused", "carried", "extra"]
    assert qdq.Unary("QLinearSigmoid") == qdq.Unary("QLinearSigmoid")
    assert qdq.Unary("QLinearSigmoid") != qdq.Unary("QLinearSigmoid", ("alpha",))
    assert "data" in [f.name for f in fields(qdq.QParams)]


@pytest.mark.skipif(not _core.vnni, reason="needs the native int8 GEMM (VNNI)")
def test_a_gathered_gemms_set_up_takes_its_scalar_zero_points_without_numpy(monkeypatch):
    # (np.any and np.ndim of a Python int cost microseconds each, five per set-up, one
    # set-up per conv at a quantized CNN's first run)
    rng = np.random.default_rng(5)
    b = native.pack(rng.integers(-128, 128, (36, 24), dtype=np.int8), np.uint8)
    bias = rng.integers(-500, 500, 24).astype(np.int32)
    scale, y_zp = np.full(24, 0.01, np.float32), np.array(7, np.uint8)

    def refused(*args, **kwargs):
        raise AssertionError("a numpy reduction of a scalar zero point")

    with monkeypatch.context() as m:
        m.setattr(np, "any", refused)
        m.setattr(np, "ndim", refused)
        for zx in (0, 3):
            gemm = native.gathered_int8_gemm(
                np.uint8, b, 10, 36, zx, col_bias=bias, scale=scale, y_zero_point=y_zp
            )
            assert gemm.reusable and gemm.requantize


@pytest.mark.skipif(not _core.vnni, reason="needs the native int8 GEMM (VNNI)")
def test_a_pointwise_convs_weights_are_packed_from_a_view_of_w(monkeypatch):
    # (its GEMM's B is W^T: no zeroed (kh, kw, Cp, M) array filled with a transposed copy
    # at its set-up) and the conv gives the same bytes as a 3x3 one's path of building B
    from onyx.runtime.kernels import quantized_conv
    from onyx.runtime.kernels.conv_geometry import _conv_geometry

    rng = np.random.default_rng(9)
    x = rng.integers(0, 256, (1, 8, 5, 5), dtype=np.uint8)
    w = rng.integers(-128, 128, (12, 8, 1, 1), dtype=np.int8)
    w.flags.writeable = False
    scale, y_zp = np.full(12, 0.004, np.float32), np.array(3, np.uint8)
    geo = _conv_geometry(x.shape, w.shape, "NOTSET", [0] * 4, [1, 1], [1, 1], [1, 1])
    packed_from = []
    pack = native.pack
    monkeypatch.setattr(native, "pack", lambda b, *a: packed_from.append(b) or pack(b, *a))
    make = quantized_conv._implicit_gemm_conv  # noqa: SLF001 (the set-up under test)
    conv = make(x, w, 5, None, scale, y_zp, geo)
    assert len(packed_from) == 1 and np.shares_memory(packed_from[0], w)
    # the same weights as a 3x3 conv's centre tap (padding 1): its B is built, not viewed
    w3 = np.zeros((12, 8, 3, 3), np.int8)
    w3[:, :, 1, 1] = w[:, :, 0, 0]
    w3.flags.writeable = False
    geo3 = _conv_geometry(x.shape, w3.shape, "NOTSET", [1] * 4, [1, 1], [1, 1], [3, 3])
    conv3 = make(x, w3, 5, None, scale, y_zp, geo3)
    assert not np.shares_memory(packed_from[-1], w3)
    np.testing.assert_array_equal(conv(x), conv3(x))


def test_qdq_data_movement_passes_nodes_that_start_nothing_by_their_op_type(monkeypatch):
    # (it walks the graph again after every change of the basic rounds: six times at a
    # quantized transformer's creation, where two is_op calls a node, a ten-name tuple
    # built for one of them, were most of its time)
    from onnx import TensorProto, helper, numpy_helper

    import onyx
    from onyx.optimizer import qdq_movement

    relus = [helper.make_node("Relu", [f"r{i}"], [f"r{i + 1}"]) for i in range(40)]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["r0"]),
        *relus,
        helper.make_node("Reshape", ["r40", "shape"], ["m"]),
        helper.make_node("QuantizeLinear", ["m", "s", "zp"], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", "s", "zp"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        numpy_helper.from_array(np.array(128, np.uint8), "zp"),
        numpy_helper.from_array(np.array([8], np.int64), "shape"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    asked = []
    is_op = qdq_movement.is_op
    monkeypatch.setattr(
        qdq_movement, "is_op", lambda node, *ops: asked.append(node) or is_op(node, *ops)
    )
    stats: dict = {}
    onyx.optimize(onyx.loads(model.SerializeToString()), stats=stats)
    # (a walk asks of the Relu the Reshape reads, as its producer; it asked of all 40, twice)
    assert 0 < sum(n.op_type == "Relu" for n in asked) < 10
