"""numpy's floating-point error state, set cheaply: a run ignores every error (IEEE results,
inf and nan, are what the spec asks for), and kernels that may overflow ask for the same."""

from __future__ import annotations

import functools

import numpy as np


def _fp_errors_ignored():
    """numpy's context variable of floating-point error modes and its value with every error
    ignored, or None where numpy keeps them otherwise (numpy < 2)."""
    try:
        from numpy._core import _ufunc_config
    except ImportError:
        return None
    var = getattr(_ufunc_config, "_extobj_contextvar", None)
    if var is None:
        return None
    with np.errstate(all="ignore"):
        return var, var.get()


class _IgnoringFpErrors:
    """``np.errstate(all="ignore")`` for one run, as a set and reset of numpy's context
    variable: errstate builds its state anew on every entry, a cost each run of a tiny model
    paid. (The state keeps numpy's buffer size as at import: a speed setting, not a result's.)"""

    __slots__ = ("token",)

    def __enter__(self):
        self.token = _FP_VAR.set(_FP_IGNORE)

    def __exit__(self, *exc) -> None:
        _FP_VAR.reset(self.token)


def _entered_errstate():
    state = np.errstate(all="ignore")
    state.__enter__()
    return state


_FP = _fp_errors_ignored()
if _FP is not None:
    _FP_VAR, _FP_IGNORE = _FP
    ignoring_fp_errors = _IgnoringFpErrors
    #: ``token = ignore_fp_errors()`` ... ``restore_fp_errors(token)``: ignoring_fp_errors()
    #: without a context manager's object and method calls, for run()'s fast path (C calls
    #: alone: the context manager cost a one-row run as much as its run slot's bookkeeping)
    ignore_fp_errors = functools.partial(_FP_VAR.set, _FP_IGNORE)
    restore_fp_errors = _FP_VAR.reset
else:  # (a numpy whose errstate is not a context variable)

    def ignoring_fp_errors():
        return np.errstate(all="ignore")

    ignore_fp_errors = _entered_errstate

    def restore_fp_errors(state) -> None:
        state.__exit__(None, None, None)
