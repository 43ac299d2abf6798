"""One registry of kernels, keyed by (domain, op type), each with the opset version it starts at.

A kernel is a plain function that reads like the operator's spec:

    @op("Softmax", since=13)
    def softmax(x, *, axis=-1): ...

- positional parameters are the node's inputs in order (``None`` for an omitted optional input);
  a ``*args`` parameter takes variadic inputs;
- keyword-only parameters are the attributes, with the spec's defaults;
- a first parameter named ``ctx`` receives the :class:`KernelContext` (subgraphs, output count).

A kernel returns one value, or a tuple with one entry per output (extra trailing entries are
dropped when the node declares fewer outputs).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

DOMAIN_ALIASES = {"ai.onnx": ""}
#: onyx's own domain: ops the graph optimizer emits as model-local functions (runtimes without
#: onyx's kernel run their bodies; onyx runs its kernel, see plan.py).
ONYX_DOMAIN = "ai.onyx"


@dataclass(frozen=True)
class Kernel:
    domain: str
    op_type: str
    since: int
    fn: Callable
    takes_ctx: bool
    n_positional: int  # named positional inputs (excluding ctx)
    variadic: bool
    attributes: frozenset[str]
    attr_defaults: dict = field(default_factory=dict, compare=False, hash=False)
    accepts_any_attr: bool = False


_KERNELS: dict[tuple[str, str], list[Kernel]] = {}


def _describe(fn: Callable, domain: str, op_type: str, since: int) -> Kernel:
    params = list(inspect.signature(fn).parameters.values())
    takes_ctx = bool(params) and params[0].name == "ctx"
    if takes_ctx:
        params = params[1:]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in params)
    kw = [p for p in params if p.kind == p.KEYWORD_ONLY]
    return Kernel(
        domain=domain,
        op_type=op_type,
        since=since,
        fn=fn,
        takes_ctx=takes_ctx,
        n_positional=len(positional),
        variadic=variadic,
        attributes=frozenset(p.name for p in kw),
        attr_defaults={p.name: p.default for p in kw if p.default is not p.empty},
        accepts_any_attr=any(p.kind == p.VAR_KEYWORD for p in params),
    )


def op(op_type: str, since: int = 1, domain: str = "") -> Callable:
    """Register the decorated function as the kernel of ``op_type`` from opset ``since`` on."""
    domain = DOMAIN_ALIASES.get(domain, domain)

    def register(fn: Callable) -> Callable:
        kernel = _describe(fn, domain, op_type, since)
        versions = _KERNELS.setdefault((domain, op_type), [])
        if any(k.since == since for k in versions):
            raise RuntimeError(f"kernel {domain or 'ai.onnx'}::{op_type} v{since} registered twice")
        versions.append(kernel)
        versions.sort(key=lambda k: k.since)
        return fn

    return register


def lookup(op_type: str, domain: str = "", version: int | None = None) -> Kernel | None:
    """The kernel for ``op_type`` at opset ``version`` (newest when None), or None if there is none."""
    _load_all()
    domain = DOMAIN_ALIASES.get(domain, domain)
    versions = _KERNELS.get((domain, op_type))
    if not versions:
        return None
    if version is None:
        return versions[-1]
    chosen = None
    for k in versions:
        if k.since <= version:
            chosen = k
    return chosen


def registered() -> dict[tuple[str, str], list[Kernel]]:
    _load_all()
    return dict(_KERNELS)


_loaded = False


def _load_all() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        from . import kernels  # noqa: F401  (importing registers every kernel)
