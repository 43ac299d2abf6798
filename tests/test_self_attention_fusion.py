"""SelfAttentionFusion (onyx/optimizer/self_attention.py): an exported encoder's attention block
into one com.microsoft Attention. onnxruntime running the model as exported is the oracle,
with the native library and without it (ONYX_NATIVE=0's numpy kernels)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.runtime import native

ZOO = Path(__file__).resolve().parent / "models" / "transformers"
FLOAT_MIN = float(np.finfo(np.float32).min)


def _ort(model, feeds):
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _onyx(model, feeds, disabled=()):
    so = onyx.SessionOptions()
    so.disabled_optimizers = list(disabled)
    return onyx.InferenceSession(model, so).run(None, feeds)


def _ops(model) -> list[str]:
    stats: dict = {}
    optimized = onyx.optimize(onyx.load(model) if isinstance(model, str) else onyx.loads(model),
                              stats=stats)  # fmt: skip
    return [n.op_type for n in optimized.graph]


def _close(got, want, tol=1e-4):
    for g, w in zip(got, want):
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=tol * scale)


def _bert_feeds(batch=3, seq=7, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[1, 4:] = 0  # right padding
    mask[2, :] = 0  # every key masked: the exported graph's sum of the lowest float
    return {
        "input_ids": rng.integers(4, 128, (batch, seq)).astype(np.int64),
        "attention_mask": mask,
        "token_type_ids": np.zeros((batch, seq), np.int64),
    }


ZOO_CASES = {  # fixture -> (feeds, Attention nodes expected)
    "bert_optimum": (_bert_feeds, 2),
    "vit_optimum": (
        lambda: {"pixel_values": np.random.default_rng(1).standard_normal((2, 3, 32, 32))},
        2,
    ),
    "whisper_encoder_optimum": (
        lambda: {"input_features": np.random.default_rng(2).standard_normal((1, 16, 3000))},
        2,
    ),
    "t5_encoder_optimum": (None, 0),  # position bias: left as it is
    "bart_encoder_optimum": (None, 0),  # its mask is sliced to the keys: left as it is
}


@pytest.mark.parametrize("name", sorted(ZOO_CASES))
def test_zoo_encoders_fuse_or_stay_and_match_onnxruntime(name):
    path = str(ZOO / f"{name}.onnx")
    make_feeds, fused = ZOO_CASES[name]
    if make_feeds is None:
        data = np.load(ZOO / f"{name}.npz")
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in.")}
    else:
        feeds = {k: v.astype(np.float32) if v.dtype == np.float64 else v
                 for k, v in make_feeds().items()}  # fmt: skip
    ops = _ops(path)
    assert ops.count("Attention") == fused
    # (a block left unfused here: its softmax, or AttentionFusion's generic HeadsAttention)
    generic = "Softmax" in ops or any(op.endswith("HeadsAttention") for op in ops)
    assert generic == (fused == 0)
    if name == "bert_optimum":  # onnxruntime's transformer optimizer's ops
        assert sorted(set(ops)) == ["Attention", "BiasGelu", "Cast", "EmbedLayerNormalization",
                                    "MatMul", "SkipLayerNormalization"]  # fmt: skip
    want = _ort(path, feeds)
    got = _onyx(path, feeds)
    _close(got, want)
    with native.disabled():
        _close(_onyx(path, feeds), want)
    _close(_onyx(path, feeds, disabled=["SelfAttentionFusion"]), want)


def test_optimized_bert_runs_in_onnxruntime_too():
    """The fused model (Attention with mask_filter_value) is one onnxruntime loads."""
    path = str(ZOO / "bert_optimum.onnx")
    feeds = _bert_feeds()
    feeds["attention_mask"][2, 0] = 1  # (onnxruntime's kernel: a row with no key is its own)
    optimized = onyx.optimize(onyx.load(path))
    att = [n for n in optimized.graph if n.op_type == "Attention"]
    assert att and att[0].attr("mask_filter_value") == FLOAT_MIN
    _close(_ort(onyx.dumps(optimized), feeds), _ort(path, feeds))


# ------------------------------------------------------------------------ hand-made blocks

D, HEADS, SEQ = 16, 2, 5
RNG = np.random.default_rng(7)


def _block(mask="where", k_perm=(0, 2, 3, 1), scale_op="Div", unsqueeze=(1, 2), bias=True,
           heads_shape=(0, 0, HEADS, D // HEADS), batch="B"):  # fmt: skip
    """One exported attention block over x [B, S, D] with a [B, S] mask input."""
    head = D // HEADS
    nodes, inits = [], []

    def init(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def proj(tag, perm):
        w = init(f"w{tag}", RNG.standard_normal((D, D)).astype(np.float32) * 0.3)
        nodes.append(helper.make_node("MatMul", ["x", w], [f"{tag}_mm"]))
        src = f"{tag}_mm"
        if bias or tag != "k":
            b = init(f"b{tag}", RNG.standard_normal(D).astype(np.float32))
            nodes.append(helper.make_node("Add", [b, src], [f"{tag}_add"]))
            src = f"{tag}_add"
        nodes.append(helper.make_node("Reshape", [src, "heads_shape"], [f"{tag}_r"]))
        nodes.append(helper.make_node("Transpose", [f"{tag}_r"], [tag], perm=list(perm)))

    init("heads_shape", np.array(heads_shape, np.int64))
    init("merged_shape", np.array([0, 0, D], np.int64))
    proj("q", (0, 2, 1, 3))
    proj("k", k_perm)
    proj("v", (0, 2, 1, 3))
    nodes.append(helper.make_node("MatMul", ["q", "k"], ["qk"]))
    nodes.append(helper.make_node(scale_op, ["qk", init("c", np.float32(np.sqrt(head)))], ["s"]))
    scores = "s"
    if mask is not None:
        init("axes", np.array(list(unsqueeze), np.int64))
        init("one", np.float32(1.0))
        nodes += [
            helper.make_node("Unsqueeze", ["mask", "axes"], ["m4"]),
            helper.make_node("Cast", ["m4"], ["mf"], to=TensorProto.FLOAT),
            helper.make_node("Sub", ["one", "mf"], ["inv"]),
        ]
        if mask == "where":
            nodes += [
                helper.make_node("Cast", ["inv"], ["invb"], to=TensorProto.BOOL),
                helper.make_node(
                    "Where", ["invb", init("low", np.float32(FLOAT_MIN)), "inv"], ["bias"]
                ),  # fmt: skip
            ]
        else:
            nodes.append(helper.make_node("Mul", ["inv", init("low", np.float32(-1e4))], ["bias"]))
        nodes.append(helper.make_node("Add", ["s", "bias"], ["sm"]))
        scores = "sm"
    nodes += [
        helper.make_node("Softmax", [scores], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "merged_shape"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, SEQ, D])]
    if mask is not None:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT64, [batch, SEQ]))
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, SEQ, D])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _block_feeds(batch=2):
    mask = np.ones((batch, SEQ), np.int64)
    mask[0, 3:] = 0
    return {"x": RNG.standard_normal((batch, SEQ, D)).astype(np.float32), "mask": mask}


@pytest.mark.parametrize("variant", [
    dict(), dict(mask="mul"), dict(mask=None), dict(scale_op="Mul"), dict(bias=False),
])  # fmt: skip
def test_exported_block_variants_fuse(variant):
    model = _block(**variant)
    feeds = _block_feeds()
    if variant.get("mask", "where") is None:
        del feeds["mask"]
    ops = _ops(model)
    assert ops.count("Attention") == 1 and "Softmax" not in ops, ops
    want = _ort(model, feeds)
    _close(_onyx(model, feeds), want, 1e-5)
    with native.disabled():
        _close(_onyx(model, feeds), want, 1e-5)


@pytest.mark.parametrize("variant", [
    dict(scale_op="Add"),  # not a scale of the scores
    dict(unsqueeze=(1, 3)),  # a mask per query [B, 1, S, 1], not per key
    dict(mask=None, batch=2, heads_shape=(SEQ, 2, HEADS, D // HEADS)),  # heads over the batch
])  # fmt: skip
def test_other_blocks_stay(variant):
    model = _block(**variant)
    feeds = _block_feeds()
    if variant.get("mask", "where") is None:
        del feeds["mask"]
    ops = _ops(model)
    # (no BERT Attention; a plain 4-D softmax attention may become AttentionFusion's)
    generic = "Softmax" in ops or any(op.endswith("HeadsAttention") for op in ops)
    assert "Attention" not in ops and generic
    _close(_onyx(model, feeds), _ort(model, feeds), 1e-5)


# ----------------------------------------------------------------------- SkipLayerNormFusion


def _residual_norm(skip_shape=("B", SEQ, D), bias=True, stats_read=False):
    """MatMul [+ bias] + skip -> LayerNormalization, as BERT's residual connections."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"])]
    inits = [numpy_helper.from_array(RNG.standard_normal((D, D)).astype(np.float32), "w")]
    src = "m"
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(D).astype(np.float32), "b"))
        nodes.append(helper.make_node("Add", ["m", "b"], ["mb"]))
        src = "mb"
    for name in ("gamma", "beta"):
        inits.append(numpy_helper.from_array(RNG.standard_normal(D).astype(np.float32), name))
    nodes.append(helper.make_node("Add", ["skip", src], ["s"]))
    outputs = ["y", "mean"] if stats_read else ["y"]
    nodes.append(
        helper.make_node("LayerNormalization", ["s", "gamma", "beta"], outputs, epsilon=1e-6)
    )
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", SEQ, D]),
            helper.make_tensor_value_info("skip", TensorProto.FLOAT, list(skip_shape)),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


@pytest.mark.parametrize("variant, fused", [
    (dict(), True), (dict(bias=False), True),
    (dict(skip_shape=(1, SEQ, D)), False),  # the skip broadcasts over the batch
    (dict(stats_read=True), False),  # LayerNormalization's mean is read
])  # fmt: skip
def test_skip_layer_norm_fusion(variant, fused):
    model = _residual_norm(**variant)
    skip_shape = [2 if d == "B" else d for d in variant.get("skip_shape", ("B", SEQ, D))]
    feeds = {
        "x": RNG.standard_normal((2, SEQ, D)).astype(np.float32),
        "skip": RNG.standard_normal(skip_shape).astype(np.float32),
    }
    optimized = onyx.optimize(onyx.loads(model))
    ops = [n.op_type for n in optimized.graph]
    assert ("SkipLayerNormalization" in ops) == fused, ops
    if fused:
        assert ops == ["MatMul", "SkipLayerNormalization"]
        _close(_ort(onyx.dumps(optimized), feeds), _ort(model, feeds), 1e-5)
    want = _ort(model, feeds)
    _close(_onyx(model, feeds), want, 1e-5)
    with native.disabled():
        _close(_onyx(model, feeds), want, 1e-5)


# ---------------------------------------------------------------------- EmbedLayerNormFusion


def _embeddings(segment: bool):
    """word[ids] (+ segment[seg]) + position[pos], pos a [1, S] input: no default positions."""
    tables = {"word": (50, D), "position": (SEQ + 3, D), "segment": (2, D)}
    inits = [numpy_helper.from_array(RNG.standard_normal(s).astype(np.float32), n)
             for n, s in tables.items()]  # fmt: skip
    inits += [numpy_helper.from_array(RNG.standard_normal(D).astype(np.float32), n)
              for n in ("gamma", "beta")]  # fmt: skip
    nodes = [
        helper.make_node("Gather", ["word", "ids"], ["w"]),
        helper.make_node("Gather", ["position", "pos"], ["p"]),
        helper.make_node("Add", ["w", "p"], ["wp"]),
    ]
    inputs = [("ids", ["B", SEQ]), ("pos", [1, SEQ])]
    last = "wp"
    if segment:
        nodes += [
            helper.make_node("Gather", ["segment", "seg"], ["sg"]),
            helper.make_node("Add", ["sg", "wp"], ["all"]),
        ]
        inputs.append(("seg", ["B", SEQ]))
        last = "all"
    nodes.append(helper.make_node("LayerNormalization", [last, "gamma", "beta"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.INT64, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", SEQ, D])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("segment", [False, True])
def test_embed_layer_norm_fusion_with_given_positions(segment):
    model = _embeddings(segment).SerializeToString()
    feeds = {
        "ids": RNG.integers(0, 50, (2, SEQ)).astype(np.int64),
        "pos": np.array([[3, 1, 4, 1, 5]], np.int64),
        "seg": RNG.integers(0, 2, (2, SEQ)).astype(np.int64),
    }
    if not segment:
        del feeds["seg"]
    optimized = onyx.optimize(onyx.loads(model))
    (embed,) = [n for n in optimized.graph if n.op_type == "EmbedLayerNormalization"]
    assert len(embed.inputs) == 9 and embed.inputs[8] is not None  # (the positions fed)
    want = _ort(model, feeds)
    _close(_ort(onyx.dumps(optimized), feeds), want, 1e-5)
    _close(_onyx(model, feeds), want, 1e-5)
    with native.disabled():
        _close(_onyx(model, feeds), want, 1e-5)
