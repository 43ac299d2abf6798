"""Types of ONNX values: tensors, sparse tensors, sequences, maps, optionals, opaque.

A shape is a tuple of dims; a dim is an int (known), a str (a symbolic name such as "N") or
None (unknown). ``shape=None`` means the rank itself is unknown.
"""

from __future__ import annotations

from dataclasses import field

from .dtypes import DataType, type_name
from .frozen import FrozenValue, lazy_fields

Dim = int | str | None

# The types are frozen values: equal and hashed by their compared fields, as
# @dataclass(frozen=True) makes them, with the methods written out (FrozenValue, frozen.py):
# dataclass compiled them each time the module was imported.


@lazy_fields
class Shape(FrozenValue):
    """The dims of a tensor type."""

    dims: tuple[Dim, ...]
    #: Per-dim denotations (e.g. "DATA_BATCH"); None where absent. Kept only for round-trips.
    denotations: tuple[str | None, ...] | None = field(default=None, compare=False)

    def __init__(self, dims: tuple[Dim, ...], denotations: tuple | None = None):
        if type(dims) is not tuple:
            dims = tuple(dims)
        self.__dict__.update(dims=dims, denotations=denotations)

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return self.dims == other.dims
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.dims,))

    @property
    def rank(self) -> int:
        return len(self.dims)

    def __iter__(self):
        return iter(self.dims)

    def __len__(self) -> int:
        return len(self.dims)

    def __getitem__(self, i):
        return self.dims[i]

    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.dims)

    def __str__(self) -> str:
        return "[" + ",".join("?" if d is None else str(d) for d in self.dims) + "]"


def as_shape(shape) -> Shape | None:
    if shape is None or isinstance(shape, Shape):
        return shape
    return Shape(tuple(shape))


class Type:
    """Base of every value type. ``denotation`` is the TypeProto's optional denotation."""

    denotation: str | None


class _ElementsOfShape(Type, FrozenValue):
    """What a tensor type and a sparse tensor type share: an element type and a shape, the
    two fields that make them equal (their dataclass fields are declared by each class)."""

    elem_type: DataType
    shape: Shape | None

    def __init__(self, elem_type: DataType, shape: Shape | None = None, denotation=None):
        # (tests first: types are made by the thousand at load and inference)
        if type(elem_type) is not DataType:
            elem_type = DataType(elem_type)
        if shape is not None and type(shape) is not Shape:
            shape = Shape(tuple(shape))
        self.__dict__.update(elem_type=elem_type, shape=shape, denotation=denotation)

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return self.elem_type == other.elem_type and self.shape == other.shape
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.elem_type, self.shape))


@lazy_fields
class TensorType(_ElementsOfShape):
    """A tensor's type: its element type and shape (None: rank unknown)."""

    elem_type: DataType
    shape: Shape | None = None
    denotation: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"tensor({type_name(self.elem_type)})"


@lazy_fields
class SparseTensorType(_ElementsOfShape):
    """A sparse tensor's type: its element type and shape (None: rank unknown)."""

    elem_type: DataType
    shape: Shape | None = None
    denotation: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"sparse_tensor({type_name(self.elem_type)})"


@lazy_fields
class SequenceType(Type, FrozenValue):
    """A sequence of values of type ``elem`` (None: unknown)."""

    elem: Type | None
    denotation: str | None = field(default=None, compare=False)

    def __init__(self, elem: Type | None, denotation: str | None = None):
        self._set(elem=elem, denotation=denotation)

    def __str__(self) -> str:
        return f"seq({self.elem})"


@lazy_fields
class MapType(Type, FrozenValue):
    """A map from keys of element type ``key`` to values of type ``value`` (None: unknown)."""

    key: DataType
    value: Type | None
    denotation: str | None = field(default=None, compare=False)

    def __init__(self, key: DataType, value: Type | None, denotation: str | None = None):
        self._set(key=key, value=value, denotation=denotation)

    def __str__(self) -> str:
        return f"map({type_name(self.key)},{self.value})"


@lazy_fields
class OptionalType(Type, FrozenValue):
    """An optional value of type ``elem`` (None: unknown)."""

    elem: Type | None
    denotation: str | None = field(default=None, compare=False)

    def __init__(self, elem: Type | None, denotation: str | None = None):
        self._set(elem=elem, denotation=denotation)

    def __str__(self) -> str:
        return f"optional({self.elem})"


@lazy_fields
class OpaqueType(Type, FrozenValue):
    """An opaque type, named by ``domain`` and ``name``."""

    domain: str = ""
    name: str = ""
    denotation: str | None = field(default=None, compare=False)

    def __init__(self, domain: str = "", name: str = "", denotation: str | None = None):
        self._set(domain=domain, name=name, denotation=denotation)

    def __str__(self) -> str:
        return f"opaque({self.domain},{self.name})"
