"""The in-memory model: Model, Graph, Node, Value, Attr, Tensor, types and element types."""

from .attr import Attr, AttrType
from .dtypes import DataType, from_numpy, to_numpy
from .graph import Function, Graph, Model, Node, Value, captured_values
from .tensor import ExternalData, SparseTensor, Tensor
from .types import (
    MapType,
    OpaqueType,
    OptionalType,
    SequenceType,
    Shape,
    SparseTensorType,
    TensorType,
    Type,
)

__all__ = [
    "Attr",
    "AttrType",
    "DataType",
    "ExternalData",
    "Function",
    "Graph",
    "MapType",
    "Model",
    "Node",
    "OpaqueType",
    "OptionalType",
    "SequenceType",
    "Shape",
    "SparseTensor",
    "SparseTensorType",
    "Tensor",
    "TensorType",
    "Type",
    "Value",
    "captured_values",
    "from_numpy",
    "to_numpy",
]
