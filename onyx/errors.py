"""The exceptions onyx raises. Every one names the model part it is about."""

from __future__ import annotations


class OnyxError(Exception):
    """Base class of every error onyx raises on purpose."""


class FormatError(OnyxError):
    """A file or byte string is not a readable ONNX model, tensor or external-data layout."""


class ValidationError(OnyxError):
    """A model breaks one or more rules of the ONNX standard.

    ``problems`` holds every problem found, not only the first.
    """

    def __init__(self, problems: list | str):
        if isinstance(problems, str):
            problems = [problems]
        self.problems = list(problems)
        lines = [str(p) for p in self.problems]
        head = f"{len(lines)} problem(s) found" if len(lines) != 1 else "1 problem found"
        super().__init__(head + ":\n" + "\n".join(f"  - {line}" for line in lines))


class SaveError(OnyxError, OSError):
    """A model or its external data could not be written; the message names the file."""


class InvalidArgument(OnyxError, ValueError):
    """A caller passed something unusable: a wrong feed, an unknown output name, a bad option."""


class NotAModel(InvalidArgument, TypeError):
    """Something that is neither a path, bytes nor an ir.Model was given where a model goes."""


class NotImplementedOp(OnyxError):
    """No kernel exists for an operator (domain, op type, opset version)."""


class RuntimeFailure(OnyxError):
    """A kernel failed while running; the message names the node, its op and its input shapes."""
