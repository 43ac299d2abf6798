"""onyx.load / loads / save / dumps.

Loading splits the model's top-level fields with the wire scanner, parses everything but the
graph with the generated classes, reads the main graph's initializers (big ones as zero-copy
views of the file, which is memory-mapped) and leaves the nodes as a parsed message until
someone asks for ``model.graph``. Saving an unedited graph writes its original bytes back;
otherwise the graph is written piece by piece, so no message ever holds the big tensors and
models over protobuf's 2 GiB limit work both ways.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from google.protobuf.message import DecodeError

from ..errors import FormatError, InvalidArgument, NotAModel, SaveError
from ..ir.dtypes import DataType
from ..ir.graph import Model
from ..proto import GraphProto, ModelProto, TensorProto
from ..utils import gc_paused
from . import wire
from .external import ExternalResolver, ExternalSink
from .reader import Reader
from .tensors import tensor_from_proto

#: Files at least this big are memory-mapped instead of read.
MMAP_MIN = 16 << 20
#: Graphs at least this big are split field by field so big tensors are not copied.
SPLIT_MIN = 16 << 20
#: Initializers at least this big are read and written as views of their bytes.
BIG_TENSOR = 1 << 20
_GRAPH = 7
_INITIALIZER = 5
_RAW_DATA = 9
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


def _parse(cls, data, where: str, part: str):
    msg = cls()
    try:
        msg.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise FormatError(f"{where}: {part} is not valid protobuf ({e})") from None
    return msg


def _load(data, where: str, base_dir: str | None, load_external_data: bool) -> Model:
    with gc_paused():  # (a tensor object per initializer)
        return _load_model(data, where, base_dir, load_external_data)


def _load_model(data, where: str, base_dir: str | None, load_external_data: bool) -> Model:
    mp, graph_bytes = split_model(data, where)
    externals = ExternalResolver(base_dir, where) if load_external_data and base_dir else None
    reader = Reader(where, externals)
    model = reader.model_header(mp)
    model.base_dir = base_dir
    if graph_bytes is not None:
        model.set_graph_source(_GraphSource(reader, graph_bytes, data, where))
    return model


def split_model(data, where: str) -> tuple[ModelProto, memoryview | None]:
    """A model file's bytes as its parsed header (every field but the graph) and the bytes of
    its main graph (None when it has none); raises FormatError for what is not a model."""
    mv = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
    if len(mv) == 0:
        raise FormatError(f"{where}: empty file, not an ONNX model")
    header_parts, graph_spans = [], []
    try:
        for field, start, payload, end in wire.iter_fields(mv):
            if field == _GRAPH and payload != end and _is_len(mv, start):
                graph_spans.append((payload, end))
            elif field == _GRAPH and _is_len(mv, start):
                graph_spans.append((end, end))
            else:
                header_parts.append(mv[start:end])
    except wire.WireError as e:
        raise FormatError(f"{where}: not an ONNX model (truncated or corrupt bytes: {e})") from None
    mp = _parse(ModelProto, b"".join(header_parts), where, "the model")
    if not graph_spans and not mp.HasField("ir_version") and not mp.opset_import:
        raise FormatError(f"{where}: not an ONNX model (no graph, IR version or opset)")
    if not graph_spans:
        return mp, None
    if len(graph_spans) == 1:
        return mp, mv[graph_spans[0][0] : graph_spans[0][1]]
    # a repeated singular message field merges: same as its payloads concatenated
    return mp, memoryview(b"".join(mv[a:b] for a, b in graph_spans))


def _is_len(mv, start: int) -> bool:
    return mv[start] & 7 == wire.LEN


class _GraphSource:
    """The parsed main graph, converted to IR on first access.

    Parsing (and reading the initializers, which checks their sizes and external files) happens
    at load so errors surface there; only the node conversion waits.
    """

    def __init__(self, reader: Reader, graph_bytes: memoryview, data, where: str):
        self.reader = reader
        self.raw = graph_bytes
        self.data = data
        self._marker: bool | None = None
        if len(graph_bytes) < SPLIT_MIN:
            self.gp = _parse(GraphProto, graph_bytes, where, "the graph")
            self.initializers = reader.initializers(self.gp.initializer, "graph")
        else:
            self.gp, self.initializers = self._split(graph_bytes, where)
        self.has_external = any(t.external is not None for t in self.initializers)

    def _split(self, mv: memoryview, where: str):
        rest, order, big = [], [], []
        try:
            for field, start, payload, end in wire.iter_fields(mv):
                if field == _INITIALIZER and end - payload >= BIG_TENSOR and _is_len(mv, start):
                    order.append(len(big))
                    big.append(self._big_tensor(mv, payload, end, where))
                else:
                    if field == _INITIALIZER:
                        order.append(None)
                    rest.append(mv[start:end])
        except wire.WireError as e:
            raise FormatError(f"{where}: graph: truncated or corrupt bytes ({e})") from None
        rest_bytes = b"".join(rest)
        self._marker = _EXTERNAL_MARK in rest_bytes
        gp = _parse(GraphProto, rest_bytes, where, "the graph")
        small = iter(gp.initializer)
        tensors = []
        for i in order:
            if i is None:
                t = next(small)
                tensors.append(self.reader.tensor(t, f"graph initializer {t.name!r}"))
            else:
                tensors.append(big[i])
        del gp.initializer[:]
        return gp, tensors

    def _big_tensor(self, mv: memoryview, start: int, end: int, where: str):
        header, raw = [], None
        for field, fstart, payload, fend in wire.iter_fields(mv, start, end):
            if field == _RAW_DATA and _is_len(mv, fstart):
                raw = mv[payload:fend]
            else:
                header.append(mv[fstart:fend])
        tp = _parse(TensorProto, b"".join(header), where, "an initializer")
        what = f"graph initializer {tp.name!r}"
        try:
            return tensor_from_proto(tp, what, raw=raw, externals=self.reader.externals)
        except FormatError as e:
            raise FormatError(f"{where}: {e}") from None

    def might_have_external(self) -> bool:
        """Whether some tensor outside the initializers may sit in external data."""
        if self.has_external:
            return True
        if self._marker is None:  # the big initializers were not split out: search it all
            self._marker = _EXTERNAL_MARK in bytes(self.raw)
        return self._marker

    def __call__(self):
        with gc_paused():
            return self.reader.graph(self.gp, [], "graph", self.initializers)


# ---------------------------------------------------------------------------------- saving


def save(
    model: Model,
    f,
    external_data: bool | str | None = None,
    size_threshold: int = 1024,
    location: str | None = None,
) -> None:
    """Write a model to a path or a binary file object.

    ``external_data``: None keeps each tensor where it came from (tensors read from external
    data are written to the same location names next to the new file); True stores every
    tensor of ``size_threshold`` bytes or more in one file ``location`` (default: the model
    file's name + ".data"); "per_tensor" gives each such tensor its own file; False writes
    everything into the model file.
    """
    if hasattr(f, "write"):
        name = getattr(f, "name", None)
        base_dir = os.path.dirname(os.path.abspath(name)) if isinstance(name, str) else None
        path = None
    else:
        path = os.path.abspath(os.fspath(f))
        base_dir = os.path.dirname(path)
        name = path
    if external_data not in (None, True, False, "per_tensor", "one_file"):
        raise InvalidArgument("external_data must be None, True, False or 'per_tensor'")
    if external_data == "one_file":
        external_data = True
    if external_data and base_dir is None:
        raise InvalidArgument("external data needs a file path (or a file object with a name)")
    if external_data is True and location is None:
        location = os.path.basename(name) + ".data"
    sink = ExternalSink(base_dir, external_data, size_threshold, location)
    same_dir = (
        base_dir is not None
        and model.base_dir is not None
        and (os.path.realpath(base_dir) == os.path.realpath(model.base_dir))
    )
    chunks = _serialize(model, sink, reuse_external=external_data is None and same_dir)
    if path is not None:
        _save_files(path, chunks, sink)
        return
    staged = _stage(sink.outputs())
    _commit(staged)
    try:
        for c in chunks:
            f.write(c)
    except OSError as e:
        raise _save_error(name or "<file object>", e) from e


def dumps(model: Model) -> bytes:
    """The model as bytes (tensors that came from external data are written inline)."""
    sink = ExternalSink(None, None, 0, None)
    return b"".join(_serialize(model, sink, reuse_external=False))


def _serialize(model: Model, sink: ExternalSink, reuse_external: bool) -> list:
    """The model's bytes as a list of pieces (bytes or views of tensor data)."""
    streamed: dict[int, memoryview] = {}

    def placement(t, tp, top_level: bool) -> bool:
        if sink(t, tp, top_level):
            return True
        if not top_level or t.dtype in (DataType.STRING, DataType.UNDEFINED):
            return False
        if t.external is not None and not t.has_raw_bytes() and not t.is_loaded():
            return False  # an unread external reference stays as it is
        if (t.extras or {}).get("storage") == "typed" or t.nbytes < BIG_TENSOR:
            return False
        streamed[id(tp)] = memoryview(t.raw_bytes()).cast("B")
        return True

    from .writer import Writer  # (here: loading a model, a session's work, never writes one)

    writer = Writer(placement)
    mp = ModelProto()
    writer.model_header(model, mp)
    chunks: list = [mp.SerializeToString()]
    source = model.graph_source
    if source is not None and sink.mode in (None, False):
        # an unedited graph goes back as it came, unless external references must move
        if not source.might_have_external() or (sink.mode is None and reuse_external):
            chunks += [wire.len_prefix(_GRAPH, len(source.raw)), source.raw]
            return chunks
    graph = model.graph
    if graph is None:
        return chunks
    gp = GraphProto()
    writer.graph(graph, gp, initializers=False)
    body = gp.SerializeToString()
    pieces: list = []
    size = len(body)
    for v in graph.initializers.values():
        if v.const_value is None:
            continue
        tp = TensorProto()
        writer.tensor(v.const_value, tp, v.name, top_level=True)
        head = tp.SerializeToString()
        raw = streamed.pop(id(tp), None)
        if raw is None:
            pre = wire.len_prefix(_INITIALIZER, len(head))
            pieces += [pre, head]
            size += len(pre) + len(head)
        else:
            head += wire.len_prefix(_RAW_DATA, len(raw))
            pre = wire.len_prefix(_INITIALIZER, len(head) + len(raw))
            pieces += [pre, head, raw]
            size += len(pre) + len(head) + len(raw)
    chunks += [wire.len_prefix(_GRAPH, size), body, *pieces]
    return chunks


def _save_files(path: str, chunks: list, sink: ExternalSink) -> None:
    """Write the model file and its external data so that a reader sees the old pair or the
    new pair, never a mix: every file goes to a temporary first; the data files then take
    names no existing model reads (``ExternalSink`` gave a fresh name to any that exist),
    the model file is renamed over ``path`` last, and the data it read before and no longer
    does is removed after."""
    old_locations = _external_locations(path) if sink.files else set()
    staged = _stage(sink.outputs())
    staged.append((_write_temp(path, chunks, [t for t, _ in staged]), path))
    _commit(staged)
    base = os.path.dirname(path)
    for location in sink.superseded(old_locations):
        try:
            os.unlink(os.path.join(base, location))
        except OSError:
            pass  # already gone; a leftover file is harmless


def _stage(outputs) -> list[tuple[str, str]]:
    """Each (path, chunks) written to a temporary next to its path: [(temporary, path)]."""
    staged: list[tuple[str, str]] = []
    for target, chunks in outputs:
        try:
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        except OSError as e:
            _discard(t for t, _ in staged)
            raise _save_error(target, e) from e
        staged.append((_write_temp(target, chunks, [t for t, _ in staged]), target))
    return staged


def _commit(staged: list[tuple[str, str]]) -> None:
    """Rename the temporaries over their paths, in order; on failure undo what was done."""
    done: list[str] = []
    for i, (tmp, target) in enumerate(staged):
        try:
            os.replace(tmp, target)
        except OSError as e:
            _discard([t for t, _ in staged[i:]] + done)
            raise _save_error(target, e) from e
        done.append(target)


def _write_temp(target: str, chunks: Iterable, discard_on_error: list[str]) -> str:
    """Write ``chunks`` to a new temporary file in ``target``'s folder (with ``target``'s
    permissions); its path. On failure the temporaries of ``discard_on_error`` go too."""
    folder = os.path.dirname(target) or "."
    import tempfile  # (saving only: not at every import)

    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".onyx-", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as out:
            write_chunks(out, chunks)
        try:
            mode = os.stat(target).st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
        os.chmod(tmp, mode)
    except BaseException as e:
        _discard([*discard_on_error, *([tmp] if tmp else [])])
        if isinstance(e, OSError):
            raise _save_error(target, e) from e
        raise
    return tmp


def write_chunks(out, chunks: Iterable) -> None:
    """Every file a save writes goes through here (tests inject write failures into it)."""
    for c in chunks:
        out.write(c)


def _discard(paths: Iterable[str]) -> None:
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass


def _save_error(target: str, e: OSError) -> SaveError:
    return SaveError(e.errno, f"cannot write {target!r}: {e.strerror or e}")


def _external_locations(path: str) -> set[str]:
    """The external-data locations the model file at ``path`` reads (none if unreadable)."""
    if not os.path.isfile(path):
        return set()
    try:
        m = load(path, load_external_data=False)
        found = set()
        graphs = [m.graph] if m.graph is not None else []
        for g in graphs:
            for v in g.initializers.values():
                ext = v.const_value.external if v.const_value is not None else None
                if ext is not None and ext.location:
                    found.add(ext.location)
        return found
    except Exception:  # noqa: BLE001  (a damaged old file: nothing of it is removed)
        return set()


def _atomic_write(path: str, chunks: Iterable) -> None:
    """Write one file through a temporary renamed over ``path``."""
    _commit([(_write_temp(path, chunks, []), path)])
