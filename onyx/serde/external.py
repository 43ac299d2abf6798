"""External data: tensors whose bytes live in files next to the model.

Reading maps each data file once (mmap) and gives tensors zero-copy views, so weights are read
from disk only when used. Locations are checked: an absolute path, a ``..`` component or a
symlink that leads out of the model's folder is refused.
"""

from __future__ import annotations

import os
import re
import weakref

from ..errors import FormatError
from ..ir.dtypes import DataType
from ..ir.tensor import ExternalData, Tensor

# (tensors.py, which imports protobuf, is imported where a tensor is read or written: the
# runtime imports this module for MAPPED_FILES alone, kernels/mapped.py, and a model the wire
# path read must not import protobuf for that)


def safe_location(base_dir: str, location: str, what: str) -> str:
    """The absolute path of ``location`` under ``base_dir``; FormatError if it would leave it."""
    if not location:
        raise FormatError(f"{what}: external data has no location")
    if (
        os.path.isabs(location)
        or location.startswith(("/", "\\"))
        or re.match(r"^[A-Za-z]:", location)
    ):
        raise FormatError(f"{what}: external data location {location!r} is an absolute path")
    parts = re.split(r"[\\/]+", location)
    if ".." in parts:
        raise FormatError(f"{what}: external data location {location!r} leaves the model folder")
    path = os.path.join(base_dir, *[p for p in parts if p not in ("", ".")])
    real_base = os.path.realpath(base_dir)
    real = os.path.realpath(path)
    if os.path.commonpath([real_base, real]) != real_base:
        raise FormatError(
            f"{what}: external data location {location!r} resolves outside the model folder "
            f"(through a symlink)"
        )
    return path


#: The file each data mapping was made from: a few rows of a large table are read from it
#: with pread instead of through the mapping (runtime/kernels/mapped.py).
MAPPED_FILES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class ExternalResolver:
    """Gives tensors of one model their external bytes, mapping each file once."""

    def __init__(self, base_dir: str, where: str):
        self.base_dir = base_dir
        self.where = where
        self._maps: dict[str, object] = {}

    def _map(self, path: str, location: str, what: str):
        buf = self._maps.get(path)
        if buf is None:
            if not os.path.isfile(path):
                raise FormatError(f"{what}: external data file {location!r} not found ({path})")
            import mmap  # (an extension module: a model without external data never loads it)

            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
                if size and hasattr(mmap, "MADV_RANDOM"):
                    # (pages on first touch, not 64 KB around each, where the page cache
                    # holds small pages: large folios still map whole, see runtime/kernels/mapped.py)
                    buf.madvise(mmap.MADV_RANDOM)
                if size:
                    MAPPED_FILES[buf] = path
            self._maps[path] = buf
        return buf

    def tensor(self, ext: ExternalData, dtype: DataType, dims, name: str, what: str) -> Tensor:
        what = f"{self.where}: {what}"
        path = safe_location(self.base_dir, ext.location, what)
        buf = self._map(path, ext.location, what)
        try:
            offset, length = ext.offset, ext.length
        except ValueError:
            raise FormatError(f"{what}: bad external data offset/length {ext.entries}") from None
        size = len(buf)
        if length is None:
            length = size - offset
        if offset < 0 or length < 0 or offset + length > size:
            raise FormatError(
                f"{what}: external data {ext.location!r} offset {offset} length {length} "
                f"exceeds the file ({size} bytes)"
            )
        if dtype != DataType.STRING:
            from .tensors import check_raw_size

            check_raw_size(length, dtype, dims, what)
        ext.base_dir = self.base_dir
        return Tensor.from_raw(memoryview(buf)[offset : offset + length], dtype, dims, name)


def _align(offset: int, length: int) -> int:
    step = 4096 if length >= 65536 else 64
    return -(-offset // step) * step


class ExternalSink:
    """Collects tensors to write as external data while a model is serialized.

    ``mode``: None keeps tensors that came from external data external (same location names),
    True moves every tensor of ``size_threshold`` bytes or more to ``location`` (one file),
    "per_tensor" gives each such tensor its own file, False writes everything inline.
    """

    def __init__(self, base_dir: str | None, mode, size_threshold: int, location: str | None):
        self.base_dir = base_dir
        self.mode = mode
        self.size_threshold = size_threshold
        self.location = location
        self.files: dict[str, list] = {}  # location -> [(offset, buffer)]
        self.ends: dict[str, int] = {}
        self._names: set[str] = set()
        #: requested location -> the one written: a file that exists already (the data of the
        #: model being replaced) is not overwritten but superseded by a fresh name
        self.moved: dict[str, str] = {}
        self.requested: set[str] = set()

    def __call__(self, t: Tensor, tp, top_level: bool) -> bool:
        if t.external is not None and not t.has_raw_bytes() and not t.is_loaded():
            return False  # never read: the reference is kept as it is
        if self.mode is None:
            if t.external is None or self.base_dir is None:
                return False
            location = t.external.location
        elif self.mode is False:
            return False
        else:
            if t.dtype == DataType.STRING or t.dtype == DataType.UNDEFINED:
                return False
            if t.nbytes < self.size_threshold:
                return False
            location = self.location if self.mode != "per_tensor" else self._tensor_file(t)
        location = self._fresh_location(location)
        buf = memoryview(t.raw_bytes()).cast("B")
        offset = _align(self.ends.get(location, 0), len(buf))
        self.files.setdefault(location, []).append((offset, buf))
        self.ends[location] = offset + len(buf)
        e = tp.external_data.add()
        e.key, e.value = "location", location
        e = tp.external_data.add()
        e.key, e.value = "offset", str(offset)
        e = tp.external_data.add()
        e.key, e.value = "length", str(len(buf))
        tp.data_location = tp.EXTERNAL  # (DataLocation's value, on the message class)
        return True

    def _tensor_file(self, t: Tensor) -> str:
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", t.name) or "tensor"
        stem = stem.lstrip(".") or "tensor"
        name, i = stem, 1
        while name in self._names:
            name = f"{stem}_{i}"
            i += 1
        self._names.add(name)
        return name

    def _fresh_location(self, location: str) -> str:
        """``location``, or a variant of it when a file of that name exists: a save must not
        change the data an existing model file reads until that file is replaced too."""
        if location in self.files or self.base_dir is None:
            return location
        if location in self.moved:
            return self.moved[location]
        self.requested.add(location)
        chosen = location
        root, ext = os.path.splitext(location)
        n = 0
        while os.path.lexists(os.path.join(self.base_dir, chosen)) or chosen in self.files:
            n += 1
            chosen = f"{root}.{n}{ext}"
        if chosen != location:
            self.moved[location] = chosen
        return chosen

    def superseded(self, old_locations: set[str]) -> set[str]:
        """Of the locations the replaced model read, those this save wrote anew under another
        name (the requested name or a numbered variant of it): their files are no longer read."""
        out = set()
        for location in old_locations - set(self.files):
            for req in self.requested:
                root, ext = os.path.splitext(req)
                variant = re.fullmatch(re.escape(root) + r"\.\d+" + re.escape(ext), location)
                if location == req or variant:
                    out.add(location)
        return out

    def outputs(self):
        """(path, chunks) of every external file to write."""
        for location, pieces in self.files.items():
            path = safe_location(self.base_dir, location, "external data")

            def chunks(pieces=pieces):
                pos = 0
                for offset, buf in pieces:
                    if offset > pos:
                        yield b"\0" * (offset - pos)
                    yield buf
                    pos = offset + len(buf)

            yield path, chunks()
