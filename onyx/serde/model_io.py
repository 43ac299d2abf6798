"""onyx.load / loads (saving: saving.py).

A plain model (wire_reader.py follows it exactly) is read straight from its bytes, as long
as protobuf is not imported and it is small (wire_reader.SMALL_ITEMS) or the process's
item budget lasts (wire_reader.ITEM_BUDGET), or protobuf imported, as long as its graph is
not big (wire_reader.WARM_MAX_ITEMS, WARM_MAX_INITIALIZERS); any other goes to
proto_load.py, imported then, which reads it with the generated classes: it splits the model's top-level fields with the
wire scanner, parses everything but the graph with the generated classes, reads the main
graph's initializers (big ones as zero-copy views of the file, which is memory-mapped) and
leaves the nodes as a parsed message until someone asks for ``model.graph``; a big graph is
split field by field (``_GraphSource._split``), so that no message holds its big initializers
and models over protobuf's 2 GiB limit load.
"""

from __future__ import annotations

import os
import sys

from ..errors import NotAModel
from ..ir.graph import Model
from ..utils import gc_paused
from . import wire_reader
from .wire_reader import read_model

#: Files at least this big are memory-mapped instead of read.
MMAP_MIN = 16 << 20
#: Graphs at least this big are split field by field so big tensors are not copied.
SPLIT_MIN = 16 << 20
#: Initializers at least this big are read and written as views of their bytes.
BIG_TENSOR = 1 << 20
_GRAPH = 7
_INITIALIZER = 5
_RAW_DATA = 9
#: Once protobuf is imported: (size, last 256 bytes) of the files wire_reader declined,
#: read by protobuf at once afterwards (a file like one of them but for its middle bytes
#: is read by protobuf too: either way reads it exactly). Cleared past MAX_DECLINED.
_DECLINED: set[tuple] = set()
MAX_DECLINED = 1024
#: The bytes of ``data_location: EXTERNAL`` in a TensorProto (field 14, value 1).
_EXTERNAL_MARK = b"\x70\x01"


# ---------------------------------------------------------------------------------- loading


def load(f, load_external_data: bool = True) -> Model:
    """Read a model from a path, a binary file object or bytes."""
    if isinstance(f, bytes | bytearray | memoryview):
        return _load(f, "<bytes>", None, load_external_data)
    if hasattr(f, "read"):
        name = getattr(f, "name", None)
        base = os.path.dirname(os.path.abspath(name)) if isinstance(name, str) else None
        return _load(
            f.read(), name if isinstance(name, str) else "<file>", base, load_external_data
        )
    path = os.fspath(f)
    data = read_file(path)
    return _load(data, path, os.path.dirname(os.path.abspath(path)), load_external_data)


def read_file(path: str):
    """A file's bytes, memory-mapped when it is big (its weights are then never copied)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size >= MMAP_MIN:
            import mmap  # (an extension module: a small model's load never loads it)

            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        return fh.read()


def as_model(source, load_external_data: bool = True, user: str = "onyx") -> Model:
    """``source`` as an ir.Model: a model as it is, a path (str or PathLike) loaded, bytes
    parsed. The one way every entry point (session, checker, inference) takes a model."""
    if isinstance(source, Model):
        return source
    if isinstance(source, bytes | bytearray | memoryview):
        return loads(bytes(source))
    if isinstance(source, str | os.PathLike):
        return load(source, load_external_data=load_external_data)
    raise NotAModel(f"{user} takes a path, bytes or an onyx.ir.Model, not {type(source).__name__}")


def loads(
    data: bytes, load_external_data: bool = False, base_dir: str | None = None, where: str = ""
) -> Model:
    """Read a model from bytes; external data is resolved against ``base_dir`` if given.
    ``where`` names the bytes in errors (the file they were read from)."""
    return _load(data, where or "<bytes>", base_dir, load_external_data and base_dir is not None)


def _load(data, where: str, base_dir: str | None, load_external_data: bool) -> Model:
    with gc_paused():  # (a tensor object per initializer)
        return _load_model(data, where, base_dir, load_external_data)


def _load_model(data, where: str, base_dir: str | None, load_external_data: bool) -> Model:
    # (what wire_reader saves is protobuf's import, a fixed cost, which a limited read weighs
    # against the items it reads: wire_reader.ITEM_BUDGET, a small model read there whatever
    # is left of it, SMALL_ITEMS; protobuf imported, a model read again costs less there,
    # but for many initializers or thousands of nodes: WARM_MAX_ITEMS, WARM_MAX_INITIALIZERS)
    limited = "google.protobuf" not in sys.modules
    seen = None if limited or not isinstance(data, bytes) else (len(data), data[-256:])
    if seen is not None and seen in _DECLINED:
        model = None  # (declined before: a big model's scan to its 129th item cost 0.1-0.4 ms)
    else:
        model = _read_here(data, limited)
        if model is None and seen is not None:
            if len(_DECLINED) >= MAX_DECLINED:
                _DECLINED.clear()
            _DECLINED.add(seen)
    if model is None:  # (not plain: protobuf's generated classes read it, or report the error)
        from .proto_load import load_model

        return load_model(data, where, base_dir, load_external_data)
    model.base_dir = base_dir
    return model


def _read_here(data, limited: bool) -> Model | None:
    """wire_reader's IR of ``data``, or None (not plain, or left to protobuf's reader)."""
    if limited:  # (protobuf not imported: the budget decides, a small model read whatever)
        return read_model(data, limited=True, max_items=wire_reader.SMALL_ITEMS)
    return read_model(
        data,
        max_items=wire_reader.WARM_MAX_ITEMS,
        max_initializers=wire_reader.WARM_MAX_INITIALIZERS,
    )


def __getattr__(name: str):
    """The protobuf path's names, as model_io offered them before it moved to proto_load.py
    (imported on first use: a plain model's session never imports protobuf)."""
    if name in ("split_model", "_GraphSource", "_Externals", "_parse"):
        from . import proto_load

        return getattr(proto_load, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
