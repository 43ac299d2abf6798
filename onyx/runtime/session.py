"""InferenceSession: onnxruntime's Python API, on onyx's plan and kernels."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

import numpy as np

from .. import ir
from ..errors import InvalidArgument, RuntimeFailure
from ..ir.dtypes import DataType, to_numpy, type_name
from ..ir.frozen import FrozenValue, lazy_fields
from ..serde import as_model
from ..utils import gc_paused, import_settled, settle_long_lived
from . import concurrency, memory, native
from .fpstate import ignore_fp_errors, restore_fp_errors
from .lenient import accept_lenient
from .options import (  # noqa: F401  (onnxruntime's names, importable from here as before)
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    RunOptions,
    SessionOptions,
)
from .plan import Compiler, OutputCheck, Plan, as_array_result, ignoring_fp_errors
from .registry import ONYX_DOMAIN, lookup, traits
from .session_api import SessionAPI

PROVIDERS = ["CPUExecutionProvider"]
#: Input shape signatures whose first run checks the outputs (then runs go unchecked).
MAX_CHECKED_SIGNATURES = 1024
#: Checked signatures per pattern of input ranks: a decoding loop feeds a new length each step
#: (its attention mask), and checking every step cost it a quarter of its time (its prompt and
#: first token are checked).
MAX_CHECKS_PER_RANKS = 2


# (frozen values without dataclass's methods compiled at import, and their fields made when
# first asked for: ir/frozen.py)
@lazy_fields
class NodeArg(FrozenValue):
    """An input or output as onnxruntime describes it."""

    name: str
    type: str
    shape: list | None

    def __init__(self, name: str, type: str, shape: list | None):  # noqa: A002
        self._set(name=name, type=type, shape=shape)

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape})"


@lazy_fields
class ModelMetadata(FrozenValue):
    """The model's metadata as onnxruntime gives it."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str]

    def __init__(
        self,
        producer_name: str,
        graph_name: str,
        domain: str,
        description: str,
        graph_description: str,
        version: int,
        custom_metadata_map: dict[str, str],
    ):
        self._set(
            producer_name=producer_name,
            graph_name=graph_name,
            domain=domain,
            description=description,
            graph_description=graph_description,
            version=version,
            custom_metadata_map=custom_metadata_map,
        )


#: What a creation's optimizer imports at any level (its passes' modules aside), and what
#: the fusions (EXTENDED and up) add: the shape inference they read.
_OPTIMIZER_MODULES = ("onyx.optimizer", "onyx.inference")
#: Where a session's options or the environment name the optimized-model cache's folder
#: (model_cache.CONFIG_KEY and ENV: tests/test_model_cache.py holds them equal).
_CACHE_CONFIG_KEY, _CACHE_ENV = "session.onyx.model_cache_dir", "ONYX_MODEL_CACHE"


def _model_cache(options: SessionOptions):
    """model_cache.py when the options or the environment name a cache folder, else None:
    a session without one never imports it (each module a cold start imports costs it a
    tenth of a millisecond before its code runs)."""
    named = getattr(options, "_config", {}).get(_CACHE_CONFIG_KEY) or os.environ.get(_CACHE_ENV)
    if not named:
        return None
    from . import model_cache

    return model_cache


def get_available_providers() -> list[str]:
    return list(PROVIDERS)


def type_string(t: ir.Type | None) -> str:
    return str(t) if t is not None else "unknown"


def _shape_list(t: ir.Type | None) -> list | None:
    shape = getattr(t, "shape", None)
    if shape is None:
        return [] if isinstance(t, ir.TensorType) else None
    return list(shape.dims)


class InferenceSession(SessionAPI):
    """Run a model. ``InferenceSession(path_or_bytes_or_model, sess_options=None, providers=None)``."""

    def __init__(
        self,
        path_or_bytes: str | os.PathLike | bytes | ir.Model,
        sess_options: SessionOptions | None = None,
        providers: list | None = None,
        provider_options: list | None = None,
        **kwargs: Any,
    ):
        self._source_ref = path_or_bytes  # (rebuilt from it when unpickled)
        self._options = self._session_arguments(sess_options, providers, provider_options, kwargs)
        self._providers = list(PROVIDERS)
        t0 = time.perf_counter()
        if self._options.enable_cpu_mem_arena:
            memory.keep_freed_memory()  # large tensors reuse freed heap memory (memory.py)
        concurrency.refresh_blas_libs()  # (a library loaded since the last survey)
        modules = len(sys.modules)
        with (
            gc_paused(),
            memory.small_pages(),
            _custom_kernels(getattr(self._options, "_custom_ops", ())),
        ):
            try:
                model = self._build(path_or_bytes)
            except MemoryError as e:  # e.g. a sparse initializer of 2**40 values made dense
                raise RuntimeFailure(f"out of memory while preparing the model: {e}") from None
            if len(sys.modules) != modules:
                # a process's first creations import the kernels, passes and native families
                # their model needs (schemas, tables, ctypes types: thousands of objects that
                # live on, with the session's graph and plan): the collector's first pass
                # after the pause scanned them all to find next to nothing (a cold start's
                # half millisecond); a creation that imported nothing is left as it was
                settle_long_lived()
        graph = model.graph
        inits = set(graph.initializers)
        self._feedable = {v.name: v for v in graph.inputs}
        self._inputs = [v for v in graph.inputs if v.name not in inits]
        self._overridable = [v for v in graph.inputs if v.name in inits]
        self._input_index = {v.name: i for i, v in enumerate(graph.inputs)}
        self._slot_by_name = {v.name: s for s, v in enumerate(self._plan.values) if v.name}
        # most heavy ops on onyx's pool rather than BLAS: BLAS gets one thread (OpenBLAS's idle
        # threads spin for a long while after every call, taking cores from the next convs)
        where = {id(n): _threads(n) for n in graph}  # (_heavy_work reads them too)
        places = list(where.values())
        self._pool_heavy = native.available() and places.count("pool") > places.count("blas")
        # the first run of each input shape signature checks every step's outputs against
        # the types inference derives (plan.OutputCheck, made at the first run)
        self._output_check: OutputCheck | None = None
        self._checked_signatures: set = set()
        self._checks_per_ranks: dict = {}
        #: each run's native threads and BLAS wish (concurrency.run_slot), fixed at creation
        self._run_threads = int(self._options.intra_op_num_threads or 0)
        self._run_blas = 1 if self._pool_heavy else self._run_threads
        heavy = _heavy_work(model, where)  # (one walk for both questions below)
        if not heavy:
            self._run_blas = None  # no BLAS work, no wish: concurrent runs need not wait for it
        # run()'s fast path: what it checks of each feed, found once (None: never fast)
        self._feed_specs = _fast_feed_specs(self._inputs, self._input_index)
        self._n_inputs = len(self._input_index)
        #: (output names, feed shapes) -> wanted slots, for signatures a full run has checked
        self._fast_signatures: dict[tuple, Any] = {}
        self._no_feeds = [None] * self._n_inputs
        # whether its runs take turns (concurrency.run_slot): tiny runs of a session whose
        # ops all hold the GIL take none
        self._pace = concurrency.Pace(gil_bound="pool" not in heavy)
        self.session_creation_seconds = time.perf_counter() - t0
        self._profiler = None
        self._fast_feeds = self._feed_specs  # (None while profiling: every run is timed)
        if self._options.enable_profiling:
            from .profiler import Profiler  # (a session that does not profile never needs it)

            self._profiler = Profiler(self._options.profile_file_prefix)
            self._profiler.span("Session", "session_initialization", t0, time.perf_counter())
            self._fast_feeds = None
        self._on_created()

    def _build(self, source: Any) -> ir.Model:
        """Load, check and optimize the model, and plan it; the model the plan runs."""
        model_cache = _model_cache(self._options)  # (None: no cache asked for)
        entry = None if model_cache is None else model_cache.key(source, self._options)
        cached = model_cache.read(self._options, entry) if entry is not None else None
        self._cache_entry = None  # (where the first run's output check finds its types)
        if cached is not None:  # (checked and optimized when it was cached)
            self._model = model = self._apply_options(cached, owned=True)
            self._cache_entry = entry
        else:
            model, entry = self._load_and_optimize(source, entry)
        snapshot = model_cache.snapshot(model) if entry is not None and cached is None else None
        self._plan = Plan(model.graph, Compiler(model), dict(model.opset_imports), outer=None)
        if snapshot is not None:
            model_cache.write(self._options, entry, snapshot, model)
        self._planned_model = model
        return model

    def __del__(self) -> None:
        """Unlink the graph this session made for itself when nothing else holds it (its
        plan, model or graph). Its nodes and Values refer to each other, so only the cyclic
        garbage collector would free them, during some later allocation: the next session's
        creation paid for this one's graph, and for the collections of the older generations
        it had reached. Unlinked, reference counting frees them now."""
        try:
            state = self.__dict__
            model = state.get("_planned_model")
            # (not the caller's own model, planned as it is: the caller's to keep)
            if EXACT_REFCOUNTS and model is not None and model is not state.get("_source_ref"):
                # (references to the model: _planned_model, maybe _model, ``model`` here and
                # in _release)
                holders = 3 + (state.get("_model") is model)
                # (read by the session itself: its functions, the optimizer's, are its own)
                owned = not isinstance(state.get("_source_ref"), ir.Model)
                _release(self._plan, model, holders, owned)
        except Exception:  # (an interpreter shutting down: the collector frees it then)
            pass

    def _cached_types(self) -> dict | None:
        """The types a model cache hit keeps for the first run's output check (read then:
        the check is made at the first run)."""
        if self._cache_entry is None:
            return None
        from . import model_cache

        return model_cache.read_types(self._options, self._cache_entry)

    def _load_and_optimize(self, source: Any, entry: str | None) -> tuple[ir.Model, str | None]:
        """The model to plan, made from ``source``, and its cache entry's key (None: not to be
        cached after all)."""
        # (what every creation that reads a model imports, imported before it reads it, the
        # imports' objects settled: utils.import_settled; a model cache hit needs none of it)
        level = int(self._options.graph_optimization_level)
        optimizer = () if level <= 0 else _OPTIMIZER_MODULES[: 1 if level == 1 else 2]
        import_settled("onyx.validation", *optimizer)
        from ..validation import validate

        self._model = as_model(source, user="InferenceSession")
        if entry is not None:  # (an entry: the options named a cache, model_cache is imported)
            from . import model_cache

            if not model_cache.cacheable(self._model):
                entry = None
        warned: list = []
        validate(self._model, "the session's model", warned=warned)
        if warned:
            entry = None  # (a hit would not repeat the warning)
        # a model the session read itself is its own: the optimizer may edit it, not a copy
        owned = not isinstance(source, ir.Model)
        self._model = self._apply_options(self._model, owned=owned)
        ordered = not any(p.rule == "topological-order" for p in warned)
        model, owned = accept_lenient(self._model, owned=owned, ordered=ordered)
        return self._prepare(model, owned=owned), entry

    def _prepare(self, model: ir.Model, owned: bool = False) -> ir.Model:
        """Hook for graph optimization at session creation (per graph_optimization_level);
        ``owned``: nobody else holds ``model``, so it may be optimized in place."""
        level = int(self._options.graph_optimization_level)
        if level <= 0:
            return model
        try:
            from ..optimizer import optimize_for_session
        except ImportError:
            return model
        # (ordered: accept_lenient sorted whatever the checker found out of order)
        return optimize_for_session(model, self._options, in_place=owned, ordered=True)

    # -- introspection (onyx's own) -------------------------------------------------------------
    @property
    def plan(self) -> Plan:
        """The compiled plan the session runs (its steps: ``plan.default_schedule``)."""
        return self._plan

    def value_names(self) -> set[str]:
        """Every value a run can fetch by name: graph outputs and the intermediate values the
        session's optimizations kept."""
        return set(self._slot_by_name)

    @property
    def pool_heavy(self) -> bool:
        """Whether most heavy ops run on the native pool, so BLAS gets one thread per run."""
        return self._pool_heavy

    # -- metadata -------------------------------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return [NodeArg(v.name, type_string(v.type), _shape_list(v.type)) for v in self._inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [
            NodeArg(v.name, type_string(v.type), _shape_list(v.type))
            for v in self._plan.graph.outputs
        ]

    def get_overridable_initializers(self) -> list[NodeArg]:
        return [
            NodeArg(v.name, type_string(v.type), _shape_list(v.type)) for v in self._overridable
        ]

    def get_modelmeta(self) -> ModelMetadata:
        m = self._model
        return ModelMetadata(
            producer_name=m.producer_name,
            graph_name=m.graph.name,
            domain=m.domain,
            description=m.doc_string,
            graph_description=m.graph.doc_string,
            version=m.model_version,
            custom_metadata_map=dict(m.metadata_props),
        )

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_provider_options(self) -> dict:
        return {p: {} for p in self._providers}

    def get_session_options(self) -> SessionOptions:
        return self._options

    # -- running --------------------------------------------------------------------------------
    def run(
        self,
        output_names: list[str] | None,
        input_feed: dict[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        """Outputs for ``output_names`` (all graph outputs when None), any value name allowed."""
        if run_options is None and input_feed.__class__ is dict:
            results = self._run_fast(output_names, input_feed)
            if results is not None:
                return results
        if not isinstance(input_feed, dict):
            raise InvalidArgument("input_feed must be a dict of input name -> value")
        inputs = self._bind_inputs(input_feed)
        wanted = None
        if output_names:
            wanted = tuple(self._output_slot(n) for n in output_names)
        check = None
        signature = (wanted, *[getattr(x, "shape", None) for x in inputs])
        if (
            signature not in self._checked_signatures
            and len(self._checked_signatures) < MAX_CHECKED_SIGNATURES
            and self._checks_per_ranks.get(ranks := _ranks(signature), 0) < MAX_CHECKS_PER_RANKS
        ):
            check = signature
            self._checks_per_ranks[ranks] = self._checks_per_ranks.get(ranks, 0) + 1
            if self._output_check is None:
                self._output_check = _output_check(
                    self._plan, self._planned_model, self._cached_types()
                )
        with self._run_slot():  # concurrent runs share the cores
            if run_options is not None or self._log_runs:
                check = None  # (a run with options is not a signature's checked run)
                results = self._run_with_options(inputs, wanted, run_options or RunOptions())
            else:
                results = self._run_plan(inputs, wanted, check is not None)
        if check is not None:
            self._checked_signatures.add(check)
        if run_options is None and signature in self._checked_signatures:
            self._note_fast_signature(output_names, input_feed, wanted)
        return [as_array_result(r) for r in results]

    # -- the fast path: feeds exactly as declared, a signature a full run has checked ----------
    def _run_fast(self, output_names, feed: dict) -> list | None:
        """run() when every feed is an ndarray of its input's dtype, nothing else is fed, and
        a full run has validated and checked this signature (its shapes and output names):
        the plan's generated runner on fresh read-only views of the feeds. None sends
        the call down the full path, which does every check and raises the errors. (One
        function, the feed checks and numpy's error state inlined:
        at one row, each call and object the path made cost as much as a small kernel.)"""
        specs = self._fast_feeds  # (None while profiling, or for inputs of other types)
        if specs is None or len(feed) != len(specs):
            return None
        inputs = self._no_feeds.copy()
        key = [tuple(output_names) if output_names else None]
        for name, index, dtype in specs:
            arr = feed.get(name)
            if arr.__class__ is not np.ndarray or arr.dtype is not dtype:
                return None
            inputs[index] = view = arr.view()
            view.setflags(write=False)
            key.append(arr.shape)
        try:
            wanted = self._fast_signatures.get(tuple(key), _UNCHECKED)
        except TypeError:  # (unhashable output names: the full path serves them)
            return None
        if wanted is _UNCHECKED:
            return None
        # (_run_slot's, inlined: a method call less per run)
        with concurrency.run_slot(self._run_threads, self._run_blas, self._pace):
            token = ignore_fp_errors()
            try:
                results = self._plan.run(inputs, None, wanted)
            finally:
                restore_fp_errors(token)
        for i, r in enumerate(results):
            if r.__class__ is not np.ndarray or not r.flags.writeable:
                results[i] = as_array_result(r)
        return results

    def _exact_feeds(self, specs, feed: dict, key: list) -> list | None:
        """The plan's inputs, fresh read-only views of the feeds (the full path's: derived.py
        keys on them), with their shapes appended to ``key``, when the feed is exactly one
        ndarray of its input's dtype per input in ``specs`` (what the fast path takes as it
        is); else None."""
        if specs is None or len(feed) != len(specs):
            return None
        inputs = [None] * self._n_inputs
        for name, index, dtype in specs:
            arr = feed.get(name)
            if arr.__class__ is not np.ndarray or arr.dtype is not dtype:
                return None
            inputs[index] = view = arr.view()
            view.setflags(write=False)
            key.append(arr.shape)
        return inputs

    def _run_slot(self) -> concurrency.run_slot:
        return concurrency.run_slot(self._run_threads, self._run_blas, self._pace)

    def _note_fast_signature(self, output_names, feed: dict, wanted) -> None:
        """Remember a checked signature for the fast path (when its feeds would take it)."""
        key = [tuple(output_names) if output_names else None]
        if self._log_runs or self._exact_feeds(self._feed_specs, feed, key) is None:
            return
        try:
            self._fast_signatures[tuple(key)] = wanted
        except TypeError:  # (unhashable output names: the full path serves them)
            pass

    def _run_plan(self, inputs: list, wanted, check: bool = False) -> list:
        # IEEE results (inf, nan) are what the spec asks for: no numpy warnings about them
        with ignoring_fp_errors():
            if self._profiler is None and not check:
                return self._plan.run(inputs, None, wanted)
            start = time.perf_counter()
            watcher = self._profiler
            if check:
                watcher = self._output_check
                watcher.then = self._profiler
            results = self._plan.run(inputs, None, wanted, profiler=watcher)
            if self._profiler is not None:
                self._profiler.span("Session", "model_run", start, time.perf_counter())
            return results

    def _output_slot(self, name: str) -> int:
        slot = self._slot_by_name.get(name)
        if slot is None:
            known = ", ".join(v.name for v in self._plan.graph.outputs)
            raise InvalidArgument(f"unknown output name {name!r} (graph outputs: {known})")
        return slot

    def _bind_inputs(self, feed: dict[str, Any]) -> list[Any]:
        inputs: list[Any] = [None] * len(self._input_index)
        for name, value in feed.items():
            v = self._feedable.get(name)
            if v is None:
                expected = ", ".join(x.name for x in self._inputs)
                raise InvalidArgument(f"unknown input {name!r} (model inputs: {expected})")
            inputs[self._input_index[name]] = _check_feed(v, value)
        missing = [v.name for v in self._inputs if v.name not in feed]
        if missing:
            raise InvalidArgument(f"missing input(s): {', '.join(missing)}")
        return inputs

    def end_profiling(self) -> str:
        """Write the Chrome-trace JSON of the runs so far; return its path ('' if not profiling)."""
        if self._profiler is None:
            return ""
        path = self._profiler.write()
        self._profiler = None
        self._fast_feeds = self._feed_specs
        return path


_UNCHECKED = object()


def _fast_feed_specs(inputs: list[ir.Value], index: dict[str, int]) -> tuple | None:
    """(name, position among the graph inputs, numpy dtype) per input the caller must feed,
    for run()'s fast path; None when an input is no tensor of a numeric type (strings,
    sequences, maps go the full path)."""
    specs = []
    for v in inputs:
        t = v.type
        if not isinstance(t, ir.TensorType) or t.elem_type in (None, DataType.STRING):
            return None
        try:
            dtype = np.dtype(to_numpy(t.elem_type))
        except Exception:  # (an element type without a numpy form)
            return None
        specs.append((v.name, index[v.name], dtype))
    return tuple(specs)


def _ranks(signature: tuple) -> tuple:
    """A shape signature's pattern: the fetched outputs and each input's rank."""
    return signature[0], *[None if s is None else len(s) for s in signature[1:]]


def _output_check(plan: Plan, model: ir.Model, cached: dict | None = None) -> OutputCheck:
    """What the first run of each shape signature checks the outputs against: the types
    inference derives from the inputs' (none when inference fails on the model), or those
    the model cache kept for it (``cached``: value name -> type)."""
    if cached is not None:
        return OutputCheck(plan, _by_value(model, cached))
    from ..inference.engine import derived_types

    try:
        types = derived_types(model)
    except Exception:  # an aid: a model inference cannot follow runs unchecked
        types = {}
    return OutputCheck(plan, types)


def _by_value(model: ir.Model, types: dict) -> dict:
    """id(value) -> (value, type), as derived_types gives them, from value name -> type."""
    return {id(v): (v, types[v.name]) for n in model.graph for v in n.outputs if v.name in types}


#: Whether sys.getrefcount counts as _release and _drop_runners expect (each reference once,
#: an argument moved into the callee's frame, the GIL held): CPython 3.11 to 3.13. Elsewhere a
#: dropped session is left to the collector: 3.10 counts the caller's stack too (the checks
#: never passed), 3.14 borrows references to locals on the stack (counts one lower, so a
#: graph, plan or runner still held elsewhere would look free), a free-threaded build lets
#: another thread take a reference between the count and the dismantling.
EXACT_REFCOUNTS = (
    sys.implementation.name == "cpython"
    and (3, 11) <= sys.version_info[:2] <= (3, 13)
    and getattr(sys, "_is_gil_enabled", lambda: True)()
)


def _release(plan: Plan, model: ir.Model, holders: int, owned: bool = False) -> None:
    """A dropped session's end: its plan's runners dropped, and its model's main graph
    unlinked when nothing but the session (``holders`` references to the model, counting
    ``model``), the model and the graph's own nodes holds the plan, the model or the graph
    (sys.getrefcount counts its argument too). ``owned``: the session read the model itself,
    so its local functions' graphs (the fused ops' bodies the optimizer added: a
    transformer's four, 300 objects a creation left to the collector) are unlinked too, each
    held by nothing but its function and its nodes."""
    _drop_runners(plan)
    if sys.getrefcount(plan) > 3 or sys.getrefcount(model) > holders + 1:  # (+ the argument)
        return  # (the plan: session._plan, ``plan``)
    graph = model.graph
    if plan.graph is not graph:
        return
    held = 2 + len(graph)  # model._graph, plan.graph and each node's node.graph
    if sys.getrefcount(graph) - 2 <= held:  # (less graph and the argument)
        # (not the functions of a model made from a caller's: a clone shares them)
        graph.dismantle()
        if owned:
            for f in model.functions.values():
                body = f.graph
                # (held by: f.graph, each node's node.graph, ``body`` and the argument)
                if body is not None and sys.getrefcount(body) - 2 <= 1 + len(body):
                    body.dismantle()


def _drop_runners(plan: Plan) -> None:
    """Drop the runners the plan generated (a plan someone else holds makes them again at its
    next run). Each runner's namespace holds the runner (``run``) and its failure handler
    (``_fail``, whose closure holds the plan; with steps that take a context, the plan's
    bound ``frame`` too): a cycle that keeps the plan, and its graph, for the collector;
    emptied when nothing else holds the runner (sys.getrefcount: its namespace, ``runner``
    and the argument)."""
    runners = plan.__dict__.get("_runners")
    if not runners:
        return
    made = list(runners.values())
    runners.clear()
    while made:
        runner = made.pop()
        env = getattr(runner, "__globals__", None)
        generated = env is not None and "__name__" not in env and env.get("run") is runner
        if generated and sys.getrefcount(runner) <= 3:  # (not a module's namespace)
            env.clear()


def _custom_kernels(ops) -> contextlib.AbstractContextManager:
    """The session's custom ops made visible while it is created (custom_ops.py, imported
    only by sessions that have some)."""
    if not ops:
        return contextlib.nullcontext()
    from .custom_ops import session_kernels

    return session_kernels(ops)


def _heavy_work(model: ir.Model, known: dict | None = None) -> set[str]:
    """Where the model's ops' heavy work runs ("blas", "pool"; both for an op whose work is
    unknown here: a function, an op without a kernel of its own). Empty: a run never calls
    BLAS (onyx's pool counts: its kernels' numpy paths, for shapes, types or settings the
    native kernels leave, are BLAS products), so it runs without a BLAS setting, whose setting
    and restoring cost a one-row run a fifth of its time. Without "pool": every op holds the
    GIL throughout (concurrency.Pace.gil_bound). The first op on the pool answers both
    questions (the walk stops there: a CNN's channels-last ops' bodies, walked on, imported
    five kernel modules that never run). ``known``: id(node) -> its _threads, where found."""
    known = known or {}
    functions = {(f.domain, f.name) for f in model.functions.values()}
    places: set[str] = set()
    for graph in [model.graph, *(f.graph for f in model.functions.values())]:
        for node in graph.all_nodes():
            domain = ir.canonical_domain(node.domain)
            version = ir.opset_for(model.opset_imports, domain)
            kernel = lookup(node.op_type, domain, version) if version is not None else None
            unknown = (node.domain, node.op_type) in functions and node.domain != ONYX_DOMAIN
            if kernel is None or unknown:
                return {"blas", "pool"}
            where = known[id(node)] if id(node) in known else _threads(node)
            if where == "pool":  # (the pool's numpy paths count as BLAS work too)
                return {"blas", "pool"}
            if where == "blas":
                places.add(where)
    return places


def _threads(node: ir.Node) -> str | None:
    """Where the node's heavy work runs: "pool", "blas" or None (the op's `threads` trait)."""
    where = traits(node.op_type, node.domain).threads
    return where(node) if callable(where) else where


def _check_feed(v: ir.Value, value: Any) -> Any:
    """Validate one feed against the input's declared type; return it read-only."""
    t = v.type
    if isinstance(t, ir.TensorType):
        try:
            arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        except (ValueError, TypeError) as e:  # a ragged nested list, an unconvertible object
            raise InvalidArgument(f"input {v.name!r}: not an array: {e}") from None
        expected = to_numpy(t.elem_type)
        if isinstance(value, list | tuple) and arr.dtype.kind in "fiub":
            arr = arr.astype(expected)  # nested lists take the input's type (as onnxruntime)
        if arr.dtype.kind in "US":
            arr = arr.astype(object)
        if arr.dtype != expected and not (t.elem_type == DataType.STRING and arr.dtype == object):
            raise InvalidArgument(
                f"input {v.name!r}: expected tensor({type_name(t.elem_type)}), "
                f"got an array of {arr.dtype}"
            )
        if t.shape is not None:
            if arr.ndim != t.shape.rank:
                raise InvalidArgument(
                    f"input {v.name!r}: expected rank {t.shape.rank} {t.shape}, "
                    f"got shape {list(arr.shape)}"
                )
            for i, (want, got) in enumerate(zip(t.shape.dims, arr.shape)):
                if isinstance(want, int) and want != got:
                    raise InvalidArgument(
                        f"input {v.name!r}: dimension {i} must be {want} (declared {t.shape}), "
                        f"got shape {list(arr.shape)}"
                    )
        # A fresh read-only view every run: kernels never write into a caller's array, and
        # kernels/derived.py may rely on a feed's array object not outliving the run.
        arr = arr.view()
        arr.flags.writeable = False
        return arr
    if isinstance(t, ir.SequenceType) and not isinstance(value, list | tuple):
        raise InvalidArgument(
            f"input {v.name!r}: expected a sequence (list), got {type(value).__name__}"
        )
    if isinstance(t, ir.SequenceType):
        return list(value)
    if isinstance(t, ir.MapType) and not isinstance(value, dict):
        raise InvalidArgument(
            f"input {v.name!r}: expected a map (dict), got {type(value).__name__}"
        )
    return value
