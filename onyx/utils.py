"""Small helpers every layer of onyx shares."""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np


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


def settle_long_lived() -> None:
    """Put every object the cyclic collector tracks in its oldest generation, unscanned
    (gc.freeze, then gc.unfreeze, which hands the frozen objects to that generation): for
    right after an import. What an import makes lives as long as the process, and the
    collector's first pass after it scanned all of it (a millisecond and more of a cold start)
    to find nothing. The caller's young objects go along (the collector's full passes still
    look at them). Nothing moves where the caller has frozen objects of its own: unfreezing
    would hand those back to the collector."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def import_settled(*modules: str) -> None:
    """Import those of ``modules`` not imported yet, with the collector paused, and settle
    what the imports made (settle_long_lived): for a session's creation, before it reads the
    model, so that only the user's objects and the imports' are young then (once the model is
    read, a creation's garbage, the optimizer's dropped nodes, would be moved too, where only a
    full pass finds it). An import that fails is left to the caller's own import statement,
    which raises as it always did."""
    new = [m for m in modules if m not in sys.modules]
    if not new:
        return
    with gc_paused():
        for module in new:
            try:
                importlib.import_module(module)
            except ImportError:
                pass
    settle_long_lived()


def unique(values) -> np.ndarray:
    """np.unique(values): its sorted distinct values (NaNs as one). numpy 2's np.unique, asked
    for neither indices nor counts, first asks numpy.ma whether the array is masked, and the
    first such call of a process imports numpy.ma (5-8 ms of a tree ensemble's cold start);
    asked for the counts it sorts, and gives the same values."""
    return np.unique(values, return_counts=True)[0]
