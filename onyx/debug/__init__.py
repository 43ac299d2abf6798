"""Debugging tools: compare a model across runtimes, find the first diverging node, reduce a
failing model to the smallest subgraph that still fails (see docs/debugging.md)."""

from .compare import NodeComparison, OutputComparison, Report, compare, make_inputs
from .reduce import ReduceResult, reduce

__all__ = [
    "NodeComparison",
    "OutputComparison",
    "ReduceResult",
    "Report",
    "compare",
    "make_inputs",
    "reduce",
]
