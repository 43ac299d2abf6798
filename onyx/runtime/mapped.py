"""Rows of a large memory-mapped constant, read without keeping the file's pages mapped.

An LLM's embedding table is the biggest tensor of an int4 model (65 of the 80 MiB of a d=512,
32000-word decoder) and a step reads a few of its rows. Through the model's file mapping, each
row maps far more than its bytes: the page cache holds the file in large folios (ext4 on
Linux 6.x), and a fault maps the whole folio around the address, up to 2 MiB, whatever
madvise(MADV_RANDOM) says. A 512-token prompt then left the whole table resident (RSS = the
file). :func:`take_rows` copies the rows one at a time and unmaps the pages each one mapped
(MADV_DONTNEED on a read-only file mapping drops the page table entries only; the page cache
keeps the data, and the next read maps it again), so a gather costs its rows' bytes of memory.
"""

from __future__ import annotations

import mmap

import numpy as np

#: Tables smaller than this are gathered by np.take as they are (their pages may stay mapped).
LARGE_TABLE_BYTES = 16 << 20
#: The span unmapped around each row: the largest folio a fault maps (a PMD).
_SPAN = 2 << 20
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


def file_mapping(a: np.ndarray) -> tuple[mmap.mmap, int, int] | None:
    """(the mmap a's data lies in, a's offset in it, the mapping's address) where a is a read-only view of a
    memory-mapped file (an external-data initializer), else None."""
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


def take_rows(data: np.ndarray, indices: np.ndarray) -> np.ndarray | None:
    """np.take(data, indices, axis=0) for a large C-contiguous table mapped from a file, its
    rows' pages unmapped after each copy; None where that does not apply (the caller's
    np.take runs)."""
    if (
        _DONTNEED is None
        or data.nbytes < LARGE_TABLE_BYTES
        or data.ndim < 2
        or not data.flags.c_contiguous
        or data.flags.writeable
        or indices.size > data.shape[0]  # (a prompt's rows, not a whole-table shuffle)
    ):
        return None
    found = file_mapping(data)
    if found is None:
        return None
    buf, offset, address = found
    n, row = data.shape[0], data[0].nbytes
    flat = np.asarray(indices, np.int64).reshape(-1)
    flat = np.where(flat < 0, flat + n, flat)
    if flat.size and (flat.min() < 0 or flat.max() >= n):
        return None  # (np.take raises its IndexError)
    out = np.empty((flat.size,) + data.shape[1:], data.dtype)
    size = len(buf)
    for i, r in enumerate(flat.tolist()):
        out[i] = data[r]
        at = address + offset + r * row  # (folios are mapped at aligned addresses)
        lo = max(0, at - at % _SPAN - address)
        hi = min(size, -(-(at + row) // _SPAN) * _SPAN - address)
        buf.madvise(_DONTNEED, lo, hi - lo)
    return out.reshape(indices.shape + data.shape[1:])
