"""Small helpers every layer of onyx shares."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many linked objects that live on (a
    model's graph, a clone of it, a plan): it would scan them, and in its older generations
    the whole heap, over and over, a cost that grows faster than the graph. What it would
    have found waits until after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
