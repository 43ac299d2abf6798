"""onyx.generate's own session: the gated MLP fused into one node (onyx/genai/fusions.py) gives
the unfused graph's values bit for bit, and a large file-mapped table's rows are gathered
without keeping its pages mapped (onyx/runtime/kernels/mapped.py)."""

from __future__ import annotations

import mmap
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import onyx
from onyx import ir
from onyx.genai import Generator
from onyx.genai.fusions import fuse_gated_mlp
from onyx.runtime.kernels import mapped
from onyx.runtime.kernels.indexing import gather
from onyx.serde.external import MAPPED_FILES

ZOO = Path(__file__).resolve().parent / "models" / "transformers"


def _decoder_feeds(folder: Path, session, ids) -> dict:
    feeds = {"input_ids": np.array([ids], np.int64),
             "attention_mask": np.ones((1, len(ids)), np.int64)}  # fmt: skip
    cfg = Generator(folder, session=session).config
    for name in (n for pair in cfg.past_names for n in pair):
        feeds[name] = np.zeros((1, cfg.kv_heads, 0, cfg.head_size), np.float32)
    return feeds


@pytest.mark.parametrize("name", ["llama_genai_int4", "qwen2_genai_int4", "llama_genai_fp32"])
def test_gated_mlp_fusion_keeps_the_values(name):
    folder = ZOO / name
    model = onyx.load(str(folder / "model.onnx"))
    before = Counter(n.op_type for n in model.graph)
    fused = fuse_gated_mlp(model)
    after = Counter(n.op_type for n in model.graph)
    if "MatMulNBits" not in before:  # (the fp32 export's MatMuls: left alone)
        assert fused == 0 and after == before
        return
    assert fused == before["GroupQueryAttention"]  # (one per layer)
    assert after["GatedMatMulNBits"] == fused
    assert after["MatMulNBits"] == before["MatMulNBits"] - 2 * fused
    assert after["Sigmoid"] == before["Sigmoid"] - fused
    plain = onyx.InferenceSession(str(folder / "model.onnx"))
    ours = onyx.InferenceSession(model)
    for ids in ([1, 17, 42, 9, 77], [5], list(range(4, 44))):  # (a prompt: the int8 GEMM)
        feeds = _decoder_feeds(folder, plain, ids)
        for want, got in zip(plain.run(None, feeds), ours.run(None, feeds)):
            np.testing.assert_array_equal(got, want)


def test_gated_mlp_function_body_runs_elsewhere(tmp_path):
    """The model-local function of GatedMatMulNBits: a saved fused model runs on onnxruntime
    (which has no kernel of it) with the unfused model's logits."""
    import onnxruntime as ort

    folder = ZOO / "llama_genai_int4"
    model = onyx.load(str(folder / "model.onnx"))
    assert fuse_gated_mlp(model)
    onyx.save(model, str(tmp_path / "model.onnx"), external_data=True, location="model.onnx.data")
    plain = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    fused = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = _decoder_feeds(folder, plain, [1, 17, 42, 9, 77])
    np.testing.assert_allclose(fused.run(["logits"], feeds)[0], plain.run(["logits"], feeds)[0],
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_gated_mlp_fusion_skips_other_patterns():
    """A Mul of two MatMulNBits of different inputs is no gated MLP."""
    rng = np.random.default_rng(0)
    x1, x2 = ir.Value("x1"), ir.Value("x2")
    nodes, outs = [], []
    for i, x in enumerate((x1, x2)):
        b = rng.integers(0, 255, (16, 1, 16), dtype=np.uint8)
        s = rng.random(16, dtype=np.float32)
        consts = [ir.Value(f"b{i}", const_value=ir.Tensor(b, name=f"b{i}")),
                  ir.Value(f"s{i}", const_value=ir.Tensor(s, name=f"s{i}"))]  # fmt: skip
        node = ir.Node("MatMulNBits", [x, *consts], [f"y{i}"], {"K": 32, "N": 16, "bits": 4,
                       "block_size": 32}, domain="com.microsoft")  # fmt: skip
        nodes.append(node)
        outs.append(node.outputs[0])
    sig = ir.Node("Sigmoid", [outs[0]], ["sig"])
    silu = ir.Node("Mul", [outs[0], sig.outputs[0]], ["silu"])
    y = ir.Node("Mul", [silu.outputs[0], outs[1]], ["y"])
    graph = ir.Graph([x1, x2], [y.outputs[0]], [*nodes, sig, silu, y], name="g")
    model = ir.Model(graph, opset_imports={"": 21, "com.microsoft": 1})
    assert fuse_gated_mlp(model) == 0
    assert len(list(model.graph)) == 5


@pytest.fixture(params=["pread", "mapping"])
def mapped_table(request, tmp_path, monkeypatch):
    """(a table, a read-only view of it in a file mapping): one whose file is known (its rows
    read with pread), one whose file is not (read through the mapping, then unmapped)."""
    if (
        not hasattr(os, "preadv")
        if request.param == "pread"
        else not hasattr(mmap, "MADV_DONTNEED")
    ):
        pytest.skip(f"no {request.param} path on this platform")
    monkeypatch.setattr(mapped, "LARGE_TABLE_BYTES", 1)
    table = np.random.default_rng(0).standard_normal((3000, 700)).astype(np.float32)
    path = tmp_path / "table.bin"
    path.write_bytes(b"\0" * 100 + table.tobytes())
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if request.param == "pread":
        MAPPED_FILES[buf] = str(path)
    view = np.frombuffer(memoryview(buf)[100:], np.float32).reshape(table.shape)
    return table, view  # (the mapping closes with its last view)


def test_mapped_rows_are_np_take(mapped_table):
    table, view = mapped_table
    assert mapped.file_mapping(view)[1] == 100
    indices = np.array([[0, 2999, -1, 17], [5, 5, -3000, 1234]], np.int64)
    got = mapped.take_rows(view, indices)
    assert got is not None and got.shape == (2, 4, 700)
    np.testing.assert_array_equal(got, np.take(table, indices, axis=0))
    np.testing.assert_array_equal(gather(view, indices), np.take(table, indices, axis=0))
    assert mapped.take_rows(view, np.zeros((2, 0), np.int64)).shape == (2, 0, 700)
    with pytest.raises(IndexError):
        gather(view, np.array([3000]))


def test_mapped_rows_leave_arrays_in_memory_alone(mapped_table):
    table, _ = mapped_table
    frozen = table.copy()
    frozen.flags.writeable = False
    assert mapped.file_mapping(frozen) is None
    assert mapped.take_rows(frozen, np.array([1, 2])) is None
