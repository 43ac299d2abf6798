"""registry reads a plain kernel function's parameters off its code object (inspect.signature,
once for each kernel a session binds, was a part of a process's first creation): the same as
its signature's, for every kernel and for wrapped ones (which take inspect's path)."""

# ruff: noqa: SLF001  (white-box: the registry's private reader against inspect's)

from __future__ import annotations

import functools
import inspect

from onyx.runtime import kernels, registry


def _kernel_like(a, b=2, /, c=3, *args, d, e=5, **kw):
    return a


def _ctx_first(ctx, x, *, axis=1):
    return x


def test_a_kernels_parameters_read_off_its_code_are_its_signatures():
    kernels.load_all()
    fns = [k.fn for versions in registry._KERNELS.values() for k in versions]
    wrapped = functools.wraps(_ctx_first)(lambda *a, **k: _ctx_first(*a, **k))
    for fn in [*fns, _kernel_like, _ctx_first, wrapped, functools.partial(_ctx_first, None)]:
        want = [
            (p.name, registry._KINDS[p.kind], p.default)
            for p in inspect.signature(fn).parameters.values()
        ]
        assert registry._parameters(fn) == want, fn
    k = registry._describe(_ctx_first, "", "X", 1)
    assert k.takes_ctx and k.n_positional == 1 and k.attr_defaults == {"axis": 1}
