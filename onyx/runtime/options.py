"""SessionOptions and RunOptions with every field and method onnxruntime's have.

Each one either works or, when set to something onyx does not do, warns once (an
:class:`IgnoredOptionWarning`, also logged) that onyx ignores it: a script written for
onnxruntime never gets different behaviour silently. Fields whose effect onyx cannot show
(memory-pattern planning, per-session thread pools, deterministic compute: onyx's kernels are
deterministic) are accepted without a warning. docs/compatibility.md has the table.

Logging: ``log_severity_level`` (0 verbose, 1 info, 2 warning, 3 error, 4 fatal; -1: the
default set by :func:`set_default_logger_severity`, 2 unless changed) drives the ``"onyx"``
``logging`` logger for that session: model load, optimizations applied, fallbacks, timing.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import MISSING, Field, field, fields
from typing import Any

from ..ir.frozen import IntEnumBody, int_enum, lazy_fields

# ``logging`` is imported when something is logged, not at import: a session that logs nothing
# (the default severity) never needs it, and it costs a few ms of a cold start. The "onyx"
# logger is ``logger`` (module attribute, made on first use).

#: logging's levels (its fixed values), without importing it.
DEBUG, INFO, WARNING, ERROR, CRITICAL = 10, 20, 30, 40, 50


def _logger():
    import logging

    return logging.getLogger("onyx")


def __getattr__(name: str):
    if name == "logger":
        return _logger()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# (enum.IntEnums, made in half the time: ir/frozen.int_enum)
@int_enum
class GraphOptimizationLevel(IntEnumBody):
    """onnxruntime's levels, same names and values."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


@int_enum
class ExecutionMode(IntEnumBody):
    """onnxruntime's execution modes, same names and values."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


@int_enum
class ExecutionOrder(IntEnumBody):
    """onnxruntime's execution orders, same names and values."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class IgnoredOptionWarning(UserWarning):
    """An onnxruntime option or keyword that onyx accepts but does not act on."""


_warned: set[str] = set()


def warn_ignored(what: str, why: str = "") -> None:
    """Warn once per process that onyx ignores ``what`` (an IgnoredOptionWarning)."""
    if what in _warned:
        return
    _warned.add(what)
    message = f"onyx ignores {what}" + (f": {why}" if why else "")
    _logger().info(message)  # (the warning is what the user sees; logged too for log files)
    warnings.warn(message, IgnoredOptionWarning, stacklevel=3)


# -- logging -----------------------------------------------------------------------------------

_SEVERITY_TO_LEVEL = {
    0: DEBUG,
    1: INFO,
    2: WARNING,
    3: ERROR,
    4: CRITICAL,
}
_default_severity = 2
_default_verbosity = 0


def set_default_logger_severity(severity: int) -> None:
    """The severity sessions use when their options leave it at -1 (onnxruntime's API)."""
    global _default_severity
    if severity not in _SEVERITY_TO_LEVEL:
        raise ValueError(f"log severity must be 0 to 4, got {severity}")
    _default_severity = severity


def set_default_logger_verbosity(verbosity: int) -> None:
    global _default_verbosity
    _default_verbosity = int(verbosity)


class SessionLog:
    """Where one session (or run) logs: the "onyx" logger, at the level its options ask for,
    prefixed with its logid. When the application configured no logging handler, verbose
    severities print to stderr as onnxruntime's do."""

    __slots__ = ("level", "logid", "verbosity")

    def __init__(self, severity: int = -1, logid: str = "", verbosity: int = 0):
        severity = _default_severity if severity is None or severity < 0 else int(severity)
        self.level = _SEVERITY_TO_LEVEL.get(min(severity, 4), WARNING)
        self.logid = logid
        self.verbosity = max(int(verbosity or 0), _default_verbosity)
        if self.level < WARNING:
            _ensure_handler()

    def enabled(self, level: int) -> bool:
        if "logging" not in sys.modules:  # nobody can have configured the "onyx" logger yet
            return level >= self.level
        logger = _logger()
        if logger.level != 0:  # (NOTSET) the application set onyx's level: it decides
            return logger.isEnabledFor(level)
        return level >= self.level and not logger.disabled

    def log(self, level: int, message: str, *args: Any) -> None:
        if not self.enabled(level):
            return
        prefix = f"[{self.logid}] " if self.logid else ""
        logger = _logger()
        record = logger.makeRecord(logger.name, level, "(onyx)", 0, prefix + message, args, None)
        logger.handle(record)

    def debug(self, message: str, *args: Any) -> None:
        self.log(DEBUG, message, *args)

    def info(self, message: str, *args: Any) -> None:
        self.log(INFO, message, *args)

    def warning(self, message: str, *args: Any) -> None:
        self.log(WARNING, message, *args)


_handler = None  # the logging.Handler onyx added, if any


def _ensure_handler() -> None:
    import logging

    global _handler
    logger = logging.getLogger("onyx")
    if _handler is None and not logger.hasHandlers():
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s:onyx] %(message)s"))
        logger.addHandler(_handler)


# -- options -----------------------------------------------------------------------------------

#: Fields onyx does not act on: the value that means "nothing asked for" and why a different
#: one is ignored.
_IGNORED_FIELDS = {
    "execution_mode": (0, "onyx runs the nodes of a graph one after another"),
    "execution_order": (0, "onyx runs nodes in the graph's topological order"),
    "inter_op_num_threads": (0, "onyx has no inter-op parallelism (sequential execution)"),
}
_IGNORED_METHODS = {
    "add_external_initializers_from_files_in_memory": "external data is read from files",
    "add_provider": "onyx has only the CPU execution provider",
    "add_provider_for_devices": "onyx has only the CPU execution provider",
    "set_provider_selection_policy": "onyx has only the CPU execution provider",
    "set_provider_selection_policy_delegate": "onyx has only the CPU execution provider",
    "set_ep_context_data_read_func": "onyx has no EP context models",
    "clear_ep_context_data_read_func": "onyx has no EP context models",
    "set_load_cancellation_flag": "onyx's session creation cannot be cancelled",
}


def _declared(cls: type) -> tuple:
    """(name, default, default factory or None) of each field ``cls`` declares, in order, read
    off its body (every field has a default: a value or a ``field(...)``): what
    ``dataclasses.fields`` gives of these classes, without making the dataclass fields (they are
    made when first asked for: ir/frozen.lazy_fields)."""
    declared = []
    for name in cls.__annotations__:
        value = cls.__dict__[name]
        if isinstance(value, Field):
            factory = None if value.default_factory is MISSING else value.default_factory
            declared.append((name, value.default, factory))
        else:
            declared.append((name, value, None))
    return tuple(declared)


def _option_fields(cls: type) -> type:
    """``lazy_fields``, and the table of the fields ``_Warns.__init__`` sets (a subclass
    that is not a dataclass of its own inherits it, as it would inherit the dataclass fields)."""
    cls._fields_declared = _declared(cls)
    return lazy_fields(cls)


class _Warns:
    """Warn when a field onyx ignores is given a value that asks for something.

    Also the ``__init__``, ``__repr__`` and ``__eq__`` that ``@dataclass`` would give its
    subclasses (declared ``@_option_fields``: ``@dataclass(init=False, repr=False, eq=False)``
    applied when their fields are first asked for), written once: ``@dataclass`` compiles each
    class's methods from source when it is defined, which every cold start paid, and reads each
    field's annotation, which ``SessionOptions()`` needs none of. The fields stay dataclass
    fields (``dataclasses.fields``, ``replace``); tests/test_cold_import.py holds each class's
    ``_fields_declared`` to them."""

    _ignored: dict[str, tuple[Any, str]] = {}
    _fields_declared: tuple = ()  # (set by @_option_fields)
    __hash__ = None  # (mutable and compared by value, as @dataclass(eq=True) leaves it)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self).__name__
        defaults = self._fields_declared
        if len(args) > len(defaults):
            raise TypeError(
                f"{cls}.__init__() takes {len(defaults) + 1} positional arguments but "
                f"{len(args) + 1} were given"
            )
        for (name, _, _), value in zip(defaults, args):
            if name in kwargs:
                raise TypeError(f"{cls}.__init__() got multiple values for argument '{name}'")
            kwargs[name] = value
        for name, default, factory in defaults:
            if name in kwargs:
                value = kwargs.pop(name)
            else:
                value = default if factory is None else factory()
            setattr(self, name, value)  # (through __setattr__: ignored fields warn)
        if kwargs:
            raise TypeError(
                f"{cls}.__init__() got an unexpected keyword argument '{next(iter(kwargs))}'"
            )

    def __setattr__(self, name: str, value: Any) -> None:
        ignored = self._ignored.get(name)
        if ignored is not None and value != ignored[0]:
            warn_ignored(f"{type(self).__name__}.{name} = {value!r}", ignored[1])
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._compared() == other._compared()
        return NotImplemented

    def _compared(self) -> tuple:
        return tuple([getattr(self, f.name) for f in fields(self) if f.compare])


@_option_fields
class SessionOptions(_Warns):
    """onnxruntime's SessionOptions: same fields, defaults and methods."""

    graph_optimization_level: int = GraphOptimizationLevel.ORT_ENABLE_ALL
    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    log_severity_level: int = -1
    log_verbosity_level: int = 0
    enable_profiling: bool = False
    profile_file_prefix: str = "onyx_profile"
    optimized_model_filepath: str = ""
    disabled_optimizers: list[str] = field(default_factory=list)
    execution_mode: int = ExecutionMode.ORT_SEQUENTIAL
    execution_order: int = ExecutionOrder.DEFAULT
    enable_cpu_mem_arena: bool = True
    enable_mem_pattern: bool = True
    enable_mem_reuse: bool = True
    use_deterministic_compute: bool = False
    use_per_session_threads: bool = True
    logid: str = ""
    _config: dict[str, str] = field(default_factory=dict, repr=False)
    _initializers: dict[str, Any] = field(default_factory=dict, repr=False)
    _free_dims: dict[str, int] = field(default_factory=dict, repr=False)
    _free_denotations: dict[str, int] = field(default_factory=dict, repr=False)
    _custom_ops: list = field(default_factory=list, repr=False)

    _ignored = _IGNORED_FIELDS

    # -- config entries -------------------------------------------------------------------------
    def add_session_config_entry(self, key: str, value: str) -> None:
        if key not in _HONORED_SESSION_CONFIG:
            warn_ignored(f"session config entry {key!r}", "onyx has no such setting")
        self._config[key] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise RuntimeError(f"SessionOptions does not have configuration with key: {key}")
        return self._config[key]

    # -- initializers and dims ------------------------------------------------------------------
    def add_initializer(self, name: str, value: Any) -> None:
        """Use ``value`` (an OrtValue or array) for initializer ``name`` instead of the model's."""
        self._initializers[name] = value

    def add_external_initializers(self, names: list[str], values: list[Any]) -> None:
        """Initializers whose data the model leaves to the caller (or overrides)."""
        if len(names) != len(values):
            raise ValueError("add_external_initializers: names and values differ in length")
        for name, value in zip(names, values):
            self.add_initializer(name, value)

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Fix the symbolic input dimension ``dim_name`` to ``dim_value``."""
        self._free_dims[dim_name] = int(dim_value)

    def add_free_dimension_override_by_denotation(self, denotation: str, dim_value: int) -> None:
        """Fix every free input dimension with this denotation (e.g. DATA_BATCH)."""
        self._free_denotations[denotation] = int(dim_value)

    # -- custom ops and providers ---------------------------------------------------------------
    def register_custom_op(
        self, op_type: str, fn, *, domain: str = "", since: int = 1, shape=None
    ) -> None:
        """A Python kernel only sessions made with these options see (onyx's own API; see
        onyx/runtime/custom_ops.py for the kernel contract and shape rules)."""
        from .custom_ops import CustomOp

        self._custom_ops.append(CustomOp(op_type, fn, domain, since, shape))

    def register_custom_ops_library(self, library_path: str) -> None:
        warn_ignored(
            f"register_custom_ops_library({library_path!r})",
            "onyx cannot load compiled custom-op libraries; register a Python kernel with "
            "SessionOptions.register_custom_op or onyx.register_op",
        )

    def has_providers(self) -> bool:
        return False


def _ignored_method(name: str, why: str):
    def ignored(self, *args: Any, **kwargs: Any) -> None:
        warn_ignored(f"SessionOptions.{name}()", why)

    ignored.__name__ = name
    ignored.__doc__ = f"Accepted for onnxruntime compatibility; onyx ignores it ({why})."
    return ignored


for _name, _why in _IGNORED_METHODS.items():
    setattr(SessionOptions, _name, _ignored_method(_name, _why))


#: Session config keys onyx acts on (or whose onnxruntime meaning onyx always has).
_HONORED_SESSION_CONFIG = frozenset(
    [
        "session.load_model_format",  # onyx reads ONNX
        "session.save_model_format",
        "session.use_env_allocators",
        "session.intra_op.allow_spinning",  # a latency knob: results are the same
        "session.inter_op.allow_spinning",
        "session.disable_prepacking",
        "session.onyx.model_cache_dir",  # onyx's own: runtime/model_cache.py
    ]
)


@_option_fields
class RunOptions(_Warns):
    """onnxruntime's RunOptions. ``terminate = True`` (from another thread, or before the
    run) stops a run between two nodes with a RuntimeFailure."""

    log_severity_level: int = -1
    log_verbosity_level: int = 0
    logid: str = ""
    terminate: bool = False
    only_execute_path_to_fetches: bool = False  # onyx always runs only what the fetches need
    _config: dict[str, str] = field(default_factory=dict, repr=False)

    _ignored = {}  # (a class attribute, not a field)

    def add_run_config_entry(self, key: str, value: str) -> None:
        warn_ignored(f"run config entry {key!r}", "onyx has no such setting")
        self._config[key] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise RuntimeError(f"RunOptions does not have configuration with key: {key}")
        return self._config[key]

    def add_active_adapter(self, adapter: Any) -> None:
        warn_ignored("RunOptions.add_active_adapter()", "onyx has no LoRA adapters")
