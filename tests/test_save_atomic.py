"""Saves with external data replace the model and its data as a pair: a reader sees the old
pair or the new one, never a mix, and a failed write is a SaveError naming the file."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.serde import saving


def weights_model(value: float) -> onyx.ir.Model:
    w = numpy_helper.from_array(np.full(4096, value, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])],
        [w],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onyx.loads(proto.SerializeToString())


def weight_of(path) -> float:
    m = onyx.load(path)
    return float(m.graph.initializers["w"].const_value.numpy()[0])


def fail_on_write(monkeypatch, n: int, code: int = errno.ENOSPC) -> None:
    """The n-th file written (1-based) fails as a full disk would."""
    calls = {"count": 0}
    real = saving.write_chunks

    def failing(out, chunks):
        calls["count"] += 1
        if calls["count"] == n:
            raise OSError(code, os.strerror(code))
        real(out, chunks)

    monkeypatch.setattr(saving, "write_chunks", failing)


def test_resave_replaces_the_pair_and_removes_the_old_data(tmp_path):
    path = tmp_path / "m.onnx"
    onyx.save(weights_model(1.0), path, external_data=True)
    onyx.save(weights_model(2.0), path, external_data=True)
    assert weight_of(path) == 2.0
    onyx.save(weights_model(3.0), path, external_data=True)
    assert weight_of(path) == 3.0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2, files  # the model and the one data file it reads
    assert not [f for f in files if f.endswith(".tmp")]


@pytest.mark.parametrize("failing_write", [1, 2])
def test_a_failed_write_keeps_the_old_pair(tmp_path, monkeypatch, failing_write):
    path = tmp_path / "m.onnx"
    onyx.save(weights_model(1.0), path, external_data=True)
    before = sorted(p.name for p in tmp_path.iterdir())
    fail_on_write(monkeypatch, failing_write)  # 1: the data file, 2: the model file
    with pytest.raises(onyx.SaveError, match="m.onnx") as info:
        onyx.save(weights_model(2.0), path, external_data=True)
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert weight_of(path) == 1.0  # the old model still reads its own data
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no temporaries left


def test_a_failed_rename_keeps_the_old_pair(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    onyx.save(weights_model(1.0), path, external_data=True)
    before = sorted(p.name for p in tmp_path.iterdir())
    real = os.replace

    def replace(src, dst):
        if os.fspath(dst) == os.fspath(path):
            raise OSError(errno.EIO, "I/O error")
        real(src, dst)

    monkeypatch.setattr(saving.os, "replace", replace)
    with pytest.raises(onyx.SaveError, match="m.onnx"):
        onyx.save(weights_model(2.0), path, external_data=True)
    monkeypatch.undo()
    assert weight_of(path) == 1.0
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_disk_full_on_a_plain_save_names_the_file(tmp_path, monkeypatch):
    path = tmp_path / "plain.onnx"
    fail_on_write(monkeypatch, 1)
    with pytest.raises(onyx.SaveError, match="plain.onnx.*No space"):
        onyx.save(weights_model(1.0), path)
    assert list(tmp_path.iterdir()) == []


def test_non_utf8_names_save_losslessly(tmp_path):
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["xQQ"], ["tQQ"], name="nQQ", doc_string="dQQ"),
            helper.make_node("Relu", ["tQQ"], ["yQQ"]),
        ],
        "gQQ",
        [helper.make_tensor_value_info("xQQ", TensorProto.FLOAT, ["NQQ"])],
        [helper.make_tensor_value_info("yQQ", TensorProto.FLOAT, ["NQQ"])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.metadata_props.add(key="kQQ", value="vQQ")
    data = proto.SerializeToString().replace(b"QQ", b"\xff\xfe")
    touched = onyx.loads(data)
    assert [v.name for n in touched.graph.nodes for v in n.outputs] == [b"t\xff\xfe", b"y\xff\xfe"]
    # (a graph read is written field by field, not from the bytes read: names and dim params
    # that are not UTF-8 are bytes there)
    assert sorted(onyx.dumps(touched)) == sorted(data)
    model = onyx.loads(data)
    out = onyx.dumps(model)
    assert sorted(out) == sorted(data)  # the same fields, bytes for bytes
    onyx.save(model, tmp_path / "m.onnx")
    again = onyx.dumps(onyx.load(tmp_path / "m.onnx"))
    assert again == out
