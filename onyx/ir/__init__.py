"""The in-memory model: Model, Graph, Node, Value, Attr, Tensor, types and element types."""

from .dtypes import DataType, from_numpy, to_numpy

__all__ = ["DataType", "from_numpy", "to_numpy"]
