"""Forms derived from constant operands (weights), computed once per session instead of per call;
and a reused scratch buffer for kernels' temporaries.

Integer kernels need their weights centered on the zero point, in float32, with a magnitude
bound; a convolution needs them as a GEMM matrix. Recomputing that on every call costs as much
as the product itself for a batch-1 model. ``derived(w, key, make)`` computes ``make()`` once
per (array object, key) and keeps it while that array object lives.

Why this is safe: the runtime hands kernels constants (initializers, Constant attributes) as
read-only arrays that live as long as the session, and everything else as fresh objects per run
(feeds are wrapped in a fresh read-only view each run; kernel results are new arrays). So an
array object that is seen again is the same constant, with the same contents. Writeable arrays
are never cached: their contents could change under the same object. An entry goes away with
its array (a weak reference's callback), so a recycled id() never finds a stale entry.
"""

from __future__ import annotations

import math
import operator
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from ..values import aligned_empty

_cache: dict[tuple[int, Hashable], tuple[weakref.ref, Any]] = {}


def derived(arr: np.ndarray, key: Hashable, make: Callable[[], Any]) -> Any:
    """``make()``, computed once per read-only array object ``arr`` and ``key``.

    ``key`` must name everything else ``make`` depends on (attributes, the zero point's value).
    """
    if type(arr) is not np.ndarray or arr.flags.writeable:  # (numpy scalars: no weakrefs)
        return make()
    k = (id(arr), key)
    hit = _cache.get(k)
    if hit is not None and hit[0]() is arr:
        return hit[1]
    value = make()
    # (the callback holds the dict's pop: at interpreter exit the module's globals are gone)
    _cache[k] = (weakref.ref(arr, lambda _ref, k=k, pop=_cache.pop: pop(k, None)), value)
    return value


def entries() -> tuple[int, int]:
    """(forms kept by ``derived``, attribute sets kept by ``from_attributes``): introspection."""
    return len(_cache), len(_memo)


def frozen(a: np.ndarray) -> np.ndarray:
    """a made read-only (in place) and returned: what is cached is shared between calls."""
    a.flags.writeable = False
    return a


def value_key(a: np.ndarray | None) -> Hashable:
    """A hashable stand-in for a small array's value (zero points, scales) in a cache key."""
    if a is None:
        return None
    a = np.asarray(a)
    return (a.dtype.str, a.shape, a.tobytes())


_local = threading.local()


def scratch(shape: tuple[int, ...], dtype) -> np.ndarray:
    """A work buffer of ``shape``, reused call after call (per thread, grown as needed).

    For a kernel's temporaries that never leave it (im2col columns): a fresh multi-MB array
    costs page faults on every call. The next scratch() call on the thread overwrites it.
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize  # (Python ints: np.prod's wrapper cost more)
    buf = getattr(_local, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        buf = _local.buf = aligned_empty((max(nbytes, 1 << 16),), np.uint8)
    return buf[:nbytes].view(dtype).reshape(shape)


_memo: OrderedDict[tuple[int, ...], tuple[tuple, Any]] = OrderedDict()
#: Models compiled from attributes kept at once (a session's tree ensembles, ...): the least
#: recently used go first, so closed sessions do not pin their attributes forever. Large enough
#: for one model of many small ensembles (skl2onnx writes an IsolationForest as one
#: TreeEnsembleRegressor per tree): with fewer entries than nodes every call recompiled.
MEMO_ENTRIES = 4096
_memo_lock = threading.Lock()


def from_attributes(attributes: tuple, make: Callable[[], Any]) -> Any:
    """``make()``, computed once per tuple of attribute objects (compared by identity).

    A plan hands a kernel the same attribute objects on every call, so a kernel that compiles
    its attributes into tables (a tree ensemble: thousands of nodes) does so once per node. The
    entry holds the objects themselves, so their ids cannot be reused while it exists.
    """
    key = tuple(map(id, attributes))  # (map: no generator frame per call of a hot kernel)
    with _memo_lock:  # sessions may run on several threads at once
        hit = _memo.get(key)
        if hit is not None and all(map(operator.is_, hit[0], attributes)):
            _memo.move_to_end(key)
            return hit[1]
    value = make()  # (outside the lock: two threads may both compile; either result is right)
    with _memo_lock:
        _memo[key] = (attributes, value)
        while len(_memo) > MEMO_ENTRIES:
            _memo.popitem(last=False)
    return value


def prepared(make: Callable[[dict], Callable]) -> Callable:
    """Decorator: the kernel's attributes compile into a function of its inputs (a tree
    ensemble's flat tables, an SVM's support vectors as one array).

    A plan binds such a node to ``make(attributes)`` (every keyword attribute, the kernel's
    defaults filled in; plan.PreparedCall), made at the node's first call and kept by its
    step, so a call pays no lookup of the compiled form (from_attributes' lock and key).
    Whoever calls the kernel itself (constant folding) gets the same results.
    """

    def mark(fn: Callable) -> Callable:
        fn.prepare = make
        return fn

    return mark
