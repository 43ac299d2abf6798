"""What a session's creation loads to validate and optimize a model (issue 23's cold start):
rules and passes of op families a model does not hold live in modules of their own, which
a float CNN's session does not import, and a model holding their ops still runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

import onyx
from onyx.inference.engine import RULES
from onyx.optimizer.pipeline import PIPELINE

TINY = Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx"

#: Modules split off the ones a CNN's session imports (and the JSON scanner defs once used).
SPLIT_OFF = (
    "onyx.optimizer.qdq_movement",
    "onyx.inference.select",
    "onyx.inference.spatial",
    "onyx.inference.signal",
    "onyx.checker_rare",
    "_json",
)


def test_a_cnn_session_does_not_import_the_rare_families():
    code = (
        "import sys, numpy as np, onyx\n"
        f"s = onyx.InferenceSession({str(TINY)!r})\n"
        "x = s.get_inputs()[0]\n"
        "s.run(None, {x.name: np.zeros([1, 1, 28, 28], np.float32)})\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    loaded = set(out.stdout.split())
    assert {"onyx.optimizer.fold", "onyx.inference.tensor", "onyx.inference.nn"} <= loaded
    assert not loaded & set(SPLIT_OFF)


def test_the_split_rules_are_found_by_their_ops():
    """Each moved rule is registered from its new module and infers as before."""
    where = {
        "TopK": "select",
        "GatherND": "select",
        "OneHot": "select",
        "Pad": "spatial",
        "Resize": "spatial",
        "RoiAlign": "spatial",
        "DFT": "signal",
        "HannWindow": "signal",
    }
    for op, module in where.items():
        assert RULES[("", op)].__module__ == f"onyx.inference.{module}", op
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["p"]),
        helper.make_node("TopK", ["p", "k"], ["v", "i"], axis=1),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])],
        [
            helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("i", TensorProto.INT64, None),
        ],
        [
            helper.make_tensor("pads", TensorProto.INT64, [4], [0, 1, 0, 2]),
            helper.make_tensor("k", TensorProto.INT64, [1], [3]),
        ],
    )
    m = onyx.loads(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    onyx.infer_shapes(m)
    shapes = {v.name: v.type.shape for v in m.graph.outputs}
    assert list(shapes["v"]) == ["N", 3] and list(shapes["i"]) == ["N", 3]


def test_a_quantized_model_runs_the_split_qdq_movement():
    """QDQDataMovement lives in qdq_movement.py (its trigger, DequantizeLinear): a QDQ
    model's session imports it and moves the Reshape onto the bytes."""
    (moving,) = [p for p in PIPELINE if p.name == "QDQDataMovement"]
    assert moving.fn.__module__ == "onyx.optimizer.qdq_movement"
    qdq = ["s", "zp"]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", *qdq], ["q0"]),
        helper.make_node("DequantizeLinear", ["q0", *qdq], ["d0"]),
        helper.make_node("Reshape", ["d0", "shape"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", *qdq], ["q1"]),
        helper.make_node("DequantizeLinear", ["q1", *qdq], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [
            helper.make_tensor("s", TensorProto.FLOAT, [], [0.05]),
            helper.make_tensor("zp", TensorProto.UINT8, [], [128]),
            helper.make_tensor("shape", TensorProto.INT64, [2], [3, 4]),
        ],
    )
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    code = (
        "import sys, numpy as np, onyx\n"
        f"s = onyx.InferenceSession({data!r})\n"
        "print('onyx.optimizer.qdq_movement' in sys.modules,\n"
        "    [n.op_type for n in s.plan.graph].count('QuantizeLinear'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "1"]
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(2, 6)
    (y,) = onyx.InferenceSession(data).run(None, {"x": x})
    q = np.clip(np.rint(x / np.float32(0.05)) + 128, 0, 255)
    np.testing.assert_array_equal(y, ((q - 128) * np.float32(0.05)).reshape(3, 4))


def test_the_rare_checks_are_made_in_their_module():
    """A local function's rules (checker_rare.py) still report: a function without a domain,
    and a call of it with more inputs than it takes."""
    body = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["b"])],
        "f",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
    )
    f = helper.make_function("", "MyRelu", ["a"], ["b"], body.node, [helper.make_opsetid("", 17)])
    g = helper.make_graph(
        [helper.make_node("MyRelu", ["x", "x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    m = helper.make_model(g, functions=[f], opset_imports=[helper.make_opsetid("", 17)])
    found = onyx.checker.problems(onyx.loads(m.SerializeToString()))
    assert {"function", "input-count"} <= {p.rule for p in found}
    assert "onyx.checker_rare" in sys.modules


def test_the_rule_index_is_one_string_found_by_op():
    """inference/_index.py holds one string (a dict of 261 keys cost a cold creation ~0.2 ms
    to unmarshal and build), read with str.find; MODULES is made from it when asked for."""
    from onyx.inference import _index

    assert isinstance(_index.TABLE, str)
    assert _index.module_of("", "TopK") == "select"
    assert _index.module_of("com.microsoft", "SkipLayerNormalization") == "contrib"
    assert _index.MODULES[("", "Conv")] == "nn"
    assert len(_index.MODULES) == _index.TABLE.count("\n") - 1
    for domain, op in (
        ("", "Relu\t"),
        ("", "NoSuchOp"),
        ("", "Abs\telementwise\n\tAcos"),
        ("", b"Abs"),
    ):
        assert _index.module_of(domain, op) is None
