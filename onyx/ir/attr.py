"""Node attributes: a name, a type tag and a Python value."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from .frozen import DataValue, IntEnumBody, int_enum, lazy_fields


@int_enum  # (an enum.IntEnum, made in half the time: frozen.int_enum)
class AttrType(IntEnumBody):
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

    A long FLOATS, INTS or STRINGS attribute read from a file (:meth:`of_array`) holds its
    elements as a read-only array (float32, int64; object, of bytes) until ``value`` is first
    read: the list is made then (the same Python floats and ints; ``str`` where valid UTF-8),
    and the array let go. Who can use the array (a kernel's tables, inference's memo, the
    writer) reads :attr:`array`, and no list is made at all: an SVM's support vectors, 17k
    floats, were a quarter of its session's creation as a list.
    """

    name: str
    type: AttrType
    # (no class default: an instance made by of_array has no ``value`` until __getattr__
    # makes it; __init__ sets it on every other)
    value: Any
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

    @classmethod
    def of_array(
        cls,
        name: str,
        type: AttrType,  # noqa: A002
        array: Any,
        doc_string: str = "",
        ref_attr_name: str = "",
        extras: Any = None,
    ) -> Attr:
        """A FLOATS, INTS or STRINGS attribute holding its elements as ``array`` (a 1-D numpy
        array, read-only; a STRINGS one's of bytes, dtype object); ``value`` is its
        ``tolist()`` (strings decoded as the reader does), made when first read."""
        attr = _ArrayAttr.__new__(_ArrayAttr)
        attr.__dict__.update(
            name=name,
            type=type,
            _array=array,
            doc_string=doc_string,
            ref_attr_name=ref_attr_name,
            extras=extras,
        )
        return attr

    #: The elements as a read-only numpy array while the attribute holds them so (an
    #: of_array Attr whose ``value`` was never read, so never changed); else None. (A class
    #: attribute here: only an of_array Attr's class computes it.)
    array = None  # (not annotated: not a dataclass field)

    @property
    def is_ref(self) -> bool:
        return bool(self.ref_attr_name)


class _ArrayAttr(Attr):
    """What :meth:`Attr.of_array` makes: an Attr whose ``value`` is made from its array when
    first read. (A subclass: a class with ``__getattr__`` reads every attribute through the
    slow generic path, and the IR reads Attr fields everywhere.) Equal to an Attr of the same
    fields."""

    def __getattr__(self, name: str) -> Any:
        # (called only for a missing attribute: ``value``, not read yet)
        d = self.__dict__
        if name == "value" and "_array" in d:
            value = d["value"] = _listed(d["type"], d.pop("_array"))
            return value
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def array(self) -> Any:
        d = self.__dict__
        return None if "value" in d else d.get("_array")  # (value set: the array is stale)

    def __eq__(self, other):
        if isinstance(other, Attr):
            return self._values("compare") == other._values("compare")
        return NotImplemented

    __hash__ = None


def _listed(kind: AttrType, array: Any) -> list:
    """An of_array attribute's value: its elements as a list; a STRINGS one's bytes as ``str``
    where valid UTF-8 (the reader's rule)."""
    items = array.tolist()
    if kind != AttrType.STRINGS:
        return items
    try:  # (one C call for the whole list)
        return list(map(bytes.decode, items))
    except UnicodeDecodeError:
        return [_decoded(s) for s in items]


def _decoded(s: bytes) -> str | bytes:
    try:
        return s.decode("utf-8")
    except UnicodeDecodeError:
        return s
