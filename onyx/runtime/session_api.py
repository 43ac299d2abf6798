"""The parts of onnxruntime's InferenceSession API beyond ``run``: IOBinding, OrtValues,
``run_async``, providers, pickling, RunOptions.terminate, logging, and the session options
applied to the model at creation (initializer overrides, free dimension overrides).

InferenceSession (session.py) inherits these; they use its ``_model``, ``_plan``,
``_options`` and ``run``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import ir
from ..errors import InvalidArgument, RuntimeFailure
from .options import DEBUG, SessionLog, SessionOptions, warn_ignored

CPU = "CPUExecutionProvider"


class UnknownProvider(InvalidArgument, RuntimeError):
    """A provider name onnxruntime does not know either (a RuntimeError there)."""


#: onnxruntime's provider names (get_all_providers); any other name is an error, as there.
ALL_PROVIDERS = [
    "TensorrtExecutionProvider", "CUDAExecutionProvider", "MIGraphXExecutionProvider",
    "ROCMExecutionProvider", "OpenVINOExecutionProvider", "DnnlExecutionProvider",
    "VitisAIExecutionProvider", "QNNExecutionProvider", "NnapiExecutionProvider",
    "VSINPUExecutionProvider", "JsExecutionProvider", "CoreMLExecutionProvider",
    "ArmNNExecutionProvider", "ACLExecutionProvider", "DmlExecutionProvider",
    "RknpuExecutionProvider", "WebNNExecutionProvider", "WebGpuExecutionProvider",
    "XnnpackExecutionProvider", "CANNExecutionProvider", "AzureExecutionProvider", CPU,
]  # fmt: skip

#: onnxruntime's InferenceSession keywords (besides sess_options, providers, provider_options):
#: None where onyx acts on it, else why a true value is ignored. enable_fallback: onnxruntime
#: falls back to the CPU provider when another fails; onyx is on the CPU already.
_KEYWORDS = {
    "disabled_optimizers": None,
    "enable_fallback": None,
    "read_config_from_model": "onyx does not read onnxruntime's config from model metadata",
}

if TYPE_CHECKING:
    import concurrent.futures

    from .iobinding import IOBinding
    from .ortvalue import OrtValue

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_checked_lock = threading.Lock()


def _async_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            import concurrent.futures  # (only run_async uses it: not at every import)

            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="onyx-run-async"
            )
        return _pool


def provider_names(providers: Any) -> list[str]:
    """The names in a providers list (names or (name, options) pairs), checked."""
    names = []
    for p in providers or []:
        name = p[0] if isinstance(p, tuple | list) else p
        if name not in ALL_PROVIDERS:
            raise UnknownProvider(f"Unknown Provider Type: {name}")
        names.append(name)
    return names


class _TerminateWatch:
    """Stands in for the profiler in the plan's step loop: after each node it checks
    RunOptions.terminate (and forwards to the real profiler, if any)."""

    __slots__ = ("run_options", "profiler")

    def __init__(self, run_options: Any, profiler: Any):
        self.run_options, self.profiler = run_options, profiler

    def node(self, step, start, end, inputs, outputs) -> None:
        if self.profiler is not None:
            self.profiler.node(step, start, end, inputs, outputs)
        if self.run_options.terminate:
            raise _terminated()


def _terminated() -> RuntimeFailure:
    return RuntimeFailure("Exiting due to terminate flag being set to true.")


def checked_plan(plan: Any, current: threading.local) -> Any:
    """A copy of ``plan`` whose every top-level step first checks the RunOptions of the
    calling thread's run (``current.run_options``) for ``terminate``. It runs as generated
    code like the plan itself: one check per node, no step loop."""
    from .plan import Step

    def guarded(step: Step) -> Step:
        fn = step.fn

        def check_then_run(*args, **kwargs):
            if current.run_options.terminate:
                raise _terminated()
            return fn(*args, **kwargs)

        clone = Step(**{k: getattr(step, k) for k in step.__dataclass_fields__})
        clone.fn = check_then_run
        return clone

    return plan.with_steps([guarded(s) for s in plan.steps])


class SessionAPI:
    """Mixed into InferenceSession."""

    # -- creation hooks (called by InferenceSession) --------------------------------------------
    def _session_arguments(self, options, providers, provider_options, kwargs):
        """The options this session runs with: onnxruntime's keywords applied to a copy."""
        options = options if options is not None else SessionOptions()
        if providers is not None:
            for name in provider_names(providers):
                if name != CPU:
                    warn_ignored(f"provider {name}", "onyx runs on the CPU only")
        if provider_options:
            warn_ignored("provider_options", "the CPU provider of onyx takes no options")
        for key, value in kwargs.items():
            if key not in _KEYWORDS:
                warn_ignored(f"InferenceSession keyword {key!r}", "onnxruntime has no such keyword")
            elif _KEYWORDS[key] and value:
                warn_ignored(f"InferenceSession keyword {key!r}", _KEYWORDS[key])
        if kwargs.get("disabled_optimizers"):
            disabled = [*options.disabled_optimizers, *kwargs["disabled_optimizers"]]
            options = dataclasses.replace(options, disabled_optimizers=disabled)
        self._log = SessionLog(
            options.log_severity_level, options.logid, options.log_verbosity_level
        )
        self._log_runs = self._log.enabled(DEBUG) and self._log.verbosity > 0
        return options

    def _apply_options(self, model: ir.Model, owned: bool) -> ir.Model:
        """Session options that change the loaded model: initializers and free dims given by
        the caller (on a copy of a model the caller holds). Also notes the op counts, to log
        what the optimizer did."""
        opts = self._options
        initializers = getattr(opts, "_initializers", {})
        dims = getattr(opts, "_free_dims", {})
        denotations = getattr(opts, "_free_denotations", {})
        if not owned and (initializers or dims or denotations):
            from ..optimizer.core import clone_model

            model = clone_model(model)
        if initializers:  # (OrtValues' module: imported where a session meets one)
            from .ortvalue import unwrap
        for name, value in initializers.items():
            _override_initializer(model.graph, name, unwrap(value))
        if dims or denotations:
            _fix_free_dims(model.graph, dims, denotations)
        if self._log.enabled(DEBUG):
            self._ops_before = Counter(n.op_type for n in model.graph)
        self._log.info(
            "loaded model: %d nodes, opsets %s", len(model.graph), dict(model.opset_imports)
        )
        return model

    def _on_created(self) -> None:
        self._profiling_start_ns = time.time_ns() if self._profiler is not None else 0
        log = self._log
        log.info("session created in %.1f ms", self.session_creation_seconds * 1e3)
        if log.enabled(DEBUG):
            after = Counter(s.node.op_type for s in self._plan.steps)
            before = getattr(self, "_ops_before", Counter())
            log.debug(
                "optimizations applied: %d -> %d nodes; ops added %s, removed %s",
                sum(before.values()),
                sum(after.values()),
                dict(after - before),
                dict(before - after),
            )
            for step in self._plan.steps:
                if getattr(step.fn, "__name__", "") == "call_function":
                    log.debug("fallback: %s runs as its function body (no kernel)", step.label())

    # -- running --------------------------------------------------------------------------------
    def _run_with_options(self, inputs: list, wanted, run_options) -> list:
        """A run that honours RunOptions: terminate (checked before and between nodes), its
        log severity and logid."""
        if run_options.terminate:
            raise _terminated()
        log = self._log
        if getattr(run_options, "log_severity_level", -1) >= 0 or run_options.logid:
            log = SessionLog(
                run_options.log_severity_level,
                run_options.logid or log.logid,
                run_options.log_verbosity_level,
            )
        start = time.perf_counter()
        with np.errstate(all="ignore"):
            if self._profiler is not None:
                watch = _TerminateWatch(run_options, self._profiler)
                results = self._plan.run(inputs, None, wanted, profiler=watch)
            else:
                results = self._checked(run_options).run(inputs, None, wanted)
        log.debug("run took %.3f ms", (time.perf_counter() - start) * 1e3)
        return results

    def _checked(self, run_options: Any) -> Any:
        """The plan copy that checks terminate, made on first use (once, under a lock: two
        threads must not each make one), with this thread's RunOptions set for its checks."""
        checked = self.__dict__.get("_checked_plan")
        if checked is None:
            with _checked_lock:
                checked = self.__dict__.get("_checked_plan")
                if checked is None:
                    self._current_run = threading.local()
                    checked = self._checked_plan = checked_plan(self._plan, self._current_run)
        self._current_run.run_options = run_options
        return checked

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        """run() taking and returning OrtValues."""
        from .ortvalue import OrtValue, unwrap

        feed = {k: unwrap(v) for k, v in input_dict_ort_values.items()}
        return [OrtValue(v) for v in self.run(output_names, feed, run_options)]

    def create_ortvalue_from_shape_and_type(
        self, shape, element_type, device_type: str = "cpu", device_id: int = 0, vendor_id: int = -1
    ) -> OrtValue:
        """An OrtValue of ``shape`` and ``element_type`` on the CPU."""
        from .ortvalue import OrtValue

        return OrtValue.ortvalue_from_shape_and_type(shape, element_type, device_type)

    def io_binding(self) -> IOBinding:
        from .iobinding import IOBinding

        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options=None) -> None:
        iobinding.run_bound(run_options)

    def run_async(self, output_names, input_feed, callback, user_data, run_options=None) -> None:
        """Run on a thread of onyx's pool; then ``callback(results, user_data, err)``, with
        ``err`` "" on success (results: the outputs) or the error's message (results None)."""
        if not callable(callback):
            raise InvalidArgument("run_async: callback must be callable")
        feed = dict(input_feed)

        def work() -> None:
            try:
                results = self.run(output_names, feed, run_options)
            except Exception as e:  # noqa: BLE001  (reported to the callback, as onnxruntime does)
                callback(None, user_data, f"{type(e).__name__}: {e}")
                return
            callback(results, user_data, "")

        _async_pool().submit(work)

    # -- providers and metadata -----------------------------------------------------------------
    def set_providers(self, providers=None, provider_options=None) -> None:
        for name in provider_names(providers):
            if name != CPU:
                warn_ignored(f"provider {name}", "onyx runs on the CPU only")
        if provider_options:
            warn_ignored("provider_options", "the CPU provider of onyx takes no options")

    def disable_fallback(self) -> None:
        """Nothing to disable: onyx has the CPU provider only."""

    def enable_fallback(self) -> None:
        """Nothing to enable: onyx has the CPU provider only."""

    def get_profiling_start_time_ns(self) -> int:
        return self._profiling_start_ns

    def get_tuning_results(self) -> list:
        return []  # onyx's kernels have no tuned variants

    def set_tuning_results(self, results, error_on_invalid: bool = False) -> None:
        if results:
            warn_ignored("set_tuning_results()", "onyx's kernels have no tuned variants")

    def release_captured_graph(self, *args: Any) -> None:
        """onyx captures no graphs."""

    def set_ep_dynamic_options(self, keys, values) -> None:
        warn_ignored("set_ep_dynamic_options()", "onyx has only the CPU provider")

    def run_with_ortvaluevector(
        self, run_options, feed_names, feeds, fetch_names, fetches, fetch_devices=None
    ) -> None:
        """onnxruntime's low-level variant: ``fetches`` (a list) receives the OrtValues."""
        from .ortvalue import unwrap

        feed = {name: unwrap(v) for name, v in zip(feed_names, feeds)}
        fetches[:] = self.run_with_ort_values(list(fetch_names), feed, run_options)

    # -- pickling -------------------------------------------------------------------------------
    def __getstate__(self) -> dict:
        from .. import serde

        source = self._source_ref
        data = bytes(source) if isinstance(source, bytes | bytearray) else None
        if data is None:
            model = source if isinstance(source, ir.Model) else serde.load(source)
            data = serde.dumps(model)
        return {"model": data, "options": self._options, "providers": self.get_providers()}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["model"], state["options"], providers=state["providers"])


def _override_initializer(graph: ir.Graph, name: str, value: Any) -> None:
    v = graph.initializers.get(name)
    if v is None:
        raise InvalidArgument(f"add_initializer: the model has no initializer {name!r}")
    arr = np.asarray(value)
    v.const_value = ir.Tensor(arr, name=name)


def _fix_free_dims(graph: ir.Graph, by_name: dict, by_denotation: dict) -> None:
    for v in graph.inputs:
        t = v.type
        if not isinstance(t, ir.TensorType) or t.shape is None:
            continue
        notes = t.shape.denotations or (None,) * len(t.shape.dims)
        dims = []
        for d, note in zip(t.shape.dims, notes):
            if not isinstance(d, int) and note in by_denotation:
                d = by_denotation[note]
            elif isinstance(d, str) and d in by_name:
                d = by_name[d]
            dims.append(d)
        v.type = ir.TensorType(
            t.elem_type, ir.Shape(tuple(dims), t.shape.denotations), t.denotation
        )


# -- module-level functions of onnxruntime's API ----------------------------------------------


def get_device() -> str:
    return "CPU"


def get_all_providers() -> list[str]:
    return list(ALL_PROVIDERS)


def get_version_string() -> str:
    from .. import __version__

    return __version__


def get_build_info() -> str:
    from . import native

    return f"onyx Build Info: version={get_version_string()}, native kernels={native.available()}"


def disable_telemetry_events() -> None:
    """onyx sends no telemetry."""


def enable_telemetry_events() -> None:
    """onyx sends no telemetry."""
