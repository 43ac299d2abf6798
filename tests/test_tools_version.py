"""onyx.convert_version on onnx's node-suite models: converted models give the expected
outputs (run by onyx and by onnxruntime), and onyx converts at least what
onnx.version_converter converts. The full sweep (every case to opsets 7..28) is
scripts/version_converter_sweep.py; this is a sample of the adapters' cases."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.version_converter
import onnxruntime as ort
import pytest
from tools_node_suite import node_cases

import onyx

CASES = [
    "test_reduce_sum_keepdims_example", "test_reduce_max_keepdims_example",
    "test_split_variable_parts_2d_opset18", "test_unsqueeze_two_axes", "test_constant_pad",
    "test_clip_default_min", "test_slice", "test_softmax_axis_0", "test_logsoftmax_axis_0",
    "test_resize_upsample_scales_nearest", "test_batchnorm_example", "test_top_k",
    "test_dropout_default", "test_shape_start_1_end_2", "test_castlike_FLOAT_to_DOUBLE",
    "test_layer_normalization_2d_axis0", "test_hardswish", "test_gemm_default_no_bias",
    "test_add_bcast", "test_constant",
]  # fmt: skip
TARGETS = [7, 12, 19]


def _array(x):
    return onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else np.asarray(x)


def _close(got, want, case) -> bool:
    try:
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.atol)
        return True
    except AssertionError:
        return False


def test_converted_node_models_give_the_expected_outputs():
    by_name = {c.name: c for c in node_cases()}
    ours = theirs = correct = 0
    wrong = []
    for name in CASES:
        case = by_name[name]
        ins, outs = case.data_sets[0]
        inputs = [i.name for i in case.model.graph.input]
        feeds = {k: _array(v) for k, v in zip(inputs, ins)}
        outs = [_array(o) for o in outs]
        for target in TARGETS:
            try:
                onnx.version_converter.convert_version(case.model, target)
                theirs += 1
            except Exception:
                pass
            try:
                m = onyx.convert_version(onyx.loads(case.model.SerializeToString()), target)
            except onyx.OnyxError:
                continue
            ours += 1
            data = onyx.dumps(m)
            assert m.opset("") == target
            got = onyx.InferenceSession(data).run(None, feeds)
            ok = _close(got, outs, case)
            ok &= _close(
                ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds),
                outs,
                case,
            )
            correct += ok
            if not ok:
                wrong.append((name, target))
    assert not wrong, wrong
    assert ours >= 40 and ours > theirs, (ours, theirs)


def test_softmax_semantics_change_at_13():
    m = onyx.parse_model(
        """<ir_version: 7, opset_import: ["" : 11]>
        g (float[2, 3, 4] x) => (float[2, 3, 4] y) { y = Softmax <axis: int = 1> (x) }"""
    )
    up = onyx.convert_version(m, 13)
    assert [n.op_type for n in up.graph] == ["Flatten", "Shape", "Softmax", "Reshape"]
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    (want,) = onyx.InferenceSession(onyx.dumps(m)).run(None, {"x": x})
    (got,) = ort.InferenceSession(onyx.dumps(up), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    np.testing.assert_allclose(got, want, rtol=1e-6)
    down = onyx.convert_version(onyx.convert_version(m, 13), 11)
    (back,) = onyx.InferenceSession(onyx.dumps(down)).run(None, {"x": x})
    np.testing.assert_allclose(back, want, rtol=1e-6)


def test_refusals_name_the_node():
    m = onyx.parse_model(
        """<ir_version: 8, opset_import: ["" : 18]>
        g (float[2, 3] x, int64[1] a) => (float[2, 1] y) { [r] y = ReduceMax (x, a) }"""
    )
    with pytest.raises(
        onyx.OnyxError, match="node 'r' \\(ReduceMax\\): input 1 \\(axes\\) is computed"
    ):
        onyx.convert_version(m, 13)
    acosh = onyx.parse_model(
        """<ir_version: 8, opset_import: ["" : 20]>
        g (float[2] x) => (float[2] y) { [a] y = Acosh (x) }"""
    )
    with pytest.raises(onyx.OnyxError, match="node 'a' \\(Acosh\\): .*no function body"):
        onyx.convert_version(acosh, 7)
    g = onyx.parse_model(
        """<ir_version: 8, opset_import: ["" : 20]>
        g (float[2, 3] x) => (float[2, 3] y, float[2, 3] z) {
            y = HardSwish (x)
            z = Gelu <approximate: string = "tanh"> (x)
        }"""
    )
    down = onyx.convert_version(g, 13)  # HardSwish (14): its function body; Gelu (20): written
    assert not {"HardSwish", "Gelu"} & {n.op_type for n in down.graph} and down.opset("") == 13
    x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    want = onyx.InferenceSession(onyx.dumps(g)).run(None, {"x": x})
    got = ort.InferenceSession(onyx.dumps(down), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
