"""onyx's own copy of the ONNX wire schema (package ``onyx.proto``), generated from onyx.proto.

Under protobuf's upb implementation (the default) the message classes are made here straight
from the compiled schema (``_file.py``), as onyx_pb2.py's builder would make them: the same
classes (onyx_pb2 imported later gets these very ones), without importing the pure-Python
protobuf machinery that builder brings along (descriptor_pool, python_message, text_format,
...: about half of protobuf's import, and a good part of a session's cold start). Under any
other implementation, or should upb's API differ, onyx_pb2.py is imported as generated.

upb's first message class imports protobuf's well-known types (their mixins, its WKTBASES
table: calendar, datetime, locale, descriptor, ...), which none of onyx's messages is: where
protobuf's Python side is not loaded yet, onyx's classes are made against an empty table that
upb keeps, and the table is filled when ``google.protobuf.descriptor`` is first imported (every
generated ``_pb2`` module, and the well-known types themselves, import it before they make a
class; where well_known_types is imported first, at the end of its own import), so that
Timestamp, Any, Struct... made later get their mixins as ever. The import hooks placed before
onyx's finder still find both modules: it asks the other finders in their order.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
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
_WELL_KNOWN = "google.protobuf.internal.well_known_types"
_DESCRIPTOR = "google.protobuf.descriptor"


class _FillOnImport:
    """A loader around google.protobuf.descriptor's or well_known_types' own: once the module
    has run, its finder fills the table upb kept, before any caller can make a class."""

    def __init__(self, loader, finder: _WellKnownFinder):
        self._loader, self._finder = loader, finder

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._finder.fill()

    def __getattr__(self, name: str):  # (get_source, is_package, ...: the real loader's)
        return getattr(self._loader, name)


class _WellKnownFinder:
    """Finds google.protobuf.descriptor and well_known_types as the other finders do, their
    loaders wrapped in _FillOnImport, until the table (``bases``) is filled; then leaves
    sys.meta_path."""

    def __init__(self, bases: dict):
        self._bases = bases
        self._asking = threading.local()  # (a finder asked here that asks importlib again)

    def find_spec(self, name: str, path=None, target=None):
        if name not in (_DESCRIPTOR, _WELL_KNOWN) or getattr(self._asking, "name", None):
            return None
        self._asking.name = name
        try:
            spec = _first_spec(self, name, path, target)
        finally:
            self._asking.name = None
        if spec is not None and spec.loader is not None:
            spec.loader = _FillOnImport(spec.loader, self)
        return spec

    def fill(self) -> None:
        """The table filled from well_known_types (imported here where it is not yet), unless
        well_known_types is halfway through its own import (it imports descriptor): its end
        fills it then."""
        module = sys.modules.get(_WELL_KNOWN)
        if module is not None and not hasattr(module, "WKTBASES"):
            return
        from google.protobuf.internal import well_known_types

        self._bases.update(well_known_types.WKTBASES)
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)


def _first_spec(finder, name: str, path, target):
    """The spec for ``name`` of the first finder on sys.meta_path but ``finder`` that has one."""
    for other in list(sys.meta_path):
        find = getattr(other, "find_spec", None)
        if other is not finder and find is not None:
            spec = find(name, path, target)
            if spec is not None:
                return spec
    return None


@contextlib.contextmanager
def _well_known_deferred():
    """Inside the block upb's first message class takes an empty WKTBASES table (filled when
    google.protobuf.descriptor or well_known_types is imported); nothing changes where protobuf's Python side, or
    the table, is loaded already."""
    if _WELL_KNOWN in sys.modules or _DESCRIPTOR in sys.modules:
        yield
        return
    bases: dict = {}
    stub = types.ModuleType(_WELL_KNOWN)
    stub.WKTBASES = bases
    sys.modules[_WELL_KNOWN] = stub
    try:
        yield
    finally:
        if sys.modules.get(_WELL_KNOWN) is stub:
            del sys.modules[_WELL_KNOWN]
        finder = _WellKnownFinder(bases)
        sys.meta_path.insert(0, finder)
        if _DESCRIPTOR in sys.modules:  # (imported meanwhile, by another thread: too late to
            finder.fill()  # see it imported; filled now)


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

    with _well_known_deferred():
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
