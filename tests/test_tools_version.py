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


# -- function bodies written out and older forms of newer operators -------------------------

#: (node-suite case, targets): Attention (23-25), the losses (12/13), Pad / Resize with axes
#: (18), ConstantOfShape (9), Expand (8), GatherElements (11), Trilu (14), each converted
#: below its introduction; every conversion must give the case's expected outputs.
BODY_CASES = [
    ("test_attention_3d_gqa_with_past_and_present", [13, 19, 22]),
    ("test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal", [9, 13]),
    ("test_attention_4d_attn_mask_bool", [9, 19]),
    ("test_attention_4d_softcap", [7, 13]),
    ("test_attention_4d_gqa_causal", [7]),
    ("test_attention_3d_diff_heads_sizes_causal", [7]),
    ("test_attention_4d_fp16", [13]),
    ("test_attention_24_qk_matmul_output_mode3_softmax_precision", [19]),
    ("test_attention_23_boolmask_fullymasked_row_nan_robustness", [13]),
    ("test_attention_4d_causal_nonpad_attn_mask_composition", [13]),
    ("test_attention_4d_gqa_causal_nonpad_decode", [19]),
    ("test_attention_local_window_with_past", [13, 24]),
    ("test_attention_bidirectional_window", [19]),
    ("test_sce_NCd1d2d3_sum_weight_high_ii", [9, 11]),
    ("test_sce_mean_weight_log_prob", [9, 11]),
    ("test_sce_NCd1d2d3d4d5_mean_weight", [7]),
    ("test_nllloss_NCd1d2_with_weight_reduction_mean", [7, 9, 11]),
    ("test_nllloss_NC", [9, 11]),
    ("test_nllloss_NCd1_ii", [9]),
    ("test_constant_pad_axes", [11, 13, 17]),
    ("test_constant_pad_negative_axes", [13]),
    ("test_resize_upsample_scales_nearest_axes_3_2", [11, 13]),
    ("test_resize_tf_crop_and_resize_axes_2_3", [11, 17]),
    ("test_resize_upsample_sizes_nearest_axes_2_3", [11, 13]),
    ("test_constantofshape_float_ones", [7, 8]),
    ("test_expand_dim_changed", [7]),
    ("test_gather_elements_negative_indices", [7, 9]),
    ("test_gather_elements_1", [7]),
    ("test_tril_neg", [9, 13]),
    ("test_triu_one_row", [9]),
    ("test_causal_conv_with_state_with_bias_and_past_state", [7, 13, 19]),
    ("test_causal_conv_with_state_silu_fp16", [13]),
    ("test_causal_conv_with_state_kernel_size_one", [11]),
    ("test_linear_attention_gated_delta_gqa", [7, 19]),
    ("test_linear_attention_gated_per_head_decay", [13]),
    ("test_linear_attention_decode_step", [13]),
    ("test_linear_attention_delta", [25]),
    ("test_linear_attention_fp16", [19]),
    ("test_scan_sum", [9, 16]),  # Scan-8's batch axis: an outer Scan over it
    ("test_scan9_sum", [8]),  # and back: a batch of one
    ("test_flatten_negative_axis2", [7]),  # (a negative axis from 11)
    ("test_dequantizelinear_axis", [7, 11]),  # per-axis before 13: the arithmetic
    ("test_dequantizelinear_uint16", [13]),  # (uint16 exists from 21)
    ("test_rotary_embedding_3d_input", [7, 19]),
    ("test_rotary_embedding_with_interleaved_rotary_dim", [13]),
    ("test_rotary_embedding_no_position_ids_rotary_dim", [22]),
    ("test_cumprod_1d_reverse_exclusive", [7, 19]),
    ("test_cumprod_1d_int32_exclusive", [13]),
    ("test_linear_attention_gated_delta_expanded", [13]),  # CastLike in a Scan body
    ("test_center_crop_pad_crop_and_pad", [11, 17]),  # (the shape fed at run time)
    ("test_center_crop_pad_crop_negative_axes_hwc", [13]),
    ("test_blackmanwindow", [7]),
    ("test_onehot_out_of_range_indices", [9]),  # negatives count from the end from 11  # Range's body: a Loop whose body inputs need types
    ("test_triu", [11]),
]  # fmt: skip


def _check_conversion(case, target: int) -> list[str]:
    """Convert ``case`` to ``target``: problems found when onyx (and onnxruntime up to 23)
    run the conversion against the case's expected outputs."""
    ins, outs = case.data_sets[0]
    inits = {t.name for t in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in inits]
    feeds = {k: _array(v) for k, v in zip(names, ins)}
    want = [_array(o) for o in outs]
    m = onyx.convert_version(onyx.loads(case.model.SerializeToString()), target)
    assert m.opset("") == target
    data = onyx.dumps(m)
    problems = []
    runners = {"onyx": lambda: onyx.InferenceSession(data).run(None, feeds)}
    if target <= 23:
        sess = lambda: ort.InferenceSession(data, providers=["CPUExecutionProvider"])  # noqa: E731
        runners["onnxruntime"] = lambda: sess().run(None, feeds)
    for who, run in runners.items():
        got = run()
        for g, w in zip(got, want):
            try:
                np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                           rtol=case.rtol, atol=case.atol)  # fmt: skip
            except AssertionError:
                problems.append(f"{case.name} -> {target}: {who} differs")
    return problems


def test_bodies_and_older_forms_give_the_expected_outputs():
    by_name = {c.name: c for c in node_cases()}
    problems = []
    for name, targets in BODY_CASES:
        for target in targets:
            problems += _check_conversion(by_name[name], target)
    assert not problems, problems


def test_expansions_leave_no_newer_operator():
    by_name = {c.name: c for c in node_cases()}
    for name, op, target in (
        ("test_attention_4d_gqa_causal", "Attention", 13),
        ("test_sce_mean_weight_log_prob", "SoftmaxCrossEntropyLoss", 11),
        ("test_gather_elements_negative_indices", "GatherElements", 9),
        ("test_tril_neg", "Trilu", 13),
    ):
        m = onyx.convert_version(onyx.loads(by_name[name].model.SerializeToString()), target)
        assert op not in {n.op_type for n in m.graph}, (name, target)


def _parse(text: str):
    return onyx.parse_model(text)


def test_pad_axes_up_and_down():
    m = _parse(
        """<ir_version: 8, opset_import: ["" : 18]>
        g (float[2, 3, 4] x, int64[4] p) => (float[?, ?, ?] y, float[?, ?, ?] z) {
            a = Constant <value: tensor = int64[1] {-1}> ()
            q = Constant <value: tensor = int64[2] {1, 2}> ()
            [const] y = Pad (x, q, , a)
            ax = Constant <value: tensor = int64[2] {0, 2}> ()
            [computed] z = Pad <mode: string = "edge"> (x, p, , ax)
        }"""
    )
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    feeds = {"x": x, "p": np.array([1, 0, 2, 1], np.int64)}
    want = onyx.InferenceSession(onyx.dumps(m)).run(None, feeds)
    for target in (11, 13, 17):
        down = onyx.convert_version(m, target)
        assert all(len(n.inputs) <= 3 for n in down.graph if n.op_type == "Pad")
        got = ort.InferenceSession(onyx.dumps(down), providers=["CPUExecutionProvider"]).run(
            None, feeds
        )
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        back = onyx.convert_version(down, 18)  # and up again: full-rank pads, no axes
        for a, b in zip(onyx.InferenceSession(onyx.dumps(back)).run(None, feeds), want):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(onyx.OnyxError, match="node 'computed' \\(Pad\\): computed values"):
        onyx.convert_version(m, 7)  # (pads as an attribute: the computed pads have no form)


def test_resize_axes_down_with_computed_scales():
    m = _parse(
        """<ir_version: 8, opset_import: ["" : 18]>
        g (float[1, 1, 2, 3] x, float[2] s) => (float[?, ?, ?, ?] y) {
            [r] y = Resize <axes: ints = [3, 2], mode: string = "nearest"> (x, , s)
        }"""
    )
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3),
             "s": np.array([2.0, 3.0], np.float32)}  # fmt: skip
    (want,) = onyx.InferenceSession(onyx.dumps(m)).run(None, feeds)
    down = onyx.convert_version(m, 13)
    assert "ScatterElements" in {n.op_type for n in down.graph}
    (got,) = ort.InferenceSession(onyx.dumps(down), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    np.testing.assert_array_equal(got, want)
    assert want.shape == (1, 1, 6, 6)
    with pytest.raises(onyx.OnyxError, match="node 'r' \\(Resize\\)"):
        onyx.convert_version(m, 10)


def test_attention_with_dynamic_lengths():
    """Symbolic sequence lengths: the causal frontier from Range (from 11), a short mask padded
    by a computed Pad; compared with onyx running the opset-23 node."""
    m = _parse(
        """<ir_version: 10, opset_import: ["" : 23]>
        g (float[B, S, 64] q, float[B, S, 32] k, float[B, S, 32] v, float[B, 2, P, 16] pk,
           float[B, 2, P, 16] pv, float[S, M] mask)
          => (float[B, S, 64] y, float[B, 2, T, 16] ok, float[B, 2, T, 16] ov,
              float[B, S, 64] y2) {
          [sdpa] y, ok, ov = Attention <is_causal: int = 1, q_num_heads: int = 4,
                                        kv_num_heads: int = 2> (q, k, v, , pk, pv)
          y2 = Attention <q_num_heads: int = 4, kv_num_heads: int = 2> (q, k, v, mask, pk, pv)
        }"""
    )
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in (
        ("q", (2, 5, 64)), ("k", (2, 5, 32)), ("v", (2, 5, 32)), ("pk", (2, 2, 3, 16)),
        ("pv", (2, 2, 3, 16)), ("mask", (5, 6)))}  # fmt: skip
    feeds["mask"][1] = -np.inf  # a fully masked row over the mask's keys (the 7th: padded)
    want = onyx.InferenceSession(onyx.dumps(m)).run(None, feeds)
    for target in (11, 17, 22):
        down = onyx.convert_version(m, target)
        assert "Attention" not in {n.op_type for n in down.graph}
        sess = ort.InferenceSession(onyx.dumps(down), providers=["CPUExecutionProvider"])
        for got, ref in zip(sess.run(None, feeds), want):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(onyx.OnyxError, match="node 'sdpa' \\(Attention\\): a dynamic"):
        onyx.convert_version(m, 9)


def test_cumprod_along_a_constant_axis():
    m = _parse(
        """<ir_version: 8, opset_import: ["" : 26]>
        g (float[2, 3] x) => (float[2, 3] y) {
            a = Constant <value: tensor = int64 {-1}> ()
            y = CumProd <reverse: int = 1> (x, a)
        }"""
    )
    x = np.array([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]], np.float32)
    (want,) = onyx.InferenceSession(onyx.dumps(m)).run(None, {"x": x})
    np.testing.assert_array_equal(want, np.flip(np.cumprod(np.flip(x, 1), 1), 1))
    for target in (7, 21):
        down = onyx.convert_version(m, target)
        (got,) = ort.InferenceSession(onyx.dumps(down), providers=["CPUExecutionProvider"]).run(
            None, {"x": x}
        )
        np.testing.assert_array_equal(got, want)


def test_center_crop_pad_down():
    m = _parse(
        """<ir_version: 8, opset_import: ["" : 18]>
        g (float[3, 5, 2] x) => (float[?, ?, ?] y) {
            s = Constant <value: tensor = int64[2] {2, 5}> ()
            y = CenterCropPad <axes: ints = [0, -1]> (x, s)
        }"""
    )
    x = np.arange(30, dtype=np.float32).reshape(3, 5, 2)
    (want,) = onyx.InferenceSession(onyx.dumps(m)).run(None, {"x": x})
    assert want.shape == (2, 5, 5)
    computed = _parse(
        """<ir_version: 8, opset_import: ["" : 18]>
        g (float[3, 5, 2] x, int64[2] s) => (float[?, ?, ?] y) {
            y = CenterCropPad <axes: ints = [0, -1]> (x, s)
        }"""
    )
    size = {"s": np.array([2, 5], np.int64)}  # odd surplus (3 -> 2), odd shortfall (2 -> 5)
    for model, feeds, targets in ((m, {}, (7, 13)), (computed, size, (11, 17))):
        for target in targets:
            down = onyx.convert_version(model, target)
            assert "CenterCropPad" not in {n.op_type for n in down.graph}
            sess = ort.InferenceSession(onyx.dumps(down), providers=["CPUExecutionProvider"])
            (got,) = sess.run(None, {"x": x, **feeds})
            np.testing.assert_array_equal(got, want)


def test_body_steps_the_target_does_not_type_are_refused():
    by_name = {c.name: c for c in node_cases()}
    mod = onyx.loads(by_name["test_mod_float64_mixed_sign_fmod_0"].model.SerializeToString())
    with pytest.raises(onyx.OnyxError, match="Mod.*fmod=0 .* from 28"):
        onyx.convert_version(mod, 13)  # (Mod-13 takes floats with fmod=1 only)
    celu = onyx.loads(by_name["test_celu_bfloat16"].model.SerializeToString())
    # Celu's body runs Elu, which takes bfloat16 from 22 only
    with pytest.raises(onyx.OnyxError, match="Elu.*bfloat16.*made by the conversion"):
        onyx.convert_version(celu, 19)


def test_refusals_of_the_expansions_name_the_node():
    attention = _parse(
        """<ir_version: 10, opset_import: ["" : 23]>
        g (float[1, 2, 3, 4] q, float[1, 2, 3, 4] k, float[1, 2, 3, 4] v, bool[3, 3] m)
            => (float[1, 2, 3, 4] y) { [att] y = Attention (q, k, v, m) }"""
    )
    with pytest.raises(onyx.OnyxError, match="node 'att' \\(Attention\\): a boolean attn_mask"):
        onyx.convert_version(attention, 7)
    text = """<ir_version: 8, opset_import: ["" : 13]>
        g (float[N, 3] x, int64[N] t) => (float y) {
            [nll] y = NegativeLogLikelihoodLoss <ignore_index: int = -100> (x, t)
        }"""
    loss, static = _parse(text), _parse(text.replace("[N, 3]", "[3, 3]"))
    with pytest.raises(onyx.OnyxError, match="node 'nll' .*unknown shape"):
        onyx.convert_version(loss, 7)  # (no GatherElements, OneHot, nor static offsets)
    x = np.log(np.array([[0.2, 0.3, 0.5], [0.1, 0.6, 0.3], [0.4, 0.4, 0.2]], np.float32))
    feeds = {"x": x, "t": np.array([1, -100, 0], np.int64)}
    (want,) = onyx.InferenceSession(onyx.dumps(loss)).run(None, feeds)
    for model, target in ((loss, 9), (static, 7)):  # Where from 9; before, the weight's zero
        m = onyx.convert_version(model, target)
        (got,) = ort.InferenceSession(onyx.dumps(m), providers=["CPUExecutionProvider"]).run(
            None, feeds
        )
        np.testing.assert_allclose(got, want, rtol=1e-6)
