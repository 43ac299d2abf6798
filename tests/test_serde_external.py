"""External data: reading onnx's layouts, writing our own, lazy mapping, location security,
and models over protobuf's 2 GiB limit."""

from __future__ import annotations

import mmap
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, external_data_helper, helper, numpy_helper

import onyx
from onyx.errors import FormatError
from onyx.serde import model_io, saving


def _model(n: int = 3, size: int = 4096, dtype=np.float32) -> onnx.ModelProto:
    """A chain of Adds over ``n`` initializers of ``size`` elements (like an exporter's)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal(size).astype(dtype), f"w{i}") for i in range(n)
    ]
    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Add", [prev, f"w{i}"], [f"y{i}"], name=f"add{i}"))
        prev = f"y{i}"
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", elem, [size])],
        [helper.make_tensor_value_info(prev, elem, [size])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _inline(m: onnx.ModelProto) -> onnx.ModelProto:
    """The model with external data read in, as a plain message (no data_location marks)."""
    m = onnx.ModelProto.FromString(m.SerializeToString())
    for t in external_data_helper._get_all_tensors(m):  # noqa: SLF001 (onnx's helper)
        t.ClearField("data_location")
    return m


def _save_onnx_external(m, path, all_in_one=True):
    onnx.save_model(
        m,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=all_in_one,
        location="weights.bin" if all_in_one else None,
        size_threshold=0,
    )


@pytest.mark.parametrize("all_in_one", [True, False], ids=["one_file", "per_tensor"])
def test_reads_onnx_external_layouts(tmp_path, all_in_one):
    m = _model()
    path = tmp_path / "model.onnx"
    _save_onnx_external(onnx.ModelProto.FromString(m.SerializeToString()), path, all_in_one)
    model = onyx.load(path)
    for init in m.graph.initializer:
        t = model.graph.initializers[init.name].const_value
        assert t.external is not None
        np.testing.assert_array_equal(t.numpy(), numpy_helper.to_array(init))
    # saving next to the original keeps the layout readable; elsewhere the data comes along
    for target in (tmp_path / "again.onnx", tmp_path / "sub" / "moved.onnx"):
        target.parent.mkdir(exist_ok=True)
        onyx.save(model, target)
        assert onnx.load(target) == onnx.load(path)
        assert _inline(onnx.load(target)) == m


def test_lossless_without_loading_external_data(tmp_path):
    m = _model()
    path = tmp_path / "model.onnx"
    _save_onnx_external(onnx.ModelProto.FromString(m.SerializeToString()), path)
    original = onnx.load(path, load_external_data=False)
    model = onyx.load(path, load_external_data=False)
    assert model.graph is not None
    assert onnx.ModelProto.FromString(onyx.dumps(model)) == original
    with pytest.raises(FormatError, match="not loaded"):
        model.graph.initializers["w0"].const_value.numpy()


def test_external_data_is_mapped_lazily(tmp_path):
    m = _model(size=1 << 16)
    path = tmp_path / "model.onnx"
    _save_onnx_external(m, path)
    model = onyx.load(path)
    t = model.graph.initializers["w1"].const_value
    assert not t.is_loaded()
    assert t.has_raw_bytes() and isinstance(t.raw_bytes(), memoryview)
    assert isinstance(t.raw_bytes().obj, mmap.mmap)
    arr = t.numpy()
    assert not arr.flags.writeable and not arr.flags.owndata


@pytest.mark.parametrize("mode", [True, "per_tensor"])
def test_writes_external_data_onnx_can_read(tmp_path, mode):
    m = _model(n=4, size=3000)
    model = onyx.loads(m.SerializeToString())
    path = tmp_path / "out.onnx"
    onyx.save(model, path, external_data=mode, size_threshold=1024)
    proto = onnx.load(path, load_external_data=False)
    offsets = []
    for init in proto.graph.initializer:
        assert init.data_location == TensorProto.EXTERNAL
        info = external_data_helper.ExternalDataInfo(init)
        offsets.append(info.offset or 0)
        assert (info.offset or 0) % 64 == 0
    files = {external_data_helper.ExternalDataInfo(i).location for i in proto.graph.initializer}
    assert len(files) == (1 if mode is True else 4)
    assert _inline(onnx.load(path)) == m
    onnx.checker.check_model(str(path))


def test_size_threshold_keeps_small_tensors_inline(tmp_path):
    m = _model(n=2, size=16)
    m.graph.initializer.append(numpy_helper.from_array(np.zeros(10000, np.float32), "big"))
    path = tmp_path / "out.onnx"
    onyx.save(onyx.loads(m.SerializeToString()), path, external_data=True, size_threshold=1024)
    proto = onnx.load(path, load_external_data=False)
    where = {i.name: i.data_location for i in proto.graph.initializer}
    assert where == {"w0": 0, "w1": 0, "big": TensorProto.EXTERNAL}
    assert (tmp_path / "out.onnx.data").exists()


def _external_model(tmp_path, location: str):
    m = _model(n=1, size=8)
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    e = t.external_data.add()
    e.key, e.value = "location", location
    path = tmp_path / "model" / "m.onnx"
    path.parent.mkdir()
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("location", ["/etc/passwd", "../secret.bin", "a/../../secret.bin"])
def test_refuses_locations_outside_the_folder(tmp_path, location):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 32)
    path = _external_model(tmp_path, location)
    with pytest.raises(FormatError, match="absolute|leaves the model folder") as e:
        onyx.load(path)
    assert "m.onnx" in str(e.value) and "w0" in str(e.value)


def test_refuses_symlinks_leaving_the_folder(tmp_path):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 32)
    path = _external_model(tmp_path, "link.bin")
    os.symlink(tmp_path / "secret.bin", path.parent / "link.bin")
    with pytest.raises(FormatError, match="outside the model folder"):
        onyx.load(path)


def test_missing_and_short_external_files(tmp_path):
    path = _external_model(tmp_path, "weights.bin")
    with pytest.raises(FormatError, match="weights.bin.*not found") as e:
        onyx.load(path)
    assert "w0" in str(e.value)
    (path.parent / "weights.bin").write_bytes(b"\0" * 8)  # 8 floats need 32 bytes
    with pytest.raises(FormatError, match="w0.*32"):
        onyx.load(path)


def test_save_over_the_loaded_file(tmp_path):
    m = _model(size=1 << 15)
    path = tmp_path / "model.onnx"
    _save_onnx_external(onnx.ModelProto.FromString(m.SerializeToString()), path)
    model = onyx.load(path)
    assert model.graph is not None  # edits would go here
    onyx.save(model, path)  # rewrites weights.bin while it is mapped: atomic rename keeps both
    assert _inline(onnx.load(path)) == m
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".onyx-")]


def test_atomic_write_leaves_no_half_file(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"old")
    model = onyx.loads(_model().SerializeToString())

    def boom(*a, **k):
        yield b"partial"
        raise RuntimeError("disk full")

    monkeypatch.setattr(saving, "_serialize", lambda *a, **k: boom())
    with pytest.raises(RuntimeError):
        onyx.save(model, path)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["m.onnx"]


def test_big_tensors_are_streamed_and_split(tmp_path, monkeypatch):
    """The >2 GiB mechanism at small scale: no message ever holds a big tensor's bytes."""
    monkeypatch.setattr(model_io, "BIG_TENSOR", 1024)
    monkeypatch.setattr(model_io, "SPLIT_MIN", 1024)
    monkeypatch.setattr(model_io, "MMAP_MIN", 1024)
    m = _model(n=3, size=4096)
    m.graph.initializer.append(numpy_helper.from_array(np.arange(4, dtype=np.int64), "small"))
    path = tmp_path / "in.onnx"
    onnx.save(m, path)
    model = onyx.load(path)
    src = model.graph_source
    assert isinstance(src.initializers[0].raw_bytes(), memoryview)  # a view of the mapped file
    assert isinstance(src.initializers[0].raw_bytes().obj, mmap.mmap)
    assert model.graph is not None  # convert, so saving goes through the piecewise writer
    sink = saving.ExternalSink(None, None, 0, None)
    chunks = saving._serialize(model, sink, False)  # noqa: SLF001 (serde white-box)
    big = [c for c in chunks if isinstance(c, memoryview) and len(c) >= 4096 * 4]
    assert len(big) == 3  # the tensors' bytes go out as views, never copied into a message
    assert onnx.ModelProto.FromString(b"".join(chunks)) == m
    onyx.save(model, tmp_path / "out.onnx")
    assert onnx.load(tmp_path / "out.onnx") == m


@pytest.mark.skipif(
    not os.environ.get("ONYX_HEAVY_TESTS"), reason="writes 2.2 GB; set ONYX_HEAVY_TESTS=1"
)
def test_model_over_2gib(tmp_path):
    n = (1 << 31) // 4 + 1024  # > 2 GiB of float32 in one model file, inline
    x = onyx.ir.Value("x", onyx.ir.TensorType(onyx.ir.DataType.FLOAT, (n,)))
    w = onyx.ir.Value("w", const_value=onyx.ir.Tensor(np.ones(n, np.float32), name="w"))
    add = onyx.ir.Node("Add", [x, w], ["y"])
    g = onyx.ir.Graph([x], [add.outputs[0]], [add], [w])
    path = tmp_path / "huge.onnx"
    onyx.save(onyx.ir.Model(g, {"": 18}), path)
    assert os.path.getsize(path) > (1 << 31)
    back = onyx.load(path)
    arr = back.graph.initializers["w"].const_value.numpy()
    assert arr.shape == (n,) and arr[-1] == 1.0
    onyx.save(back, tmp_path / "huge_ext.onnx", external_data=True)
    assert os.path.getsize(tmp_path / "huge_ext.onnx") < 4096
