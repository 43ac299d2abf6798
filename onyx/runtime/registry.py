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

Facts about the op that other modules act on are declared with the kernel, as optional
keywords (:class:`OpTraits`); any registration of the op may declare them:

    @op("Relu", since=14, elementwise=True)
    @op("RandomNormal", since=1, deterministic=False)
    @op("Conv", since=11, threads="pool")
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import field
from typing import Any

from ..ir.frozen import FrozenValue, lazy_fields

DOMAIN_ALIASES = {"ai.onnx": ""}
#: onyx's own domain: ops the graph optimizer emits as model-local functions (runtimes without
#: onyx's kernel run their bodies; onyx runs its kernel, see plan.py).
ONYX_DOMAIN = "ai.onyx"


_EMPTY: dict = {}  # (a default that is copied, never used)


# (FrozenValue: what frozen=True gives, without compiling methods at import; lazy_fields: the
# dataclass made when its fields are first asked for, which a session's creation never does)
@lazy_fields
class Kernel(FrozenValue):
    """A registered kernel and what its signature says (inputs, attributes, ctx)."""

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

    def __init__(
        self,
        domain: str,
        op_type: str,
        since: int,
        fn: Callable,
        takes_ctx: bool,
        n_positional: int,
        variadic: bool,
        attributes: frozenset[str],
        attr_defaults: dict = _EMPTY,
        accepts_any_attr: bool = False,
    ):
        self._set(
            domain=domain,
            op_type=op_type,
            since=since,
            fn=fn,
            takes_ctx=takes_ctx,
            n_positional=n_positional,
            variadic=variadic,
            attributes=attributes,
            attr_defaults={} if attr_defaults is _EMPTY else attr_defaults,
            accepts_any_attr=accepts_any_attr,
        )


@lazy_fields
class OpTraits(FrozenValue):
    """What the optimizer and the session need to know about an op, besides its kernel."""

    #: Every output element is a function of the same (broadcast) element of the inputs, so
    #: the op may join a lookup table (optimizer/lookup.py).
    elementwise: bool = False
    #: The result is a function of the inputs (random ops are not: never constant-folded).
    deterministic: bool = True
    #: Where the op's heavy work runs: "pool" (the native library's threads), "blas" (numpy's
    #: BLAS threads), None (neither), or a function of the node giving one of those. The
    #: session gives BLAS one thread when pool ops outnumber BLAS ops (session._pool_heavy).
    threads: str | Callable[[Any], str | None] | None = None

    def __init__(
        self,
        elementwise: bool = False,
        deterministic: bool = True,
        threads: str | Callable[[Any], str | None] | None = None,
    ):
        self._set(elementwise=elementwise, deterministic=deterministic, threads=threads)


_KERNELS: dict[tuple[str, str], list[Kernel]] = {}
_TRAITS: dict[tuple[str, str], OpTraits] = {}
#: (domain, op) -> the modules that registered its kernels and traits (kernels/_index.py is
#: made from it)
_SOURCES: dict[tuple[str, str], set[str]] = {}
#: OpTraits' fields (its __init__'s parameters: asking the class would make its dataclass)
_TRAIT_NAMES = frozenset(
    OpTraits.__init__.__code__.co_varnames[1 : OpTraits.__init__.__code__.co_argcount]
)


_POSITIONAL, _VARIADIC, _KEYWORD, _ANY_KEYWORD = "positional", "variadic", "keyword", "any"
_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: _POSITIONAL,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: _POSITIONAL,
    inspect.Parameter.VAR_POSITIONAL: _VARIADIC,
    inspect.Parameter.KEYWORD_ONLY: _KEYWORD,
    inspect.Parameter.VAR_KEYWORD: _ANY_KEYWORD,
}
_CO_VARARGS, _CO_VARKEYWORDS = inspect.CO_VARARGS, inspect.CO_VARKEYWORDS


def _parameters(fn: Callable) -> list[tuple[str, str, Any]]:
    """fn's parameters as (name, kind, default or inspect.Parameter.empty), in signature
    order. A plain function's are read off its code object: inspect.signature took several
    times as long, once for each kernel a session's first creation binds."""
    if (
        fn.__class__ is not _FUNCTION
        or "__wrapped__" in fn.__dict__
        or "__signature__" in fn.__dict__
    ):
        return [
            (p.name, _KINDS[p.kind], p.default) for p in inspect.signature(fn).parameters.values()
        ]
    code, empty = fn.__code__, inspect.Parameter.empty
    names, n_pos, n_kw = code.co_varnames, code.co_argcount, code.co_kwonlyargcount
    defaults, kw_defaults = fn.__defaults__ or (), fn.__kwdefaults__ or {}
    first_default = n_pos - len(defaults)
    params = [
        (names[i], _POSITIONAL, defaults[i - first_default] if i >= first_default else empty)
        for i in range(n_pos)
    ]
    at = n_pos + n_kw
    if code.co_flags & _CO_VARARGS:
        params.append((names[at], _VARIADIC, empty))
        at += 1
    params += [
        (name, _KEYWORD, kw_defaults.get(name, empty)) for name in names[n_pos : n_pos + n_kw]
    ]
    if code.co_flags & _CO_VARKEYWORDS:
        params.append((names[at], _ANY_KEYWORD, empty))
    return params


_FUNCTION = type(_parameters)


def _describe(fn: Callable, domain: str, op_type: str, since: int) -> Kernel:
    params = _parameters(fn)
    takes_ctx = bool(params) and params[0][0] == "ctx"
    if takes_ctx:
        params = params[1:]
    kw = [(name, default) for name, kind, default in params if kind == _KEYWORD]
    return Kernel(
        domain=domain,
        op_type=op_type,
        since=since,
        fn=fn,
        takes_ctx=takes_ctx,
        n_positional=sum(kind == _POSITIONAL for _, kind, _ in params),
        variadic=any(kind == _VARIADIC for _, kind, _ in params),
        attributes=frozenset(name for name, _ in kw),
        attr_defaults={name: d for name, d in kw if d is not inspect.Parameter.empty},
        accepts_any_attr=any(kind == _ANY_KEYWORD for _, kind, _ in params),
    )


def binds(
    make: Callable[[tuple, dict, tuple], Callable | None], constants: tuple[int, ...] = ()
) -> Callable:
    """Decorator: the kernel sets up a call once per input signature (a bound step).

    A plan runs such a node through ``plan.BoundCall``: at the first call with a new signature
    (each non-constant input's shape and dtype, every input an ndarray or an omitted None) it
    calls ``make(inputs, attributes, constant)``: the call's inputs, every keyword attribute
    (the kernel's defaults filled in) and, per input, whether it is a constant (the same
    object at every call: an initializer, or an omitted input). ``make`` returns ``call(*inputs)``,
    kept for the signature, or None (the kernel runs as written for it). ``call`` must return
    exactly what the kernel returns for any inputs of that signature, which may differ from
    the first in anything else: contiguity, alignment, writeability, values; it holds nothing
    of one call for the next (runs on several threads share it) and returns fresh arrays,
    never a buffer it keeps. What it saves is the kernel's look-ups and checks, its choice of
    path, the native call's task and work split: done once in ``make``.
    Whoever calls the kernel itself (constant folding) gets the same results.
    ``constants``: the inputs ``make`` needs constant (it declines otherwise): a node where
    one is not never calls ``make``, and its runs skip the signature's look-up.
    A kernel that takes a context (and runs no subgraph) binds too: its ``make`` then takes
    the step's context first, ``make(ctx, inputs, attributes, constant)`` (MaxPool: whether
    its Indices are wanted).
    """

    def mark(fn: Callable) -> Callable:
        fn.bind, fn.bind_constants = make, tuple(constants)
        return fn

    return mark


def array_attributes(**dtypes: Any) -> Callable:
    """Decorator: the kernel takes these attributes (name=dtype) as read-only numpy arrays of
    that dtype where the model holds them as arrays (``ir.Attr.array``: a long FLOATS
    attribute read from a file), and as lists otherwise.

    Why: such an attribute's list costs its creation a conversion of every element, and the
    kernel's first call another one back to an array (an SVM's 17k support vector floats).
    ``dtype`` must be what the kernel makes of the list (``np.asarray(list)`` is float64), so
    that it computes the same bits either way.
    """

    def mark(fn: Callable) -> Callable:
        fn.array_attributes = dtypes
        return fn

    return mark


def op(op_type: str, since: int = 1, domain: str = "", **traits: Any) -> Callable:
    """Register the decorated function as the kernel of ``op_type`` from opset ``since`` on.
    ``traits``: :class:`OpTraits` fields declared for the op (all its versions)."""
    domain = DOMAIN_ALIASES.get(domain, domain)
    key = (domain, op_type)
    # the module that declares it (fn's own may be numpy's: `op("And")(np.logical_and)`)
    module = inspect.currentframe().f_back.f_globals.get("__name__", "")
    if traits:
        if not _TRAIT_NAMES.issuperset(traits):
            unknown = sorted(set(traits) - _TRAIT_NAMES)
            raise TypeError(f"@op({op_type!r}): unknown trait(s) {unknown}")
        declared = _TRAITS.get(key)
        _TRAITS[key] = OpTraits(**traits) if declared is None else _replaced(declared, traits)

    # (kept cheap: a model's kernel modules register ~150 kernels in its first creation)
    def register(fn: Callable) -> Callable:
        # described at its first lookup: reading 350 signatures was half of importing them
        kernel = _Pending(domain, op_type, since, fn)
        sources = _SOURCES.get(key)
        if sources is None:
            _SOURCES[key] = {module}
        else:
            sources.add(module)
        versions = _KERNELS.get(key)
        if versions is None:
            _KERNELS[key] = [kernel]
            return fn
        for k in versions:
            if k.since == since:
                raise RuntimeError(
                    f"kernel {domain or 'ai.onnx'}::{op_type} v{since} registered twice"
                )
        versions.append(kernel)
        if versions[-2].since > since:
            versions.sort(key=_since)
        return fn

    return register


def _replaced(declared: OpTraits, traits: dict) -> OpTraits:
    """dataclasses.replace(declared, **traits), without making OpTraits' dataclass."""
    return OpTraits(**{**declared.__dict__, **traits})


def lookup(op_type: str, domain: str = "", version: int | None = None) -> Kernel | None:
    """The kernel for ``op_type`` at opset ``version`` (newest when None), or None if there is none."""
    domain = DOMAIN_ALIASES.get(domain, domain)
    _load_op(domain, op_type)
    versions = _KERNELS.get((domain, op_type))
    if not versions:
        return None
    if version is None:
        return _described(versions, len(versions) - 1)
    chosen = None
    for i, k in enumerate(versions):
        if k.since <= version:
            chosen = i
    return None if chosen is None else _described(versions, chosen)


class _Pending:
    """A registered kernel not described yet (see ``_described``)."""

    __slots__ = ("domain", "fn", "op_type", "since")

    def __init__(self, domain: str, op_type: str, since: int, fn: Callable):
        self.domain, self.op_type, self.since, self.fn = domain, op_type, since, fn


def _described(versions: list, i: int) -> Kernel:
    k = versions[i]
    if type(k) is _Pending:
        k = versions[i] = _describe(k.fn, k.domain, k.op_type, k.since)
    return k


def _describe_all() -> None:
    for versions in _KERNELS.values():
        for i in range(len(versions)):
            _described(versions, i)


def traits(op_type: str, domain: str = "") -> OpTraits:
    """The traits declared for ``op_type`` (the defaults when none were)."""
    domain = DOMAIN_ALIASES.get(domain, domain)
    _load_op(domain, op_type)
    return _TRAITS.get((domain, op_type), _NO_TRAITS)


_NO_TRAITS = OpTraits()


def _since(kernel) -> int:
    return kernel.since


def kernel_table() -> dict[tuple[str, str], list[Kernel]]:
    """The live table (domain, op) -> kernels by since, every kernel loaded: for code that
    installs and removes kernels at run time (custom_ops.py)."""
    _load_all()
    _describe_all()
    return _KERNELS


def describe_kernel(fn: Callable, domain: str, op_type: str, since: int) -> Kernel:
    """What the registry records for ``fn`` as the kernel of ``op_type`` from ``since`` on."""
    return _describe(fn, domain, op_type, since)


def registered() -> dict[tuple[str, str], list[Kernel]]:
    _load_all()
    _describe_all()
    return dict(_KERNELS)


_loaded = False
#: (domain, op) whose kernel modules are imported
_loaded_ops: set[tuple[str, str]] = set()


def _load_op(domain: str, op_type: str) -> None:
    """Import the kernel modules that register ``op_type`` (kernels/_index.py): a session
    imports the families its model uses, not all thirty, at its cold start. An op the index
    does not know loads every module (a kernel added since)."""
    key = (domain, op_type)
    if _loaded or key in _loaded_ops:
        return
    from .kernels import _index, load

    modules = _index.MODULES.get(key)
    if modules is None:
        _load_all()
        return
    for name in modules:
        load(name)
    _loaded_ops.add(key)


def _load_all() -> None:
    global _loaded
    if not _loaded:
        from .kernels import load_all

        load_all()
        _loaded = True


def kernel_index() -> dict[tuple[str, str], tuple[str, ...]]:
    """(domain, op) -> the kernel modules (relative to onyx.runtime.kernels) that register it,
    every kernel loaded: what kernels/_index.py must say (scripts/gen_kernel_index.py)."""
    _load_all()
    prefix = __name__.rpartition(".")[0] + ".kernels."
    return {
        key: tuple(sorted(m.removeprefix(prefix) for m in modules))
        for key, modules in sorted(_SOURCES.items())
    }
