"""A chain of channels-last steps in one native call (nhwc_chain.c): nhwc.c's tasks, each
with its tensors named as (base, byte offset) into the call's bases (see ChainProgram)."""

from __future__ import annotations

import ctypes

import numpy as np

from ...errors import InvalidArgument
from . import _core as core
from . import nhwc
from ._core import _I64, _P, abi, check

#: A step's tensors, in the order of its refs.
X, Y, S, Z = range(4)
#: The base of no tensor.
NONE = (-1, 0)


@abi("chain_step")
class _ChainStep(ctypes.Structure):
    _fields_ = [
        ("task", _P),
        ("cuts", _P),
        ("parts", _I64),
        ("ways", _I64),
        ("refs", _I64 * 8),
    ]


def available() -> bool:
    """Whether chains run here (the library loaded, nhwc.c's kernels on)."""
    return nhwc.available() and getattr(core.lib, "nhwc_chain", None) is not None


class ChainProgram:
    """Steps made once: (task, cuts, parts, ways, refs) each, ``task`` an nhwc.c task
    (nhwc.NhwcConv's or a mean's) whose pointer fields are not read, ``cuts`` an int64 array,
    ``refs`` (base, byte offset) for x, y, s and z (NONE where a step has none); ``sizes``:
    the bytes each base holds. A call passes the bases' addresses (an int64 array)."""

    __slots__ = ("steps", "keep", "sizes", "n", "steps_at", "sizes_at", "nbases")

    def __init__(self, steps: list[tuple], sizes: list[int]):
        self.keep = [(task, cuts) for task, cuts, *_ in steps]  # (the C side's pointers)
        table = (_ChainStep * len(steps))()
        for row, (task, cuts, parts, ways, refs) in zip(table, steps):
            row.task, row.cuts = ctypes.addressof(task), cuts.ctypes.data
            row.parts, row.ways = parts, ways
            flat = [v for ref in refs for v in ref]
            if len(flat) != 8:
                raise InvalidArgument(f"a chain step names 4 tensors, got {refs!r}")
            row.refs[:] = flat
        self.steps, self.n = table, len(steps)
        self.sizes = np.array(sizes, np.int64)
        self.steps_at, self.sizes_at = ctypes.addressof(table), self.sizes.ctypes.data
        self.nbases = len(sizes)

    def __call__(self, bases: np.ndarray) -> None:
        """Runs the steps on bases (int64 addresses, one per size)."""
        if bases.shape != (self.nbases,) or bases.dtype != np.int64:
            raise InvalidArgument(f"a chain of {self.nbases} bases got {bases.shape} {bases.dtype}")
        self.run_at(bases.ctypes.data)

    def run_at(self, bases_at: int) -> None:
        """__call__ given the address of the bases (an int64 array of nbases: the caller's
        own, checked once when it made it)."""
        status = _CALL[0](self.steps_at, self.n, bases_at, self.sizes_at, self.nbases)
        if status:
            check(status, "channels-last chain")


_CALL: list = [None]  # (lib.onyx_nhwc_chain, set by bind)


def bind(lib, isa: int) -> None:
    call = _CALL[0] = lib.onyx_nhwc_chain
    call.restype = ctypes.c_int
    call.argtypes = [_P, _I64, _P, _P, _I64]
    lib.nhwc_chain = call


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
