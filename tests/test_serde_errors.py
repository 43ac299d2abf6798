"""Bad input gives onyx.FormatError naming the file and the part, never a protobuf traceback."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx.errors import FormatError


def _model_bytes() -> bytes:
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
        [w],
    )
    return helper.make_model(g).SerializeToString()


@pytest.mark.parametrize("cut", [1, 7, 30, -3, -1])
def test_truncated(tmp_path, cut):
    data = _model_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:cut])
    with pytest.raises(FormatError) as e:
        onyx.load(path)
    assert "cut.onnx" in str(e.value)


@pytest.mark.parametrize("where", ["model", "graph"])
def test_corrupt_bytes(tmp_path, where):
    data = _model_bytes()
    if where == "model":
        data = b"\x0f" + data  # wire type 7 does not exist
    else:
        m = onnx.ModelProto.FromString(data)
        graph = m.graph.SerializeToString()
        m.ClearField("graph")
        bad = b"\x0a\x7f" + graph  # a node whose length runs past the graph's end
        data = (
            m.SerializeToString() + b"\x3a" + bytes([len(bad) & 0x7F | 0x80, len(bad) >> 7]) + bad
        )
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    with pytest.raises(FormatError, match="bad.onnx") as e:
        onyx.load(path)
    assert where in str(e.value)


@pytest.mark.parametrize(
    "content", [b"", b"hello, world\n" * 10, b"\x89PNG\r\n\x1a\n" + bytes(range(256))]
)
def test_not_onnx(tmp_path, content):
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(FormatError, match="notes.txt"):
        onyx.load(path)


def test_raw_data_size_mismatch(tmp_path):
    m = onnx.ModelProto.FromString(_model_bytes())
    m.graph.initializer[0].raw_data = b"\0" * 60  # 4x4 float needs 64
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    with pytest.raises(FormatError, match=r"m\.onnx.*initializer 'w'.*60 bytes.*64"):
        onyx.load(path)


def test_typed_data_count_mismatch():
    m = onnx.ModelProto.FromString(_model_bytes())
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.float_data.extend([1.0] * 5)
    with pytest.raises(FormatError, match="initializer 'w'.*5 values.*16"):
        onyx.loads(m.SerializeToString())


def test_bad_constant_attribute_is_reported_when_converted():
    m = onnx.ModelProto.FromString(_model_bytes())
    c = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.ones(3, np.int64)))
    c.attribute[0].t.raw_data = b"\0" * 5
    m.graph.node.append(c)
    model = onyx.loads(m.SerializeToString())
    with pytest.raises(FormatError, match="attribute 'value'.*5 bytes"):
        _ = model.graph
    with pytest.raises(FormatError):
        _ = model.graph  # still an error on a second look, not a half-built graph


def test_missing_model_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        onyx.load(tmp_path / "nope.onnx")
