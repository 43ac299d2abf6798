"""Binding: a node and the opsets in force become a :class:`Step`, its kernel ready to call.

This is the one place that chooses a node's kernel and turns its attributes into kernel
arguments. The plan binds every node once per session (and adds the slots the step reads and
writes); constant folding and the lookup-table pass bind the nodes they evaluate at
optimization time and call them with :meth:`Step.call`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import ir
from ..errors import NotImplementedOp, OnyxError
from ..ir.frozen import DataValue, lazy_fields
from .registry import Kernel, lookup
from .values import AS_IS, attr_value


def node_label(node: ir.Node) -> str:
    """How errors name a node: its name and op, or its op alone."""
    dom = f"{node.domain}::" if node.domain not in ir.STANDARD_DOMAINS else ""
    return f"node {node.name!r} ({dom}{node.op_type})" if node.name else f"{dom}{node.op_type} node"


# (repr=False, init=False: what @dataclass would compile at every import, written here; its
# fields made when first asked for: ir/frozen.lazy_fields)
@lazy_fields
class Step:
    """A node bound to what runs it. The slot fields are the plan's (empty outside a plan)."""

    node: ir.Node
    fn: Any
    takes_ctx: bool
    attrs: dict
    n_outputs: int
    outputs_wanted: tuple[bool, ...]
    opset: int
    #: Positional inputs the kernel is called with (the node's, padded with None).
    n_inputs: int = 0
    ins: tuple[int, ...] = ()  # slot per input, -1 for an omitted optional input
    outs: tuple[int, ...] = ()  # slot per output, -1 for an unnamed output
    frees: tuple[int, ...] = ()
    reads: tuple[int, ...] = ()  # slots read, including outer values its subgraphs capture
    uses_frame: bool = False  # runs subgraphs that read this frame's values (If, Loop, ...)

    def __init__(
        self,
        node: ir.Node,
        fn: Any,
        takes_ctx: bool,
        attrs: dict,
        n_outputs: int,
        outputs_wanted: tuple[bool, ...],
        opset: int,
        n_inputs: int = 0,
        ins: tuple[int, ...] = (),
        outs: tuple[int, ...] = (),
        frees: tuple[int, ...] = (),
        reads: tuple[int, ...] = (),
        uses_frame: bool = False,
    ):
        self.node, self.fn, self.takes_ctx, self.attrs = node, fn, takes_ctx, attrs
        self.n_outputs, self.outputs_wanted, self.opset = n_outputs, outputs_wanted, opset
        self.n_inputs, self.ins, self.outs = n_inputs, ins, outs
        self.frees, self.reads, self.uses_frame = frees, reads, uses_frame

    __repr__ = DataValue.__repr__

    def label(self) -> str:
        return node_label(self.node)

    def call(self, args: Sequence[Any], frame: Any = None) -> tuple:
        """Run the kernel on ``args`` (the node's inputs, None for omitted ones); its results as
        a tuple. ``frame``: the plan frame its subgraphs read (None outside a plan)."""
        if len(args) < self.n_inputs:
            args = list(args) + [None] * (self.n_inputs - len(args))
        if self.takes_ctx:
            result = self.fn(StepContext(self, frame), *args, **self.attrs)
        else:
            result = self.fn(*args, **self.attrs)
        return result if type(result) is tuple else (result,)


class StepContext:
    """The KernelContext a kernel gets (see context.py)."""

    __slots__ = ("step", "frame")

    def __init__(self, step: Step, frame: Any):
        self.step, self.frame = step, frame

    @property
    def n_outputs(self) -> int:
        return self.step.n_outputs

    @property
    def outputs_wanted(self) -> tuple[bool, ...]:
        return self.step.outputs_wanted

    @property
    def opset(self) -> int:
        return self.step.opset

    @property
    def node_name(self) -> str:
        return self.step.node.name

    @property
    def op_type(self) -> str:
        return self.step.node.op_type

    def run_graph(self, graph, inputs) -> list:
        return graph.run(list(inputs), self.frame)

    def graph_input_count(self, graph) -> int:
        return len(graph.input_slots)

    def graph_output_count(self, graph) -> int:
        return len(graph.output_slots)

    def graph_output_types(self, graph) -> list:
        return [v.type for v in graph.graph.outputs]


def find_kernel(node: ir.Node, domain: str, version: int) -> Kernel:
    """The kernel that runs ``node`` at opset ``version`` of its domain (raises, naming the
    node, when there is none)."""
    kernel = lookup(node.op_type, domain, version)
    if kernel is None:
        raise no_kernel(node, version)
    return kernel


def no_kernel(node: ir.Node, version: int) -> NotImplementedOp:
    """The error for a node no kernel runs at opset ``version``."""
    return NotImplementedOp(
        f"{node_label(node)}: no kernel for {node.domain or 'ai.onnx'}::{node.op_type} "
        f"at opset version {version}"
    )


def declared_outputs(node: ir.Node) -> tuple[ir.Value, ...]:
    """The node's outputs without the trailing omitted (unnamed) ones."""
    outs = node.outputs
    n = len(outs)
    while n and not outs[n - 1].name:
        n -= 1
    return outs[:n]


_NO_ARRAYS: dict = {}


def _read_only(array: Any) -> Any:
    """``array`` aligned for its dtype (a view of wire bytes may start anywhere) and
    read-only, as every constant a kernel gets (runtime/values.py)."""
    if not array.flags.aligned:
        array = array.copy()
    if array.flags.writeable:
        array.flags.writeable = False
    return array


def bind(
    node: ir.Node,
    opsets: Mapping[str, int],
    *,
    attrs: Mapping[str, ir.Attr] | None = None,
    strict: bool = True,
    compile_graph: Callable | None = None,
    kernel: Kernel | None = None,
) -> Step:
    """``node`` bound to its kernel at the version ``opsets`` import for its domain.

    ``attrs``: the attributes to bind (default the node's; a function call site passes them
    with references resolved). ``strict``: an attribute the kernel does not take is an error
    (else it is dropped). ``compile_graph``: turns a subgraph attribute into what the kernel
    runs. Raises NotImplementedOp (no opset for the domain, no kernel) or OnyxError (an
    attribute or input count the kernel does not take), naming the node.
    """
    domain = ir.canonical_domain(node.domain)
    version = ir.opset_for(opsets, domain)
    if version is None:
        raise NotImplementedOp(
            f"{node_label(node)}: the model imports no opset for domain "
            f"{node.domain or 'ai.onnx'!r}"
        )
    if kernel is None:
        kernel = find_kernel(node, domain, version)
    parsed = {}
    allowed, any_attr = kernel.attributes, kernel.accepts_any_attr
    for name, a in (node.attributes if attrs is None else attrs).items():
        if name not in allowed and not any_attr:
            if strict:
                raise OnyxError(
                    f"{node_label(node)}: unknown attribute {name!r} for "
                    f"{node.op_type} (opset {version})"
                )
            continue
        array = a.array
        if array is not None:  # (rare: a long FLOATS attribute still an array)
            dtype = getattr(kernel.fn, "array_attributes", _NO_ARRAYS).get(name)
            if dtype is not None:
                parsed[name] = _read_only(array.astype(dtype, copy=False))
                continue
        kind = a.type
        # (attr_value's first case inline: most attributes are ints and floats)
        parsed[name] = a.value if kind in AS_IS else attr_value(kind, a.value, compile_graph)
    n_in = len(node.inputs)
    if not kernel.variadic and n_in > kernel.n_positional:
        raise OnyxError(
            f"{node_label(node)}: {n_in} inputs given, {node.op_type} takes at most "
            f"{kernel.n_positional}"
        )
    outs = declared_outputs(node)
    return Step(
        node=node,
        fn=kernel.fn,
        takes_ctx=kernel.takes_ctx,
        attrs=parsed,
        n_outputs=len(outs),
        outputs_wanted=tuple(bool(v.name) for v in outs),
        opset=version,
        n_inputs=n_in if kernel.variadic else kernel.n_positional,
    )
