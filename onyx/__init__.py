"""onyx: the Open Neural Network Exchange in Python: format, operator sets, runtime and tools.

import onyx
model = onyx.load("model.onnx")              # bytes -> IR
onyx.check(model)                             # validate against the standard
sess = onyx.InferenceSession("model.onnx")    # onnxruntime-compatible
outputs = sess.run(None, {"input": x})
"""

from __future__ import annotations

import gc
import importlib
import sys
from typing import TYPE_CHECKING

from .errors import (
    FormatError,
    InvalidArgument,
    NotImplementedOp,
    OnyxError,
    RuntimeFailure,
    SaveError,
    ValidationError,
)

__version__ = "0.1.0"

# Public names and the module that defines each; imported on first use so that `import onyx`
# stays fast and a tool that only reads files never loads the runtime.
_LAZY = {
    "load": "onyx.serde",
    "loads": "onyx.serde",
    "save": "onyx.serde",
    "dumps": "onyx.serde",
    "to_array": "onyx.serde",
    "from_array": "onyx.serde",
    "load_tensor": "onyx.serde",
    "save_tensor": "onyx.serde",
    "check": "onyx.checker",
    "infer_shapes": "onyx.inference",
    "InferenceSession": "onyx.runtime.session",
    "SessionOptions": "onyx.runtime.session",
    "RunOptions": "onyx.runtime.session",
    "GraphOptimizationLevel": "onyx.runtime.session",
    "get_available_providers": "onyx.runtime.session",
    "optimize": "onyx.optimizer",
    "view": "onyx.tools.viewer",
    # onnxruntime's API beyond the session (onyx/runtime/*.py)
    "ExecutionMode": "onyx.runtime.options",
    "ExecutionOrder": "onyx.runtime.options",
    "IgnoredOptionWarning": "onyx.runtime.options",
    "set_default_logger_severity": "onyx.runtime.options",
    "set_default_logger_verbosity": "onyx.runtime.options",
    "OrtValue": "onyx.runtime.ortvalue",
    "OrtDevice": "onyx.runtime.ortvalue",
    "IOBinding": "onyx.runtime.iobinding",
    "SessionIOBinding": "onyx.runtime.iobinding",
    "NodeArg": "onyx.runtime.session",
    "ModelMetadata": "onyx.runtime.session",
    "get_device": "onyx.runtime.session_api",
    "get_all_providers": "onyx.runtime.session_api",
    "get_version_string": "onyx.runtime.session_api",
    "get_build_info": "onyx.runtime.session_api",
    "disable_telemetry_events": "onyx.runtime.session_api",
    "enable_telemetry_events": "onyx.runtime.session_api",
    "register_op": "onyx.runtime.custom_ops",
    "unregister_op": "onyx.runtime.custom_ops",
    # debugging (onyx/debug/)
    "compare": "onyx.debug",
    "reduce": "onyx.debug",
    "generate": "onyx.genai",
    "quantize": "onyx.quantization",
    # model tools (onyx/tools/)
    "to_text": "onyx.tools.text",
    "parse_model": "onyx.tools.text",
    "parse_graph": "onyx.tools.text",
    "opset": "onyx.tools.builder",
    "merge_models": "onyx.tools.compose",
    "add_prefix": "onyx.tools.compose",
    "extract_model": "onyx.tools.compose",
    "inline_functions": "onyx.tools.compose",
    "update_dims": "onyx.tools.compose",
    "model_stats": "onyx.tools.stats",
    "to_float16": "onyx.tools.precision",
    "to_bfloat16": "onyx.tools.precision",
    "convert_version": "onyx.tools.version_converter",
}
_SUBMODULES = {
    "ir", "defs", "backend", "runtime", "serde", "optimizer", "inference", "tools", "debug",
    "batch", "genai", "quantization", "helper",
}  # fmt: skip


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(_imported(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return _imported(f"onyx.{name}")
    raise AttributeError(f"module 'onyx' has no attribute {name!r}")


def _imported(module: str):
    """``module``, imported with the cyclic collector paused: importing the runtime makes
    tens of thousands of objects that live as long as the process, and the collector's passes
    in the middle of it (a dozen, each promoting them a generation further) found nothing to
    free. After it they go straight to the oldest generation, unscanned
    (utils.settle_long_lived): the first pass after the pause scanned them all again."""
    # (paused here, not by utils.gc_paused: importing utils, and numpy with it, before the
    # pause let a collector pass run)
    enabled, known = gc.isenabled(), len(sys.modules)
    gc.disable()
    try:
        return importlib.import_module(module)
    finally:
        if enabled:
            if len(sys.modules) != known:
                from .utils import settle_long_lived

                settle_long_lived()
            gc.enable()


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)


if TYPE_CHECKING:  # for type checkers and IDEs
    from . import ir  # noqa: F401
    from .checker import check  # noqa: F401
    from .inference import infer_shapes  # noqa: F401
    from .runtime.session import InferenceSession, RunOptions, SessionOptions  # noqa: F401
    from .serde import dumps, from_array, load, loads, save, to_array  # noqa: F401

__all__ = [
    "FormatError",
    "InvalidArgument",
    "NotImplementedOp",
    "OnyxError",
    "RuntimeFailure",
    "SaveError",
    "ValidationError",
    "__version__",
    *_LAZY,
]
