"""Node attributes: a name, a type tag and a Python value."""

from __future__ import annotations

import enum
from dataclasses import field
from typing import Any

from .frozen import DataValue, lazy_fields


class AttrType(enum.IntEnum):
    """AttributeProto.AttributeType values."""

    UNDEFINED = 0
    FLOAT = 1
    INT = 2
    STRING = 3
    TENSOR = 4
    GRAPH = 5
    SPARSE_TENSOR = 11
    TYPE_PROTO = 13
    FLOATS = 6
    INTS = 7
    STRINGS = 8
    TENSORS = 9
    GRAPHS = 10
    SPARSE_TENSORS = 12
    TYPE_PROTOS = 14


# (DataValue: what @dataclass gives, without compiling methods at every import)
@lazy_fields
class Attr(DataValue):
    """One attribute. Values by type:

    FLOAT float, INT int, STRING bytes-or-str (``str`` when valid UTF-8), TENSOR ir.Tensor,
    GRAPH ir.Graph, SPARSE_TENSOR ir.SparseTensor, TYPE_PROTO ir.Type, and lists of those for
    the plural types. ``ref_attr_name`` set means the value refers to an attribute of the
    enclosing function (value is then None).
    """

    name: str
    type: AttrType
    value: Any = None
    doc_string: str = ""
    ref_attr_name: str = ""
    extras: Any = field(default=None, repr=False, compare=False)

    def __init__(
        self,
        name: str,
        type: AttrType,
        value: Any = None,
        doc_string: str = "",
        ref_attr_name: str = "",
        extras: Any = None,
    ):
        self.name = name
        self.type = type
        self.value = value
        self.doc_string = doc_string
        self.ref_attr_name = ref_attr_name
        self.extras = extras

    @property
    def is_ref(self) -> bool:
        return bool(self.ref_attr_name)
