"""Transformer contrib ops (com.microsoft) against onnxruntime on one-node models.

Each case builds a node with onnx.helper, runs it in onnxruntime (the oracle) and in onyx,
and compares every output; shape inference must agree with the shapes that come out.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from conftest import run_onnx
from onnx import TensorProto, helper, numpy_helper

import onyx

MS = "com.microsoft"
I32 = TensorProto.INT32


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _f(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _model(op_type, inputs: dict, n_out=1, domain=MS, out_types=None, initializers=(), **attrs):
    """One node; ``inputs`` maps names to arrays in order (None: an omitted optional input)."""
    names = [k if v is not None else "" for k, v in inputs.items()]
    while names and not names[-1]:
        names.pop()
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op_type, names, outs, domain=domain, **attrs)
    feeds = {k: v for k, v in inputs.items() if v is not None and k not in initializers}
    graph = helper.make_graph(
        [node],
        op_type,
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in feeds.items()
        ],
        [
            helper.make_tensor_value_info(o, (out_types or {}).get(i, TensorProto.FLOAT), None)
            for i, o in enumerate(outs)
        ],
        initializer=[numpy_helper.from_array(inputs[k], k) for k in initializers],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=9), feeds


def _check(model, feeds, rtol=1e-4, atol=1e-5, exact=()):
    """onyx's outputs against onnxruntime's; outputs in ``exact`` bit for bit. Returns onyx's."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)
    actual = [np.asarray(a) for a in run_onnx(model, feeds)]
    for i, (e, a) in enumerate(zip(expected, actual)):
        assert a.dtype == e.dtype and a.shape == e.shape, (i, a.dtype, e.dtype, a.shape, e.shape)
        if i in exact:
            np.testing.assert_array_equal(a, e, err_msg=f"output {i}")
        else:
            scale = max(1.0, float(np.abs(e).max(initial=0)))
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol * scale, err_msg=f"output {i}")
    _check_inference(model, actual)
    return actual


def _check_inference(model, actual) -> None:
    """Every dim shape inference states for an output is the dim that came out."""
    typed = onyx.infer_shapes(_onyx_model(model))
    for v, a in zip(typed.graph.outputs, actual):
        shape = getattr(v.type, "shape", None)
        if shape is None:
            continue
        assert shape.rank == a.ndim, (v.name, shape, a.shape)
        for d, n in zip(shape.dims, a.shape):
            assert not isinstance(d, int) or d == n, (v.name, shape, a.shape)


def _onyx_model(model):
    from onyx import serde

    return serde.loads(model.SerializeToString())


# ---------------------------------------------------------------------------------------------
# GroupQueryAttention


def _gqa_inputs(rng, batch=2, q_len=3, past=0, heads=4, kv_heads=2, head=16, *, total=None,
                seqlens=None, cache=None, rotary=False, packed=False, position_ids=False,
                bias=False, sink=False):  # fmt: skip
    total = past + q_len if total is None else total
    cache = past if cache is None else cache
    q = _f(rng, batch, q_len, heads * head)
    k, v = _f(rng, batch, q_len, kv_heads * head), _f(rng, batch, q_len, kv_heads * head)
    inputs = {"query": np.concatenate([q, k, v], -1) if packed else q}
    inputs["key"], inputs["value"] = (None, None) if packed else (k, v)
    has_cache = cache > 0
    inputs["past_key"] = _f(rng, batch, kv_heads, cache, head) if has_cache else None
    inputs["past_value"] = _f(rng, batch, kv_heads, cache, head) if has_cache else None
    lengths = [total - 1] * batch if seqlens is None else seqlens
    inputs["seqlens_k"] = np.array(lengths, np.int32)
    inputs["total_sequence_length"] = np.array(total, np.int32)
    angles = _f(rng, 64, head // 2)
    inputs["cos_cache"] = np.cos(angles) if rotary else None
    inputs["sin_cache"] = np.sin(angles) if rotary else None
    ids = (np.arange(q_len)[None] + np.full((batch, 1), past)).astype(np.int64)
    inputs["position_ids"] = ids if position_ids else None
    inputs["attention_bias"] = _f(rng, batch, 1, q_len, total) if bias else None
    inputs["head_sink"] = _f(rng, heads) if sink else None
    return inputs


GQA_CASES = {
    "prompt": ({}, {}),
    "decode": ({"q_len": 1, "past": 5}, {}),
    "decode_shared_buffer": ({"q_len": 1, "past": 5, "cache": 10}, {}),
    "prompt_shared_buffer": ({"q_len": 4, "cache": 10}, {}),
    "ragged_decode": ({"q_len": 1, "past": 5, "cache": 10, "seqlens": [5, 3], "total": 6}, {}),
    "subsequent_prompt": ({"batch": 1, "q_len": 3, "past": 2}, {}),
    "local_window": ({"q_len": 6}, {"local_window_size": 2}),
    "local_window_decode": ({"q_len": 1, "past": 7}, {"local_window_size": 3}),
    "softcap": ({"q_len": 4}, {"softcap": 2.0}),
    "scale": ({}, {"scale": 0.3}),
    "rotary": ({"q_len": 4, "rotary": True}, {"do_rotary": 1}),
    "rotary_decode": ({"q_len": 1, "past": 4, "rotary": True}, {"do_rotary": 1}),
    "rotary_interleaved": (
        {"q_len": 1, "past": 4, "rotary": True},
        {"do_rotary": 1, "rotary_interleaved": 1},
    ),
    "rotary_subsequent_prompt": ({"batch": 1, "past": 2, "rotary": True}, {"do_rotary": 1}),
    "rotary_position_ids": (
        {"q_len": 1, "past": 3, "rotary": True, "position_ids": True},
        {"do_rotary": 1},
    ),
    "packed_qkv": ({"packed": True, "rotary": True}, {"do_rotary": 1}),
    "smooth_softmax": ({}, {"smooth_softmax": 1}),
    "head_sink": ({"sink": True}, {}),
    "attention_bias": ({"batch": 1, "past": 2, "bias": True}, {}),
    "bias_softcap": ({"batch": 1, "past": 2, "bias": True}, {"softcap": 1.5}),
    "not_causal": ({}, {"causal": 0}),
    "mqa": ({"heads": 4, "kv_heads": 1}, {}),
}


@pytest.mark.parametrize("case", list(GQA_CASES))
def test_group_query_attention(case):
    shape_args, attrs = GQA_CASES[case]
    inputs = _gqa_inputs(_rng(len(case)), **shape_args)
    heads, kv_heads = shape_args.get("heads", 4), shape_args.get("kv_heads", 2)
    model, feeds = _model("GroupQueryAttention", inputs, 3, num_heads=heads,
                          kv_num_heads=kv_heads, **attrs)  # fmt: skip
    _check(model, feeds, exact=(2,) if not attrs.get("do_rotary") else ())


@pytest.mark.parametrize("mode", [1, 2])
def test_group_query_attention_qk_output(mode):
    inputs = _gqa_inputs(_rng(mode), batch=1, q_len=3, past=2)
    model, feeds = _model("GroupQueryAttention", inputs, 4, num_heads=4, kv_num_heads=2,
                          qk_output=mode)  # fmt: skip
    _check(model, feeds)


def test_group_query_attention_rejects_quantized_cache():
    inputs = _gqa_inputs(_rng(), q_len=1, past=2)
    model, feeds = _model("GroupQueryAttention", inputs, 3, num_heads=4, kv_num_heads=2,
                          k_quant_type="PER_TENSOR")  # fmt: skip
    with pytest.raises(onyx.OnyxError, match="quantized KV"):
        run_onnx(model, feeds)


# ---------------------------------------------------------------------------------------------
# Attention, MultiHeadAttention, QAttention


def _attention_inputs(rng, batch=2, q_len=3, past=0, heads=2, head=8, d_in=12, *, mask=None,
                      bias=True, attention_bias=False, sizes=None):  # fmt: skip
    sizes = sizes or [heads * head] * 3
    return {
        "input": _f(rng, batch, q_len, d_in),
        "weights": _f(rng, d_in, sum(sizes)) * 0.5,
        "bias": _f(rng, sum(sizes)) if bias else None,
        "mask_index": mask,
        "past": _f(rng, 2, batch, heads, past, head) if past else None,
        "attention_bias": _f(rng, batch, 1, q_len, past + q_len) if attention_bias else None,
    }


def _i32(x) -> np.ndarray:
    return np.array(x, np.int32)


ATTENTION_CASES = {
    "plain": ({}, {}),
    "no_bias": ({"bias": False}, {}),
    "unidirectional": ({}, {"unidirectional": 1}),
    "lengths": ({"mask": _i32([2, 3])}, {}),
    "ends_and_starts": ({"mask": _i32([3, 3, 1, 0])}, {}),
    "raw_2d": ({"mask": _i32([[1, 1, 0], [1, 0, 1]])}, {}),
    "raw_2d_causal": ({"mask": _i32([[1, 1, 0], [1, 0, 1]])}, {"unidirectional": 1}),
    "raw_3d": ({"mask": _i32(_rng(3).integers(0, 2, (2, 3, 3)))}, {}),
    "fully_masked_row": ({"mask": _i32([[0, 0, 0], [1, 0, 1]])}, {}),
    "filter_value": ({"mask": _i32([[1, 1, 0], [1, 0, 1]])}, {"mask_filter_value": -5.0}),
    "past": ({"past": 4}, {"unidirectional": 1}),
    "past_and_mask": (
        {"past": 4, "mask": _i32([[0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0]])},
        {"unidirectional": 1},
    ),
    "attention_bias": ({"attention_bias": True}, {}),
    "qkv_hidden_sizes": ({"sizes": [16, 16, 8]}, {"qkv_hidden_sizes": [16, 16, 8]}),
    "scale": ({}, {"scale": 0.2}),
}


@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_attention(case):
    shape_args, attrs = ATTENTION_CASES[case]
    inputs = _attention_inputs(_rng(len(case)), **shape_args)
    n_out = 2 if inputs["past"] is not None else 1
    model, feeds = _model("Attention", inputs, n_out, num_heads=2, **attrs)
    _check(model, feeds, exact=(1,))


def _mha_inputs(rng, kind: str):
    b, s, kv, h, d = 2, 3, 4, 2, 8
    q, k, v = _f(rng, b, s, h * d), _f(rng, b, kv, h * d), _f(rng, b, kv, h * d)
    inputs = {"query": q, "key": k, "value": v}
    if kind == "self":
        inputs["key"], inputs["value"] = _f(rng, b, s, h * d), _f(rng, b, s, h * d)
    elif kind == "bias":
        inputs["bias"] = _f(rng, 3 * h * d)
    elif kind == "padding_mask":
        inputs.update(bias=None, key_padding_mask=_i32([[1, 1, 0, 1], [1, 0, 0, 0]]))
    elif kind == "lengths":
        inputs.update(bias=None, key_padding_mask=_i32([2, 4]))
    elif kind == "past":
        inputs.update(key=_f(rng, b, s, h * d), value=_f(rng, b, s, h * d), bias=None,
                      key_padding_mask=None, attention_bias=_f(rng, b, h, s, 5 + s),
                      past_key=_f(rng, b, h, 5, d), past_value=_f(rng, b, h, 5, d))  # fmt: skip
    elif kind == "bnsh_kv":
        inputs.update(key=_f(rng, b, h, kv, d), value=_f(rng, b, h, kv, d))
    return inputs


@pytest.mark.parametrize("kind", ["self", "bias", "padding_mask", "lengths", "past", "bnsh_kv",
                                  "packed_qkv"])  # fmt: skip
def test_multi_head_attention(kind):
    inputs = _mha_inputs(_rng(len(kind)), kind)
    n_out = 4 if kind == "past" else 1
    attrs = {"unidirectional": 1} if kind == "past" else {}
    model, feeds = _model("MultiHeadAttention", inputs, n_out, num_heads=2, **attrs)
    _check(model, feeds, exact=(1, 2))


def test_multi_head_attention_packed_qkv_as_separate_inputs():
    # (onnxruntime's CPU kernel refuses packed QKV: the oracle is the unpacked call, checked above)
    packed = _f(_rng(12), 2, 3, 2, 3, 8)
    model, feeds = _model("MultiHeadAttention", {"query": packed}, num_heads=2)
    q, k, v = (packed[:, :, :, i].reshape(2, 3, 16) for i in range(3))
    plain, plain_feeds = _model("MultiHeadAttention", {"q": q, "k": k, "v": v}, num_heads=2)
    expected = _check(plain, plain_feeds)[0]
    np.testing.assert_allclose(run_onnx(model, feeds)[0], expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("weight_type", [np.int8, np.uint8])
@pytest.mark.parametrize("variant", ["lengths", "past", "per_column"])
def test_q_attention(weight_type, variant):
    rng = _rng(7)
    b, s, h, d, d_in = 2, 3, 2, 8, 12
    info = np.iinfo(weight_type)
    inputs = {
        "input": rng.integers(0, 256, (b, s, d_in)).astype(np.uint8),
        "weight": rng.integers(info.min, info.max + 1, (d_in, 3 * h * d)).astype(weight_type),
        "bias": _f(rng, 3 * h * d),
        "input_scale": np.array(0.02, np.float32),
        "weight_scale": np.array(0.01, np.float32),
        "mask_index": _i32([3, 2]) if variant == "lengths" else None,
        "input_zero_point": np.array(120, np.uint8),
        "weight_zero_point": np.array(3, weight_type) if variant == "lengths" else None,
        "past": _f(rng, 2, b, h, 4, d) if variant == "past" else None,
    }
    if variant == "per_column":
        inputs["weight_scale"] = np.abs(_f(rng, 3 * h * d)) * 0.01
    n_out = 2 if variant == "past" else 1
    attrs = {"unidirectional": 1} if variant == "past" else {}
    model, feeds = _model("QAttention", inputs, n_out, num_heads=h, **attrs)
    _check(model, feeds, exact=(1,))


# ---------------------------------------------------------------------------------------------
# RotaryEmbedding


@pytest.mark.parametrize(
    "layout, positions, attrs",
    [
        ("3d", "offset", {"num_heads": 2}),
        ("3d", "per_token", {"interleaved": 1}),
        ("4d", "per_token", {}),
        ("3d", "per_token", {"num_heads": 2, "rotary_embedding_dim": 8}),
        ("3d", "per_token", {"num_heads": 2, "rotary_embedding_dim": 8, "interleaved": 1}),
    ],
)
def test_rotary_embedding(layout, positions, attrs):
    rng = _rng(11)
    half = attrs.get("rotary_embedding_dim", 16) // 2
    x = _f(rng, 2, 3, 32) if layout == "3d" else _f(rng, 2, 2, 3, 16)
    pos = np.array([2]) if positions == "offset" else np.array([[0, 1, 2], [5, 6, 7]])
    inputs = {"input": x, "position_ids": pos.astype(np.int64),
              "cos_cache": _f(rng, 10, half), "sin_cache": _f(rng, 10, half)}  # fmt: skip
    model, feeds = _model("RotaryEmbedding", inputs, **attrs)
    _check(model, feeds)


# ---------------------------------------------------------------------------------------------
# Normalizations and activations


def test_skip_simplified_layer_normalization():
    rng = _rng(3)
    for skip_shape, bias in (((2, 3, 8), True), ((3, 8), False)):
        inputs = {"input": _f(rng, 2, 3, 8), "skip": _f(rng, *skip_shape),
                  "gamma": _f(rng, 8), "bias": _f(rng, 8) if bias else None}  # fmt: skip
        model, feeds = _model("SkipSimplifiedLayerNormalization", inputs, 4, epsilon=1e-5)
        _check(model, feeds, exact=(1, 3))


def test_skip_layer_normalization_all_inputs():
    rng = _rng(4)
    inputs = {"input": _f(rng, 2, 3, 8), "skip": _f(rng, 2, 3, 8), "gamma": _f(rng, 8),
              "beta": _f(rng, 8), "bias": _f(rng, 8)}  # fmt: skip
    model, feeds = _model("SkipLayerNormalization", inputs, 4)
    _check(model, feeds, exact=(3,))


@pytest.mark.parametrize("axis, scale_shape", [(-1, (8,)), (1, (3, 8))])
def test_simplified_layer_normalization(axis, scale_shape):
    rng = _rng(5)
    inputs = {"x": _f(rng, 2, 3, 8), "scale": _f(rng, *scale_shape)}
    model, feeds = _model("SimplifiedLayerNormalization", inputs, 2, domain="", axis=axis)
    _check(model, feeds)


@pytest.mark.parametrize("segments, mask, positions", [(True, True, False), (False, False, True)])
def test_embed_layer_normalization(segments, mask, positions):
    rng = _rng(6)
    inputs = {
        "input_ids": _i32([[1, 2, 3], [0, 4, 1]]),
        "segment_ids": _i32([[0, 1, 1], [0, 0, 1]]) if segments else None,
        "word_embedding": _f(rng, 5, 8),
        "position_embedding": _f(rng, 4, 8),
        "segment_embedding": _f(rng, 2, 8) if segments else None,
        "gamma": _f(rng, 8),
        "beta": _f(rng, 8),
        "mask": _i32([[1, 1, 0], [1, 0, 1]]) if mask else None,
        "position_ids": _i32([[3, 2, 1]]) if positions else None,
    }
    model, feeds = _model("EmbedLayerNormalization", inputs, 3, out_types={1: I32})
    _check(model, feeds, exact=(1, 2))


def test_quick_gelu():
    model, feeds = _model("QuickGelu", {"x": _f(_rng(8), 3, 5)}, alpha=1.5)
    _check(model, feeds)


def test_bias_add_and_bias_split_gelu_by_formula():
    # (onnxruntime has these two on CUDA only: the oracle is their documented formula)
    import math

    def gelu_reference(v):
        return 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))

    rng = _rng(9)
    x, bias, skip = _f(rng, 2, 3, 8), _f(rng, 8), _f(rng, 2, 3, 8)
    model, feeds = _model("BiasAdd", {"x": x, "bias": bias, "skip": skip})
    np.testing.assert_allclose(run_onnx(model, feeds)[0], x + bias + skip, rtol=1e-6)
    model, feeds = _model("BiasSplitGelu", {"x": x, "bias": bias})
    v = (x + bias).astype(np.float64)
    expected = v[..., :4] * gelu_reference(v[..., 4:])
    np.testing.assert_allclose(run_onnx(model, feeds)[0], expected, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# MatMulNBits, GatherBlockQuantized


def _nbits_inputs(rng, bits, block, zero_points, n=24, k=100, rows=(2, 3)):
    k_blocks = (k + block - 1) // block
    inputs = {
        "A": _f(rng, *rows, k),
        "B": rng.integers(0, 256, (n, k_blocks, block * bits // 8), dtype=np.uint8),
        "scales": _f(rng, n * k_blocks) * 0.1,
        "zero_points": None,
    }
    if zero_points == "packed":
        per_row = (k_blocks * bits + 7) // 8
        inputs["zero_points"] = rng.integers(0, 256, n * per_row, dtype=np.uint8)
    elif zero_points == "float":
        inputs["zero_points"] = rng.integers(0, 2**bits, n * k_blocks).astype(np.float32)
    return inputs


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("block", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("zero_points", [None, "packed", "float"])
def test_matmul_nbits(bits, block, zero_points):
    if bits == 8 and zero_points == "float":
        pytest.skip("onnxruntime's CPU kernel refuses float zero points with 8 bits")
    inputs = _nbits_inputs(_rng(bits * block), bits, block, zero_points)
    model, feeds = _model("MatMulNBits", inputs, K=100, N=24, bits=bits, block_size=block)
    _check(model, feeds)


@pytest.mark.parametrize("bits, block, zero_points, rows", [
    (4, 32, None, (1,)), (4, 32, "packed", (5,)), (8, 32, "packed", (1,)), (8, 16, None, (5,)),
    (4, 128, None, (2, 3)), (4, 16, "packed", (7,)), (4, 32, "packed", (40,)),  # (40: one GEMM)
])  # fmt: skip
def test_matmul_nbits_accuracy_level_4(bits, block, zero_points, rows):
    """Constant int4 / int8 weights at accuracy level 4: A quantized per block to int8."""
    inputs = _nbits_inputs(_rng(block + len(rows)), bits, block, zero_points, n=64, k=128,
                           rows=rows)  # fmt: skip
    constants = ("B", "scales", "zero_points") if zero_points else ("B", "scales")
    model, feeds = _model("MatMulNBits", inputs, initializers=constants, K=128, N=64, bits=bits,
                          block_size=block, accuracy_level=4)  # fmt: skip
    _check(model, feeds)


@pytest.mark.parametrize("variant", ["bias", "g_idx", "g_idx_float_zero", "accuracy_level_4",
                                     "initializers", "one_row", "panels"])  # fmt: skip
def test_matmul_nbits_variants(variant):
    rng = _rng(21)
    n, k, block = 32, 64, 32
    zp = "float" if variant == "g_idx_float_zero" else "packed"
    inputs = _nbits_inputs(
        rng, 4, block, zp, n=n, k=k, rows=(1,) if variant == "one_row" else (2, 3)
    )
    attrs = {"K": k, "N": n, "bits": 4, "block_size": block}
    initializers = ()
    if variant.startswith("g_idx"):
        inputs["g_idx"] = (rng.permutation(k) // block).astype(np.int32)
    if variant == "bias":
        inputs["g_idx"], inputs["bias"] = None, _f(rng, n)
    if variant == "accuracy_level_4":  # (onnxruntime quantizes A only for constant weights)
        attrs["accuracy_level"] = 4
        initializers = ("B", "scales", "zero_points")
    if variant == "initializers":
        initializers = ("B", "scales", "zero_points")
    if variant == "panels":  # more output columns than one dequantized panel holds
        from onyx.runtime.kernels import contrib_quant

        old, contrib_quant.PANEL_VALUES = contrib_quant.PANEL_VALUES, 3 * k
        try:
            model, feeds = _model("MatMulNBits", inputs, **attrs)
            _check(model, feeds)
        finally:
            contrib_quant.PANEL_VALUES = old
        return
    model, feeds = _model("MatMulNBits", inputs, initializers=initializers, **attrs)
    _check(model, feeds)
    if variant == "initializers":  # a second run reuses the session's prepared weight
        _check(model, feeds)


def test_matmul_nbits_keeps_weights_packed():
    """A run allocates no float32 copy of the whole weight: at most one panel."""
    import tracemalloc

    rng = _rng(5)
    n, k, block = 2048, 1024, 32
    inputs = _nbits_inputs(rng, 4, block, None, n=n, k=k, rows=(1,))
    model, feeds = _model("MatMulNBits", inputs, initializers=("B", "scales"), K=k, N=n,
                          bits=4, block_size=block)  # fmt: skip
    sess = onyx.InferenceSession(model.SerializeToString())
    sess.run(None, feeds)
    tracemalloc.start()
    sess.run(None, feeds)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < n * k * 4 / 4, peak  # the float32 weight would be 8 MiB


@pytest.mark.parametrize(
    "bits, block, zero_points, indices",
    [
        (4, 16, False, [[0, 3], [9, -1]]),
        (4, 16, True, [[0, 3], [9, -1]]),
        (8, 16, False, [1, 12, -11]),  # out of range: zeros
        (4, 32, True, [7]),
    ],
)
def test_gather_block_quantized_uint8(bits, block, zero_points, indices):
    rng = _rng(bits + block)
    cols = 32 * 8 // bits
    blocks = (cols + block - 1) // block
    inputs = {
        "data": rng.integers(0, 256, (10, 32), dtype=np.uint8),
        "indices": np.array(indices, np.int64),
        "scales": _f(rng, 10, blocks),
        "zero_points": (
            rng.integers(0, 256, (10, (blocks * bits + 7) // 8), dtype=np.uint8)
            if zero_points
            else None
        ),
    }
    model, feeds = _model("GatherBlockQuantized", inputs, block_size=block, quantize_axis=1,
                          bits=bits, initializers=("data", "scales", "zero_points")
                          if zero_points else ("data", "scales"))  # fmt: skip
    _check(model, feeds, exact=(0,))


def test_gather_block_quantized_int4():
    import ml_dtypes

    rng = _rng(30)
    data = rng.integers(-8, 8, (6, 32)).astype(ml_dtypes.int4)
    inputs = {
        "data": data,
        "indices": np.array([[5, 0], [2, 2]], np.int32),
        "scales": _f(rng, 6, 2),
        "zero_points": rng.integers(-8, 8, (6, 2)).astype(ml_dtypes.int4),
    }
    model, feeds = _model("GatherBlockQuantized", inputs, block_size=16, quantize_axis=1,
                          initializers=("data", "scales", "zero_points"))  # fmt: skip
    _check(model, feeds, exact=(0,))


# ---------------------------------------------------------------------------------------------
# Inference without running


def test_inference_of_a_genai_style_layer():
    """Symbolic shapes flow through GroupQueryAttention and MatMulNBits."""
    b, s = "batch", "seq"
    h, kvh, d, hidden = 4, 2, 16, 64
    nodes = [
        helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["n"], epsilon=1e-6),
        helper.make_node("MatMulNBits", ["n", "w", "sc"], ["qkv"], domain=MS, K=hidden,
                         N=(h + 2 * kvh) * d, bits=4, block_size=32),
        helper.make_node("GroupQueryAttention", ["qkv", "", "", "pk", "pv", "sl", "ts"],
                         ["att", "k_out", "v_out"], domain=MS, num_heads=h, kv_num_heads=kvh),
        helper.make_node("SkipSimplifiedLayerNormalization", ["att", "x", "g"],
                         ["y", "", "", "sum"], domain=MS),
    ]  # fmt: skip
    rng = _rng()
    init = [
        numpy_helper.from_array(np.ones(hidden, np.float32), "g"),
        numpy_helper.from_array(
            rng.integers(0, 256, ((h + 2 * kvh) * d, 2, 16), dtype=np.uint8), "w"
        ),
        numpy_helper.from_array(np.ones((h + 2 * kvh) * d * 2, np.float32), "sc"),
    ]
    graph = helper.make_graph(
        nodes,
        "layer",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, hidden]),
            helper.make_tensor_value_info("pk", TensorProto.FLOAT, [b, kvh, "past", d]),
            helper.make_tensor_value_info("pv", TensorProto.FLOAT, [b, kvh, "past", d]),
            helper.make_tensor_value_info("sl", TensorProto.INT32, [b]),
            helper.make_tensor_value_info("ts", TensorProto.INT32, []),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "k_out")],
        initializer=init,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    )
    typed = onyx.infer_shapes(_onyx_model(model))
    shapes = {v.name: v.type.shape.dims for v in typed.graph.outputs}
    assert shapes["y"] == (b, s, hidden)
    assert shapes["k_out"][:2] == (b, kvh) and shapes["k_out"][3] == d


# ---------------------------------------------------------------------------------------------
# The transformer zoo (scripts/make_transformer_zoo.py): onnxruntime's outputs as fixtures

ZOO = Path(__file__).resolve().parent / "models" / "transformers"
ZOO_MANIFEST = json.loads((ZOO / "manifest.json").read_text()) if ZOO.exists() else {}


@pytest.mark.parametrize("name", sorted(ZOO_MANIFEST))
def test_transformer_zoo_matches_onnxruntime(name):
    entry = ZOO_MANIFEST[name]
    data = np.load(ZOO / f"{name}.npz")
    feeds = {k[3:]: data[k] for k in data.files if k.startswith("in.")}
    expected = {k[4:]: data[k] for k in data.files if k.startswith("out.")}
    sess = onyx.InferenceSession(str(ZOO / entry["file"]))
    actual = dict(zip(expected, sess.run(list(expected), feeds)))
    fp16 = "fp16" in name
    for out, e in expected.items():
        a = np.asarray(actual[out])
        assert a.shape == e.shape and a.dtype == e.dtype, out
        scale = max(1.0, float(np.abs(e).max(initial=0)))
        # float32: the rtol 1e-3 / atol 1e-4; float16: a few units of its last place
        atol = (2e-2 if fp16 else 1e-4) * scale
        np.testing.assert_allclose(a, e, rtol=1e-3, atol=atol, err_msg=f"{name}: {out}")


def test_inference_of_quantized_matmuls():
    rng = _rng(40)
    a = rng.integers(0, 255, (2, 3, 8)).astype(np.uint8)
    b = rng.integers(-100, 100, (8, 5)).astype(np.int8)
    scale = np.array(0.1, np.float32)
    model, feeds = _model("MatMulIntegerToFloat", {"a": a, "b": b, "sa": scale, "sb": scale})
    _check(model, feeds)
    x = _f(rng, 2, 3, 8)
    model, feeds = _model("DynamicQuantizeMatMul", {"x": x, "b": b, "sb": scale})
    _check(model, feeds, rtol=1e-3, atol=1e-3)


def test_attention_refuses_what_onnxruntime_cpu_refuses():
    inputs = _attention_inputs(_rng(2), past=4)
    model, feeds = _model("Attention", inputs, 2, num_heads=2, past_present_share_buffer=1)
    with pytest.raises(onyx.OnyxError, match="past_present_share_buffer"):
        run_onnx(model, feeds)
    mask = np.ones((2, 1, 3, 3), np.int32)  # (Megatron's 4-D mask)
    model, feeds = _model("Attention", _attention_inputs(_rng(3), mask=mask), num_heads=2)
    with pytest.raises(onyx.OnyxError, match="not one of onnxruntime's formats"):
        run_onnx(model, feeds)


@pytest.mark.parametrize("bits, block, zero_points, rows, k, n", [
    (4, 32, None, (1,), 512, 100), (4, 16, "packed", (3,), 200, 33), (4, 64, "float", (16,), 96, 17),
    (4, 128, "packed", (2,), 384, 48), (4, 256, None, (1,), 300, 20), (8, 32, "packed", (4,), 100, 40),
])  # fmt: skip
def test_matmul_nbits_native_decode(bits, block, zero_points, rows, k, n):
    """The native kernels (nbits.c) at decoding's row counts: onnxruntime's results within
    float tolerance at accuracy level 4 and 0, and the numpy kernel's bits (ONYX_NATIVE=0)."""
    from onyx.runtime import native

    inputs = _nbits_inputs(_rng(k + n), bits, block, zero_points, n=n, k=k, rows=rows)
    constants = ("B", "scales", "zero_points") if zero_points else ("B", "scales")
    for level in (4, 0):
        model, feeds = _model("MatMulNBits", inputs, initializers=constants, K=k, N=n,
                              bits=bits, block_size=block, accuracy_level=level)  # fmt: skip
        got = _check(model, feeds)[0]
        with native.disabled():
            want = onyx.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
        np.testing.assert_array_equal(got, want)


def test_matmul_nbits_native_refuses_bad_sizes():
    """nbits.c checks its task before it reads anything (a block count that does not cover K,
    a block size that is no power of two): InvalidArgument, never a stray read."""
    from onyx.runtime import native

    if not native.nbits_ok():
        pytest.skip("native library not built")
    packed = np.zeros((4, 2 * 16), np.uint8)
    scales = np.ones((4, 2), np.float32)
    for K, block in ((100, 32), (64, 24)):
        product = native.NBitsProduct(packed, scales, None, 8.0, K=K, bits=4, block=block)
        with pytest.raises(onyx.OnyxError):
            product.dequantize(0, 4, np.empty((4, 2 * block), np.float32))
        with pytest.raises(onyx.OnyxError):
            product.int8(np.ones((1, K), np.float32), np.empty((1, 4), np.float32))


@pytest.mark.parametrize("zero_points, rows, k, n", [(None, (3, 40), 512, 100),
                                                    ("packed", (33,), 200, 37)])  # fmt: skip
def test_matmul_nbits_native_prompt(zero_points, rows, k, n):
    """Many rows at accuracy level 4 (a prompt): the native int8 GEMM keeps onnxruntime's
    integer products per block (numpy's float GEMM is the same terms in another order)."""
    from onyx.runtime import native

    inputs = _nbits_inputs(_rng(k + n), 4, 32, zero_points, n=n, k=k, rows=rows)
    constants = ("B", "scales", "zero_points") if zero_points else ("B", "scales")
    model, feeds = _model("MatMulNBits", inputs, initializers=constants, K=k, N=n, bits=4,
                          block_size=32, accuracy_level=4)  # fmt: skip
    got = _check(model, feeds, rtol=1e-5)[0]
    with native.disabled():
        want = onyx.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
