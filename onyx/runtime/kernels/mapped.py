"""Rows of a large memory-mapped constant, read without mapping the file's pages.

An LLM's embedding table is the biggest tensor of an int4 model (62 of the 80 MiB of a d=512,
32000-word decoder) and a step reads a few of its rows. Through the model's file mapping, each
row maps far more than its bytes: the page cache holds the file in large folios (ext4 on
Linux 6.x), and a fault maps the whole folio around the address, up to 2 MiB, whatever
madvise(MADV_RANDOM) says. A 512-token prompt then left the whole table resident. :func:`take_rows`
reads the rows with pread from the file the mapping was made from (serde/external.py records
it), into the result: memory holds the rows' bytes only. Where the file cannot be opened, the
rows are copied through the mapping and the pages each one mapped unmapped again
(MADV_DONTNEED on a read-only file mapping drops the page table entries only).
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import TYPE_CHECKING

import numpy as np

from ...serde.external import MAPPED_FILES
from .derived import derived

#: Tables smaller than this are gathered by np.take as they are (their pages may stay mapped).
LARGE_TABLE_BYTES = 16 << 20
#: The span unmapped around each row: the largest folio a fault maps (a PMD).
_SPAN = 2 << 20
_PREADV = getattr(os, "preadv", None)  # (POSIX only: elsewhere np.take runs)
#: An open descriptor per mapping's file, closed with the mapping.
_FDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


if TYPE_CHECKING:
    import mmap


def _dontneed() -> int | None:
    """mmap.MADV_DONTNEED (None where the platform has none); asked once a mapping exists,
    so mmap is imported then: a model without one (the most) never imports the module."""
    return getattr(sys.modules["mmap"], "MADV_DONTNEED", None)


def file_mapping(a: np.ndarray) -> tuple[mmap.mmap, int, int] | None:
    """(the mmap a's data lies in, a's offset in it, the mapping's address) where a is a
    read-only view of a memory-mapped file (an external-data initializer), else None."""
    if "mmap" not in sys.modules:  # (no file is mapped, nor was one ever: never imported)
        return None
    import mmap  # (the statement: another thread's import of it waits to be done)

    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    if type(base) is not mmap.mmap or base.closed:
        return None
    start = np.frombuffer(base, np.uint8).ctypes.data
    offset = a.ctypes.data - start
    return (base, offset, start) if 0 <= offset <= len(base) - a.nbytes else None


def _file_of(buf: mmap.mmap) -> int | None:
    """A descriptor of the file ``buf`` maps (opened once), or None."""
    fd = _FDS.get(buf)
    if fd is None:
        path = MAPPED_FILES.get(buf)
        if path is None:
            return None
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        if os.fstat(fd).st_size != len(buf):  # (not the file it was: the mapping's pages)
            os.close(fd)
            return None
        _FDS[buf] = fd
        weakref.finalize(buf, os.close, fd)
    return fd


def _rows_by_pread(fd: int, offset: int, row: int, flat: list, out: np.ndarray) -> bool:
    rows = out.reshape(len(flat), -1).view(np.uint8)
    for i, r in enumerate(flat):
        if _PREADV(fd, [rows[i]], offset + r * row) != row:
            return False
    return True


def _rows_by_mapping(data, buf, offset: int, address: int, flat: list, out) -> None:
    row, size, dontneed = data[0].nbytes, len(buf), _dontneed()
    for i, r in enumerate(flat):
        out[i] = data[r]
        at = address + offset + r * row  # (folios are mapped at aligned addresses)
        lo = max(0, at - at % _SPAN - address)
        hi = min(size, -(-(at + row) // _SPAN) * _SPAN - address)
        buf.madvise(dontneed, lo, hi - lo)


def take_rows(data: np.ndarray, indices: np.ndarray) -> np.ndarray | None:
    """np.take(data, indices, axis=0) for a large C-contiguous table mapped from a file, read
    without mapping its pages; None where that does not apply (the caller's np.take runs)."""
    if (
        data.nbytes < LARGE_TABLE_BYTES
        or data.ndim < 2
        or not data.flags.c_contiguous
        or data.flags.writeable
        or indices.size > data.shape[0]  # (a prompt's rows, not a whole-table shuffle)
    ):
        return None
    source = derived(data, "mapped rows", lambda: _source(data))
    if source is None:
        return None
    buf, offset, address, fd = source
    n = data.shape[0]
    rows = [r + n if r < 0 else r for r in np.asarray(indices).reshape(-1).tolist()]
    if any(not 0 <= r < n for r in rows):
        return None  # (np.take raises its IndexError)
    out = np.empty((len(rows),) + data.shape[1:], data.dtype)
    if not rows:
        return out.reshape(indices.shape + data.shape[1:])
    if fd is None or _PREADV is None or not _rows_by_pread(fd, offset, data[0].nbytes, rows, out):
        if _dontneed() is None:
            return None
        _rows_by_mapping(data, buf, offset, address, rows, out)
    return out.reshape(indices.shape + data.shape[1:])


def _source(data: np.ndarray):
    """(mapping, data's offset in it, its address, the file's descriptor or None), or None
    where data is no view of a file mapping."""
    found = file_mapping(data)
    return None if found is None else (*found, _file_of(found[0]))


def release(a: np.ndarray) -> None:
    """Unmap the whole pages of a read-only view of a file mapping (a constant a kernel has
    copied into its own form and will not read again); anything else is left alone."""
    if type(a) is not np.ndarray or a.flags.writeable:
        return
    found = file_mapping(a)
    if found is None or _dontneed() is None:
        return
    buf, offset, address = found
    page = sys.modules["mmap"].PAGESIZE
    lo = -(-(address + offset) // page) * page - address
    hi = (address + offset + a.nbytes) // page * page - address
    if hi > lo:
        buf.madvise(_dontneed(), lo, hi - lo)
