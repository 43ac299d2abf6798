"""What a kernel may ask of the runtime while it runs (declared as a first parameter ``ctx``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class KernelContext(Protocol):
    #: Number of outputs the node declares (trailing omitted ones are not counted).
    n_outputs: int
    #: For each declared output, whether its name is non-empty (the caller wants it).
    outputs_wanted: tuple[bool, ...]
    #: The opset version in force for the node's domain.
    opset: int
    #: The node's name and op type, for error messages.
    node_name: str
    op_type: str

    def run_graph(self, graph: Any, inputs: Sequence[Any]) -> list[Any]:
        """Run a subgraph attribute (If/Loop/Scan body) with ``inputs`` bound to its formal inputs.

        Values of the enclosing scopes are visible to the subgraph. Returns its outputs in order.
        """
        ...

    def graph_input_count(self, graph: Any) -> int:
        """Number of formal inputs of a subgraph attribute."""
        ...

    def graph_output_count(self, graph: Any) -> int:
        """Number of outputs of a subgraph attribute."""
        ...

    def graph_output_types(self, graph: Any) -> list[Any]:
        """Declared types (onyx.ir types, or None) of a subgraph attribute's outputs."""
        ...
