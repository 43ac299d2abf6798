"""Custom operators: Python kernels registered globally or for one session, and a kernel
override for tests (plant a wrong kernel, check that `onyx compare` finds it).

A custom kernel follows the kernel contract of registry.py: inputs positional, attributes
keyword-only with their defaults, an optional first parameter ``ctx``::

    @onyx.register_op("Clip01", domain="com.example")
    def clip01(x, *, low=0.0):
        return np.clip(x, low, 1.0)

    # per session: only this session sees it
    opts = onyx.SessionOptions()
    opts.register_custom_op("Clip01", clip01, domain="com.example")

A shape rule (optional) helps shape inference and the optimizer; it gets inference's node
context: ``ctx.dtype(i)``, ``ctx.shape(i)``, ``ctx.attr(name)``, and sets outputs with
``ctx.set(i, elem_type, shape)`` (``ctx.same(0, 0)``: output 0 typed as input 0).

The model must import the op's domain (``opset_import``), as onnxruntime requires too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from . import registry

_lock = threading.RLock()
#: What the model cache asks (model_cache.py: a custom kernel may change what the optimizer
#: makes): (domain, op_type, whether it replaced a built-in kernel) of kernels register_op
#: installed and unregister_op has not removed (a built-in op's stays: unregistering leaves
#: the table changed), and how many session_kernels blocks are open.
_registered: set[tuple[str, str, bool]] = set()
_open_blocks = 0


def in_use() -> bool:
    """Whether a custom kernel may be in the registry now."""
    return bool(_registered) or _open_blocks > 0


@dataclass(frozen=True)
class CustomOp:
    op_type: str
    fn: Callable
    domain: str = ""
    since: int = 1
    shape: Callable | None = None


def register_op(
    op_type: str,
    fn: Callable | None = None,
    *,
    domain: str = "",
    since: int = 1,
    shape: Callable | None = None,
):
    """Register ``fn`` as the kernel of ``domain::op_type`` for every session (from opset
    ``since`` on), replacing one registered before at the same version. Used bare
    (``register_op("Op", fn)``) or as a decorator (``@register_op("Op")``)."""

    def add(f: Callable) -> Callable:
        canonical = registry.DOMAIN_ALIASES.get(domain, domain)
        with _lock:
            built_in = (canonical, op_type) in registry.kernel_table()
            _install(CustomOp(op_type, f, canonical, since, shape))
            _registered.add((canonical, op_type, built_in))
        return f

    return add(fn) if fn is not None else add


def unregister_op(op_type: str, *, domain: str = "", since: int | None = None) -> None:
    """Remove a kernel registered with :func:`register_op` (every version when ``since`` is None)."""
    domain = registry.DOMAIN_ALIASES.get(domain, domain)
    with _lock:
        versions = registry.kernel_table().get((domain, op_type), [])
        kept = [k for k in versions if since is not None and k.since != since]
        if kept:
            registry.kernel_table()[(domain, op_type)] = kept
        else:
            registry.kernel_table().pop((domain, op_type), None)
            _registered.discard((domain, op_type, False))  # (an op of its own: gone whole)


def _install(op: CustomOp, replace_all: bool = False) -> None:
    registry.kernel_table()  # (every kernel loaded first)
    kernel = registry.describe_kernel(op.fn, op.domain, op.op_type, op.since)
    versions = registry.kernel_table().get((op.domain, op.op_type), [])
    versions = [] if replace_all else [k for k in versions if k.since != op.since]
    registry.kernel_table()[(op.domain, op.op_type)] = sorted(
        [*versions, kernel], key=lambda k: k.since
    )
    if op.shape is not None:
        from ..inference import RULES

        RULES[(op.domain, op.op_type)] = op.shape


@contextmanager
def session_kernels(ops: list[CustomOp], replace_all: bool = False) -> Iterator[None]:
    """Make ``ops`` visible while one session is created (its plan binds kernels then), and
    restore the registry after: the ops stay that session's own."""
    if not ops:
        yield
        return
    from ..inference import RULES

    global _open_blocks
    with _lock:
        registry.kernel_table()  # (every kernel loaded first)
        saved = {
            (o.domain, o.op_type): registry.kernel_table().get((o.domain, o.op_type)) for o in ops
        }
        rules = {(o.domain, o.op_type): RULES.get((o.domain, o.op_type)) for o in ops}
        _open_blocks += 1
        try:
            for o in ops:
                _install(o, replace_all)
            yield
        finally:
            _restore(registry.kernel_table(), saved)
            _restore(RULES, rules)
            _open_blocks -= 1


def _restore(table: dict, saved: dict) -> None:
    for key, value in saved.items():
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value


@contextmanager
def override_kernel(
    op_type: str, fn: Callable, *, domain: str = "", node: str | None = None
) -> Iterator[None]:
    """Test-only: sessions created inside run ``fn`` for ``op_type`` (every opset). With
    ``node``, only the node of that name runs ``fn``; the others keep their kernel. ``fn``
    follows the kernel contract (inputs positional, attributes as keywords).

        with override_kernel("Relu", lambda x: np.maximum(x, 0) + 1, node="relu_3"):
            report = onyx.compare(model, "onnxruntime")   # finds relu_3
    """
    domain = registry.DOMAIN_ALIASES.get(domain, domain)
    registry.kernel_table()  # (every kernel loaded first)
    with _lock:
        original = list(registry.kernel_table().get((domain, op_type), []))

    def planted(ctx, *args, **attrs):
        if node is None or ctx.node_name == node:
            return fn(*args, **attrs)
        kernel = _version_of(original, ctx.opset)
        return kernel.fn(ctx, *args, **attrs) if kernel.takes_ctx else kernel.fn(*args, **attrs)

    with session_kernels([CustomOp(op_type, planted, domain, 1)], replace_all=True):
        yield


def _version_of(versions: list, opset: int):
    chosen = versions[0]
    for k in versions:
        if k.since <= opset:
            chosen = k
    return chosen
