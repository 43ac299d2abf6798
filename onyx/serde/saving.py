"""onyx.save / dumps: an IR model to a file or bytes.

An unedited graph is written back as the bytes it was read from; otherwise the graph is written
piece by piece (the big initializers as views of their data), so no message ever holds the big
tensors and models over protobuf's 2 GiB limit are written too. A file and its external data
are replaced together or not at all. (Apart from model_io.py's loading: a session reads a model
and never writes one.)
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ..errors import InvalidArgument, SaveError
from ..ir.dtypes import DataType
from ..ir.graph import Model
from ..proto import GraphProto, ModelProto, TensorProto
from . import model_io, wire
from .external import ExternalSink
from .model_io import _GRAPH, _INITIALIZER, _RAW_DATA
from .writer import Writer


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
        if (t.extras or {}).get("storage") == "typed" or t.nbytes < model_io.BIG_TENSOR:
            return False
        streamed[id(tp)] = memoryview(t.raw_bytes()).cast("B")
        return True

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
        m = model_io.load(path, load_external_data=False)
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
