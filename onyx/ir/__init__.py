"""The in-memory model: Model, Graph, Node, Value, Attr, Tensor, types and element types."""

from .attr import Attr, AttrType
from .dtypes import DataType, from_numpy, to_numpy
from .graph import Function, Graph, Model, Node, Value, captured_values, inputs_with_captures
from .opsets import STANDARD_DOMAINS, canonical_domain, opset_for
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
    "STANDARD_DOMAINS",
    "Value",
    "canonical_domain",
    "captured_values",
    "inputs_with_captures",
    "opset_for",
    "from_numpy",
    "to_numpy",
]
