"""onyx's own copy of the ONNX wire schema (package ``onyx.proto``), generated from onyx.proto.

Under protobuf's upb implementation (the default) the message classes are made here straight
from the compiled schema (``_file.py``), as onyx_pb2.py's builder would make them: the same
classes (onyx_pb2 imported later gets these very ones), without importing the pure-Python
protobuf machinery that builder brings along (descriptor_pool, python_message, text_format,
...: about half of protobuf's import, and a good part of a session's cold start). Under any
other implementation, or should upb's API differ, onyx_pb2.py is imported as generated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

#: The messages this package exports (those of onyx.proto: the top-level ones).
MESSAGES = (
    "AttributeProto",
    "DeviceConfigurationProto",
    "FunctionProto",
    "GraphProto",
    "IntIntListEntryProto",
    "MapProto",
    "ModelProto",
    "NodeDeviceConfigurationProto",
    "NodeProto",
    "OperatorSetIdProto",
    "OptionalProto",
    "SequenceProto",
    "ShardedDimProto",
    "ShardingSpecProto",
    "SimpleShardedDimProto",
    "SparseTensorProto",
    "StringStringEntryProto",
    "TensorAnnotation",
    "TensorProto",
    "TensorShapeProto",
    "TrainingInfoProto",
    "TypeProto",
    "ValueInfoProto",
)
_MODULE = f"{__name__}.onyx_pb2"


def _upb_classes() -> dict | None:
    """The message classes made with upb from the compiled schema, or None where upb is not
    the implementation in use."""
    from google.protobuf.internal import api_implementation

    if api_implementation.Type() != "upb":
        return None
    from google._upb import _message as upb
    from google.protobuf.message import Message

    from ._file import SERIALIZED

    file = upb.default_pool.AddSerializedFile(SERIALIZED)

    def build(desc, prefix: str):  # (as protobuf's builder: nested messages first)
        attrs = {name: build(nested, f"{prefix}{desc.name}.")
                 for name, nested in desc.nested_types_by_name.items()}  # fmt: skip
        attrs.update(DESCRIPTOR=desc, __module__=_MODULE, __qualname__=prefix + desc.name)
        return upb.MessageMeta(desc.name, (Message,), attrs)

    return {name: build(desc, "") for name, desc in file.message_types_by_name.items()}


def _classes() -> dict:
    try:
        made = _upb_classes()
    except Exception:  # (a protobuf whose upb API differs: the generated module, as ever)
        made = None
    if made is None or not set(MESSAGES) <= set(made):
        from . import onyx_pb2

        made = {name: getattr(onyx_pb2, name) for name in MESSAGES}
    return made


globals().update({name: cls for name, cls in _classes().items() if name in MESSAGES})

if TYPE_CHECKING:  # (what the names are, for type checkers)
    from .onyx_pb2 import (  # noqa: F401
        AttributeProto,
        DeviceConfigurationProto,
        FunctionProto,
        GraphProto,
        IntIntListEntryProto,
        MapProto,
        ModelProto,
        NodeDeviceConfigurationProto,
        NodeProto,
        OperatorSetIdProto,
        OptionalProto,
        SequenceProto,
        ShardedDimProto,
        ShardingSpecProto,
        SimpleShardedDimProto,
        SparseTensorProto,
        StringStringEntryProto,
        TensorAnnotation,
        TensorProto,
        TensorShapeProto,
        TrainingInfoProto,
        TypeProto,
        ValueInfoProto,
    )

__all__ = list(MESSAGES)
