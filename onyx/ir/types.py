"""Types of ONNX values: tensors, sparse tensors, sequences, maps, optionals, opaque.

A shape is a tuple of dims; a dim is an int (known), a str (a symbolic name such as "N") or
None (unknown). ``shape=None`` means the rank itself is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .dtypes import DataType, type_name

Dim = int | str | None


@dataclass(frozen=True)
class Shape:
    dims: tuple[Dim, ...]
    #: Per-dim denotations (e.g. "DATA_BATCH"); None where absent. Kept only for round-trips.
    denotations: tuple[str | None, ...] | None = field(default=None, compare=False)

    def __post_init__(self):
        if type(self.dims) is not tuple:
            object.__setattr__(self, "dims", tuple(self.dims))

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


@dataclass(frozen=True)
class TensorType(Type):
    elem_type: DataType
    shape: Shape | None = None
    denotation: str | None = field(default=None, compare=False)

    def __post_init__(self):
        # (tests first: types are made by the thousand at load and inference)
        if type(self.elem_type) is not DataType:
            object.__setattr__(self, "elem_type", DataType(self.elem_type))
        if self.shape is not None and type(self.shape) is not Shape:
            object.__setattr__(self, "shape", Shape(tuple(self.shape)))

    def __str__(self) -> str:
        return f"tensor({type_name(self.elem_type)})"


@dataclass(frozen=True)
class SparseTensorType(Type):
    elem_type: DataType
    shape: Shape | None = None
    denotation: str | None = field(default=None, compare=False)

    def __post_init__(self):
        # (tests first: types are made by the thousand at load and inference)
        if type(self.elem_type) is not DataType:
            object.__setattr__(self, "elem_type", DataType(self.elem_type))
        if self.shape is not None and type(self.shape) is not Shape:
            object.__setattr__(self, "shape", Shape(tuple(self.shape)))

    def __str__(self) -> str:
        return f"sparse_tensor({type_name(self.elem_type)})"


@dataclass(frozen=True)
class SequenceType(Type):
    elem: Type | None
    denotation: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"seq({self.elem})"


@dataclass(frozen=True)
class MapType(Type):
    key: DataType
    value: Type | None
    denotation: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"map({type_name(self.key)},{self.value})"


@dataclass(frozen=True)
class OptionalType(Type):
    elem: Type | None
    denotation: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"optional({self.elem})"


@dataclass(frozen=True)
class OpaqueType(Type):
    domain: str = ""
    name: str = ""
    denotation: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"opaque({self.domain},{self.name})"
