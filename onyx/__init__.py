"""onyx: the Open Neural Network Exchange in Python: format, operator sets, runtime and tools."""

from __future__ import annotations

from .errors import (
    FormatError,
    InvalidArgument,
    NotImplementedOp,
    OnyxError,
    RuntimeFailure,
    ValidationError,
)

__version__ = "0.1.0"

__all__ = [
    "FormatError",
    "InvalidArgument",
    "NotImplementedOp",
    "OnyxError",
    "RuntimeFailure",
    "ValidationError",
    "__version__",
]
