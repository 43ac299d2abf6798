"""The optimized-model cache: a session's validated, optimized model kept on disk, so that the
next process creating a session of the same file skips reading the original's checks, the
optimizer and shape inference (most of a small model's creation, and with their imports most
of its cold start).

It is off unless asked for: ``ONYX_MODEL_CACHE=/some/dir`` in the environment, or the session
config entry ``session.onyx.model_cache_dir``. (onnxruntime writes nothing on its own either;
its users get the same effect by saving ``optimized_model_filepath`` and loading that file
with optimizations off, by hand.)

An entry is the optimized model, serialized, under a key that holds everything the optimizer's
output depends on: the source file (its path, size, modification and change times, inode and
device), the options it reads (level, disabled optimizers, config entries), onyx's code (every
source file's size and modification time, in the packages a session uses: a pass or a kernel
whose tables the optimizer bakes in may change), the native library in use and its
instruction sets, numpy's version and the ``ONYX_*`` settings (the folder's own aside).
What cannot be keyed cheaply is never cached: models given as bytes or IR objects, external
data (its files change on their own), initializer or free-dim overrides, custom ops, a model
whose check warned (a hit would not repeat the warning), an ``optimized_model_filepath``.
Only a folder of the user's own that nobody else may write in is used (an entry is what a
session runs). Entries are written whole (a temporary file renamed into place), so processes
sharing the folder never read half of one; writing one removes the other entries of the same
file (one entry a file: an older version of it, of onyx or of its options leaves nothing
behind); an entry ends with the CRC-32 of its bytes, and one that fails it (cut short by a
crash, changed on disk) or cannot be read is ignored; a folder that cannot be written leaves
sessions as they would be without it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from .. import ir

# (tempfile is imported when an entry is written: its import is a few milliseconds of a
# cold start)

CONFIG_KEY = "session.onyx.model_cache_dir"
ENV = "ONYX_MODEL_CACHE"
#: Larger files are not copied into the cache: their creation is mostly reading weights,
#: which a copy would not spare.
MAX_SOURCE_BYTES = 256 << 20
#: An entry's last bytes: the CRC-32 of the ones before (a damaged entry may still parse, as
#: a model without its graph or with other weights, and would then fail or run wrong).
_CHECK_BYTES = 4

_ONYX_ROOT = Path(__file__).resolve().parent.parent
_code_digest: str | None = None


def folder(options) -> str | None:
    """The cache folder the session's options or the environment name, else None."""
    return getattr(options, "_config", {}).get(CONFIG_KEY) or os.environ.get(ENV) or None


def key(source, options) -> str | None:
    """The entry's key for a session of ``source``, or None when it is not to be cached."""
    if not isinstance(source, str | os.PathLike) or not folder(options):
        return None
    if (
        getattr(options, "_initializers", None)
        or getattr(options, "_free_dims", None)
        or getattr(options, "_free_denotations", None)
        or getattr(options, "_custom_ops", None)
        or getattr(options, "optimized_model_filepath", "")
        or int(getattr(options, "graph_optimization_level", 0)) <= 0
        or _custom_kernels()
    ):
        return None
    try:
        path = os.path.realpath(source)
        st = os.stat(path)
    except OSError:
        return None
    if st.st_size > MAX_SOURCE_BYTES:
        return None
    from . import native

    # (the folder is not: as the config entry naming it is not; two spellings of one folder
    # would replace each other's entries)
    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith("ONYX_") and k != ENV)
    parts = (
        path,
        st.st_size,
        st.st_mtime_ns,
        # (a file rewritten in place with its size and modification time set back, as
        # cp -p, tar and rsync do, keeps its inode: its change time moves all the same)
        st.st_ctime_ns,
        st.st_ino,
        st.st_dev,
        int(options.graph_optimization_level),
        sorted(options.disabled_optimizers or ()),
        sorted((k, v) for k, v in getattr(options, "_config", {}).items() if k != CONFIG_KEY),
        native.available(),
        native.load_status(),
        sys.modules["numpy"].__version__,
        settings,
        _code(),
    )
    # (the source's own prefix: writing an entry removes the others of the same file, made
    # for an older version of it, of onyx or of its options, so the folder holds one a file)
    return f"{_digest(path)[:16]}-{_digest(repr(parts))}"


#: The subpackages a session's creation and plan import (with onyx's own top-level modules):
#: what an entry's optimized model may depend on. (tools, debug, genai, quantization, batch,
#: examples: never imported by a session; tests/test_model_cache.py holds creation to it.)
KEYED_PACKAGES = ("runtime", "optimizer", "inference", "serde", "ir", "defs", "proto")
#: Files whose change may change what the optimizer makes (C sources count through the
#: library built from them).
_KEYED_FILES = (".py", ".so", ".json")


def _custom_kernels() -> bool:
    """Whether custom kernels (registered, or a session's while it is made) are in use."""
    custom = sys.modules.get("onyx.runtime.custom_ops")  # (imported by sessions with some)
    return custom is not None and custom.in_use()


def _code() -> str:
    """A digest of onyx's source files' sizes and modification times (once per process)."""
    global _code_digest
    if _code_digest is None:
        found = []
        _scan(str(_ONYX_ROOT), found, recurse=False)
        for package in KEYED_PACKAGES:
            _scan(os.path.join(_ONYX_ROOT, package), found, recurse=True)
        _code_digest = _digest(repr(sorted(found)))
    return _code_digest


def _scan(where: str, found: list, recurse: bool) -> None:
    with os.scandir(where) as entries:
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if recurse and e.name != "__pycache__":
                    _scan(e.path, found, recurse)
            elif e.name.endswith(_KEYED_FILES):
                st = e.stat()
                found.append((e.path, st.st_size, st.st_mtime_ns))


def _digest(text: str) -> str:
    """SHA-256 of ``text``, from the interpreter's own module where it has one: hashlib's
    import loads OpenSSL, a few milliseconds of a cold start."""
    try:
        from _sha256 import sha256  # (Python 3.11)
    except ImportError:
        try:
            from _sha2 import sha256  # (3.12 on)
        except ImportError:
            from hashlib import sha256
    return sha256(text.encode()).hexdigest()


def cacheable(model: ir.Model) -> bool:
    """Whether a loaded source model may be cached: no initializer reads external data."""
    for v in model.graph.initializers.values():
        t = v.const_value
        if t is not None and getattr(t, "external", None) is not None:
            return False
    return True


def _entry(options, entry_key: str) -> str:
    return os.path.join(folder(options), f"{entry_key}.onnx")


def read(options, entry_key: str) -> ir.Model | None:
    """The cached optimized model, or None (no entry, or one that cannot be read)."""
    path = _entry(options, entry_key)
    if not os.path.isfile(path) or not _private(folder(options)):
        return None
    return _load_checked(path)  # (None: a damaged entry, made again the long way)


def _load_checked(path: str) -> ir.Model | None:
    """The model an entry holds, or None where it cannot be read or fails its check."""
    import binascii  # (an extension module: a process without the cache never loads it)

    from ..serde import loads
    from ..serde.model_io import read_file

    try:
        data = memoryview(read_file(path))
        body = data[:-_CHECK_BYTES]
        check = int.from_bytes(data[-_CHECK_BYTES:], "little")
        if len(data) < _CHECK_BYTES or binascii.crc32(body) != check:
            return None
        return loads(body, where=path)
    except Exception:
        return None


def _private(where: str) -> bool:
    """Whether the folder is this user's and nobody else may write in it: a session runs
    what an entry holds, and an entry planted in a shared folder would run instead of the
    model (as pip trusts its cache only in a folder of its own)."""
    if not hasattr(os, "getuid"):  # (no POSIX owners: the folder is the user's choice)
        return True
    try:
        st = os.stat(where)
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def read_types(options, entry_key: str) -> dict[str, ir.Type] | None:
    """The entry's derived types (value name -> type), or None."""
    if not _private(folder(options)):
        return None
    held = _load_checked(_types_entry(options, entry_key))
    if held is None:  # (none written, or damaged: the first run infers them)
        return None
    try:
        return {v.name: v.type for v in held.graph.value_info}
    except Exception:
        return None


def snapshot(model: ir.Model) -> bytes | None:
    """The optimized model's bytes, taken before the plan is made from it."""
    from ..serde import dumps

    try:
        return dumps(model)
    except Exception:  # (a model that does not serialize: no entry)
        return None


def write(options, entry_key: str, data: bytes | None, model: ir.Model) -> None:
    """Store ``data`` (a :func:`snapshot` of ``model``) as the entry, and beside it the types
    shape inference derives for the model's node outputs (what a session's first run checks
    its outputs against: inferring them on a hit would import the inference engine, most of
    a cold start's first run). Silently nothing where the folder cannot be written."""
    from ..inference.engine import derived_types
    from ..serde import dumps

    if data is None:
        return
    try:
        types = [ir.Value(v.name, t) for v, t in derived_types(model).values() if v.name]
    except Exception:  # (as at a first run: inference cannot follow it, no types kept)
        types = None
    try:
        if types is not None:  # (first: a model entry without them is whole all the same)
            held = ir.Model(ir.Graph(name="derived types"), dict(model.opset_imports))
            held.graph.value_info = types
            _write_whole(_types_entry(options, entry_key), dumps(held))
        _write_whole(_entry(options, entry_key), data)
        _remove_older(options, entry_key)
    except Exception:  # (read-only or full disk: no entry)
        return


def _remove_older(options, entry_key: str) -> None:
    """Remove the other entries of the same source file (see :func:`key`)."""
    where = folder(options)
    source = entry_key.split("-")[0] + "-"
    for name in os.listdir(where):
        if name.startswith(source) and not name.startswith(entry_key):
            with contextlib.suppress(OSError):  # (another process's removal first)
                os.unlink(os.path.join(where, name))


def _types_entry(options, entry_key: str) -> str:
    return os.path.join(folder(options), f"{entry_key}.types.onnx")


def _write_whole(path: str, data: bytes) -> None:
    """Write ``path`` so that no reader ever sees a part of it, its check last."""
    import tempfile

    where = os.path.dirname(path)
    os.makedirs(where, mode=0o700, exist_ok=True)
    if not _private(where):
        raise PermissionError(f"{where} is not this user's own folder")
    fd, tmp = tempfile.mkstemp(dir=where, suffix=".tmp")
    try:
        import binascii

        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.write(binascii.crc32(data).to_bytes(_CHECK_BYTES, "little"))
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
