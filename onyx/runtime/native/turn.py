"""The wait for the turn short runs take (turn.c, Linux): a waiter sleeps on a futex and
watches the holder without the GIL (runtime/turns.py's ``_Turn``)."""

from __future__ import annotations

import ctypes

from . import _core as core


def turn_functions():
    """(wait, ring) of turn.c, or None (no library, or not Linux): ``wait(word, state, token,
    idle, poll, until)`` releases the GIL while it waits (how it ended: turn.c's enum, -1 for
    arguments refused), ``ring(word, how)`` (turns.py's RUNG or POKED) keeps it (a
    futex wake: a holder handing the turn over must not hand the GIL away for it)."""
    lib = core.lib
    if lib is None or getattr(lib, "turn_wait", None) is None:
        return None
    return lib.turn_wait, lib.turn_ring


def turn_pass():
    """turn.c's ``pass(handed, word, state, token, idle, poll, until)``: rings the word
    ``handed`` (the turn is its waiter's), then waits as ``wait``, the GIL released for both
    (None: no library, not Linux, or a library built before it)."""
    lib = core.lib
    return None if lib is None else getattr(lib, "turn_pass", None)


def bind(lib, isa: int) -> None:
    lib.onyx_turn_ok.restype = ctypes.c_int
    lib.onyx_turn_ok.argtypes = []
    wait = lib.onyx_turn_wait
    wait.restype = ctypes.c_int
    wait.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_double] * 4
    ring = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)
    address = ctypes.cast(lib.onyx_turn_ring, ctypes.c_void_p).value
    ok = lib.onyx_turn_ok() == 1
    lib.turn_wait = wait if ok else None
    lib.turn_ring = ring(address) if ok else None
    passes = getattr(lib, "onyx_turn_pass", None)  # (absent from a library built before it)
    if passes is not None:
        passes.restype = ctypes.c_int
        passes.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_double] * 4
    lib.turn_pass = passes if ok else None


core.join(__name__, bind)  # (bound to the library now that it is imported: _core.join)
