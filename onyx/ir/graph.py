"""The graph: Values connected by Nodes, with explicit producer/use relations.

A Value knows the Node that produces it (``producer``, with its output ``index``) and every use
(``(node, input_index)`` pairs). Graph inputs and initializers are Values without a producer.
A subgraph (If/Loop/Scan body) is a Graph whose nodes may use Values of enclosing graphs: the
very same Value objects, so every use of an outer Value is visible from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .attr import Attr, AttrType
from .opsets import opset_for
from .tensor import Tensor
from .types import Type

#: Attribute types read where every node's attributes are walked, as module constants:
#: ``AttrType.GRAPH`` goes through the enum class's ``__getattr__`` hook (Python 3.11's
#: EnumType defines one), some 0.25 us a read, and a session's creation asked each attribute
#: of each node about subgraphs several times (a fifth of a small model's creation, all told,
#: with the checker's, the reader's and the plan's reads).
_GRAPH, _GRAPHS = AttrType.GRAPH, AttrType.GRAPHS


class Value:
    """A named edge of the graph: a graph input, an initializer or a node output."""

    __slots__ = (
        "name",
        "type",
        "producer",
        "index",
        "_uses",
        "const_value",
        "doc_string",
        "metadata_props",
        "extras",
    )

    def __init__(self, name: str = "", type: Type | None = None, const_value: Tensor | None = None):
        self.name = name
        self.type = type
        self.producer: Node | None = None
        self.index: int | None = None
        #: (node, input index) -> None: ordered like a list, removed from in O(1).
        self._uses: dict[tuple[Node, int], None] = {}
        #: The initializer's data when this Value is an initializer.
        self.const_value = const_value
        self.doc_string = ""
        self.metadata_props: dict[str, str] = {}
        self.extras: Any = None

    def uses(self) -> list[tuple[Node, int]]:
        return list(self._uses)

    def iter_uses(self) -> Iterator[tuple[Node, int]]:
        """The uses without a copy (do not change them while iterating)."""
        return iter(self._uses)

    def has_uses(self) -> bool:
        return bool(self._uses)

    def use_count(self) -> int:
        return len(self._uses)

    def only_use(self) -> tuple[Node, int] | None:
        """The single use (node, input index), or None when there are none or several."""
        if len(self._uses) != 1:
            return None
        return next(iter(self._uses))

    def consumers(self) -> list[Node]:
        seen: dict[int, Node] = {}
        for node, _ in self._uses:
            seen.setdefault(id(node), node)
        return list(seen.values())

    def replace_all_uses_with(self, other: Value) -> None:
        for node, i in list(self._uses):
            node.set_input(i, other)

    @property
    def shape(self):
        return getattr(self.type, "shape", None)

    @property
    def dtype(self):
        return getattr(self.type, "elem_type", None)

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.type})"


def _as_attrs(attributes) -> dict[str, Attr]:
    if attributes is None:
        return {}
    if isinstance(attributes, dict):
        items = [
            v if isinstance(v, Attr) else Attr(k, infer_attr_type(v), _wrap_attr_value(v))
            for k, v in attributes.items()
        ]
    else:
        items = list(attributes)
    return {a.name: a for a in items}


def _wrap_attr_value(v):
    if isinstance(v, np.ndarray):
        return Tensor(v)
    if isinstance(v, tuple):
        return list(v)
    return v


class Node:
    """One operator application."""

    # (slots: a model has tens of thousands of nodes, made at load and freed together)
    __slots__ = (
        "op_type",
        "domain",
        "name",
        "overload",
        "doc_string",
        "metadata_props",
        "extras",
        "graph",
        "attributes",
        "_prev",
        "_next",
        "_inputs",
        "_outputs",
    )

    def __init__(
        self,
        op_type: str,
        inputs: Sequence[Value | None] = (),
        outputs: int | Sequence[str | Value] = 1,
        attributes: dict[str, Any] | Iterable[Attr] | None = None,
        domain: str = "",
        name: str = "",
        overload: str = "",
    ):
        self.op_type = op_type
        self.domain = domain
        self.name = name
        self.overload = overload
        self.doc_string = ""
        self.metadata_props: dict[str, str] = {}
        self.extras: Any = None
        self.graph: Graph | None = None
        # neighbours in the graph's node order (a linked list: O(1) inserts and removals)
        self._prev: Node | None = None
        self._next: Node | None = None
        self.attributes: dict[str, Attr] = _as_attrs(attributes) if attributes else {}
        self._inputs: list[Value | None] = list(inputs)
        for i, v in enumerate(self._inputs):
            if v is not None:
                v._uses[(self, i)] = None
        if isinstance(outputs, int):
            outputs = [""] * outputs
        self._outputs: list[Value] = []
        for i, value in enumerate(outputs):
            if type(value) is not Value:
                value = value if isinstance(value, Value) else Value(value)
            value.producer = self
            value.index = i
            self._outputs.append(value)

    # -- inputs / outputs ---------------------------------------------------------------------
    @property
    def inputs(self) -> tuple[Value | None, ...]:
        return tuple(self._inputs)

    @property
    def outputs(self) -> tuple[Value, ...]:
        return tuple(self._outputs)

    def append_input(self, value: Value | None) -> None:
        self._inputs.append(value)
        if value is not None:
            value._uses[(self, len(self._inputs) - 1)] = None

    def set_input(self, i: int, value: Value | None) -> None:
        old = self._inputs[i]
        if old is not None:
            del old._uses[(self, i)]
        self._inputs[i] = value
        if value is not None:
            value._uses[(self, i)] = None

    def set_inputs(self, inputs: Sequence[Value | None]) -> None:
        """Replace every input at once (the count may change: an input added or dropped)."""
        self.detach()
        self._inputs = []
        for v in inputs:
            self.append_input(v)

    def detach(self) -> None:
        """Drop this node's uses of its inputs (when it leaves the graph)."""
        for i, v in enumerate(self._inputs):
            if v is not None:
                v._uses.pop((self, i), None)

    def take_over_outputs(self, other: Node) -> None:
        """Make ``other``'s outputs this node's, position by position (the same Values, so
        their readers and names stay); this node's own outputs there are dropped."""
        for i, v in enumerate(other._outputs):
            if i < len(self._outputs):
                self._outputs[i].producer = None
                v.producer, v.index = self, i
                self._outputs[i] = v

    # -- attributes ---------------------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        a = self.attributes.get(name)
        return default if a is None else a.value

    def set_attr(self, name: str, value: Any, type: AttrType | None = None) -> None:
        value = _wrap_attr_value(value)
        self.attributes[name] = Attr(name, type or infer_attr_type(value), value)

    def attributes_have_refs(self) -> bool:
        """Whether any attribute refers to an enclosing function's attribute."""
        # (a loop over the field, not any() of a generator over the property: asked of each
        # conv a fusion or the layout pass meets, and of every node the checker reads)
        for a in self.attributes.values():
            if a.ref_attr_name:
                return True
        return False

    def has_subgraphs(self) -> bool:
        """Whether :meth:`subgraphs` yields any: asked of every node by the passes and the
        reader, where a generator made per node only to be asked once cost more than its test."""
        for a in self.attributes.values():
            kind = a.type
            if (kind == _GRAPH and a.value is not None) or (kind == _GRAPHS and a.value):
                return True
        return False

    def subgraphs(self) -> Iterator[Graph]:
        for a in self.attributes.values():
            kind = a.type
            if kind == _GRAPH:
                if a.value is not None:
                    yield a.value
            elif kind == _GRAPHS:
                yield from a.value or []

    def __repr__(self) -> str:
        dom = f"{self.domain}::" if self.domain else ""
        return f"Node({dom}{self.op_type}, name={self.name!r})"


class Graph:
    """A list of nodes in execution order, with its inputs, outputs and initializers."""

    def __init__(
        self,
        inputs: Sequence[Value] = (),
        outputs: Sequence[Value] = (),
        nodes: Iterable[Node] = (),
        initializers: Iterable[Value] = (),
        name: str = "",
    ):
        self.name = name
        self.doc_string = ""
        self.metadata_props: dict[str, str] = {}
        self.inputs: list[Value] = list(inputs)
        self.outputs: list[Value] = list(outputs)
        self.initializers: dict[str, Value] = {v.name: v for v in initializers}
        #: Values with a declared type that are neither inputs nor outputs, in file order.
        self.value_info: list[Value] = []
        #: Sparse initializers (ir.SparseTensor), kept as they are.
        self.sparse_initializers: list[Any] = []
        self.extras: Any = None
        # the nodes as a linked list, and its order as a list made on demand (a pass that
        # iterates while it edits keeps the order it started with)
        self._head: Node | None = None
        self._tail: Node | None = None
        self._count = 0
        self._order: list[Node] | None = []
        #: When a list, every node :meth:`remove` takes out is appended to it (the optimizer
        #: unlinks them when it is done: see optimizer._unlink_removed).
        self.removed: list[Node] | None = None
        for n in nodes:
            self.append(n)

    # -- nodes --------------------------------------------------------------------------------
    @property
    def _nodes(self) -> list[Node]:
        order = self._order
        if order is None:
            order = []
            node = self._head
            while node is not None:
                order.append(node)
                node = node._next
            self._order = order
        return order

    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(self._nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return self._count

    def _link(self, node: Node, prev: Node | None, nxt: Node | None) -> Node:
        if node.graph is not None:
            raise ValueError(f"{node} is already in graph {node.graph.name!r}")
        node.graph, node._prev, node._next = self, prev, nxt
        if prev is None:
            self._head = node
        else:
            prev._next = node
        if nxt is None:
            self._tail = node
        else:
            nxt._prev = node
        self._count += 1
        self._order = None
        return node

    def _anchor(self, anchor: Node) -> Node:
        if anchor.graph is not self:
            raise ValueError(f"{anchor} is not in graph {self.name!r}")
        return anchor

    def append(self, node: Node) -> Node:
        return self._link(node, self._tail, None)

    def insert_before(self, anchor: Node, node: Node) -> Node:
        return self._link(node, self._anchor(anchor)._prev, anchor)

    def insert_after(self, anchor: Node, node: Node) -> Node:
        return self._link(node, self._anchor(anchor), anchor._next)

    def remove(self, node: Node, safe: bool = True) -> None:
        """Take ``node`` out; with ``safe``, refuse if any output is still used or is an output."""
        if node.graph is not self:
            raise ValueError(f"{node} is not in graph {self.name!r}")
        if safe:
            outs = {id(v) for v in self.outputs}
            for v in node.outputs:
                if v._uses or id(v) in outs:
                    raise ValueError(f"cannot remove {node}: its output {v.name!r} is still used")
        node.detach()
        prev, nxt = node._prev, node._next
        if prev is None:
            self._head = nxt
        else:
            prev._next = nxt
        if nxt is None:
            self._tail = prev
        else:
            nxt._prev = prev
        node.graph = node._prev = node._next = None
        self._count -= 1
        self._order = None
        if self.removed is not None:
            self.removed.append(node)

    def all_nodes(self) -> Iterator[Node]:
        """Every node, including those of subgraphs (depth first)."""
        for node in self._nodes:
            yield node
            for g in node.subgraphs():
                yield from g.all_nodes()

    def dismantle(self) -> None:
        """Empty this graph, unlinking its nodes (and those of its subgraphs) from their Values
        and from each other.

        For a graph about to be dropped: nodes and Values refer to each other, so only the
        cyclic garbage collector could free them, and it traverses a big graph (with the rest
        of the heap) several times first; unlinked, reference counting frees them at once
        (most during this walk, while they are still in the CPU's caches)."""
        node, self._head, self._tail, self._order, self._count = self._head, None, None, [], 0
        while node is not None:
            if node.attributes:
                for g in node.subgraphs():
                    g.dismantle()
            nxt = node._next
            node.detach()
            node._inputs = []
            node._outputs = []
            node.graph = node._prev = node._next = None
            if nxt is not None:
                nxt._prev = None
            node = nxt

    # -- values -------------------------------------------------------------------------------
    def add_initializer(self, value: Value) -> Value:
        self.initializers[value.name] = value
        return value

    def values(self) -> Iterator[Value]:
        """Every Value defined in this graph (inputs, initializers, node outputs)."""
        yield from self.inputs
        inputs = {id(v) for v in self.inputs}  # (a list scan per initializer is quadratic)
        yield from (v for v in self.initializers.values() if id(v) not in inputs)
        for n in self._nodes:
            yield from n.outputs

    def in_topological_order(self) -> bool:
        """Whether every node comes after the producers (in this graph) of its direct inputs
        (a node reading its own output, a cycle the checker reports, is not counted here)."""
        seen: set[int] = set()
        for n in self._nodes:
            for v in n._inputs:
                p = None if v is None else v.producer
                if p is not None and p is not n and id(p) not in seen and p.graph is self:
                    return False
            seen.add(id(n))
        return True

    def topological_sort(self) -> None:
        """Order nodes so every node comes after the producers of its inputs (stable).

        Uses inside subgraphs count: a node whose subgraph reads a Value comes after its producer.
        """
        position = {id(n): i for i, n in enumerate(self._nodes)}
        deps: dict[int, set[int]] = {}
        for n in self._nodes:
            needed: set[int] = set()
            for v in inputs_with_captures(n):
                p = v.producer
                if p is not None and id(p) in position and p is not n:
                    needed.add(id(p))
            deps[id(n)] = needed
        users: dict[int, list[Node]] = {id(n): [] for n in self._nodes}
        for n in self._nodes:
            for d in deps[id(n)]:
                users[d].append(n)
        pending = {k: len(v) for k, v in deps.items()}
        import heapq

        ready = [(position[id(n)], n) for n in self._nodes if pending[id(n)] == 0]
        heapq.heapify(ready)
        order: list[Node] = []
        while ready:
            _, n = heapq.heappop(ready)
            order.append(n)
            for u in users[id(n)]:
                pending[id(u)] -= 1
                if pending[id(u)] == 0:
                    heapq.heappush(ready, (position[id(u)], u))
        if len(order) != len(self._nodes):
            stuck = [n for n in self._nodes if pending[id(n)] > 0][:3]
            raise ValueError(f"graph {self.name!r} has a cycle through {stuck}")
        prev = None
        for n in order:
            n._prev = prev
            if prev is None:
                self._head = n
            else:
                prev._next = n
            prev = n
        if prev is not None:
            prev._next = None
        self._tail = prev
        self._order = order

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {self._count} nodes)"


def inputs_with_captures(node: Node) -> Iterator[Value]:
    """A node's inputs plus the outer Values its subgraphs read."""
    for v in node.inputs:
        if v is not None:
            yield v
    for g in node.subgraphs():
        yield from captured_values(g)


#: (the name it had before it was public)
_inputs_with_captures = inputs_with_captures


def captured_values(graph: Graph) -> list[Value]:
    """Values a graph (and its subgraphs) uses but does not define: its outer-scope captures."""
    defined: set[int] = set()
    captured: dict[int, Value] = {}
    _visit_captures(graph, defined, captured)
    # a value used before its (later) definition inside the graph is not a capture
    return [v for k, v in captured.items() if k not in defined]


def _visit_captures(g: Graph, defined: set[int], captured: dict[int, Value]) -> None:
    """(A module function, not a closure: a closure that calls itself is a cycle, its cells
    and function, left to the cyclic collector at every call; a plan asks per graph.)"""
    defined.update(id(v) for v in g.inputs)
    defined.update(id(v) for v in g.initializers.values())
    for n in g._nodes:
        for v in n.inputs:
            if v is not None and id(v) not in defined:
                captured.setdefault(id(v), v)
        for sub in n.subgraphs():
            _visit_captures(sub, defined, captured)
        defined.update(id(v) for v in n.outputs)


#: (module constants: see _GRAPH; a pass that sets attributes infers each one's type)
_INT, _FLOAT, _STRING, _FLOATS = AttrType.INT, AttrType.FLOAT, AttrType.STRING, AttrType.FLOATS
_TENSOR, _TYPE_PROTO = AttrType.TENSOR, AttrType.TYPE_PROTO
_PLURAL = {
    AttrType.INT: AttrType.INTS,
    AttrType.FLOAT: AttrType.FLOATS,
    AttrType.STRING: AttrType.STRINGS,
    AttrType.TENSOR: AttrType.TENSORS,
    AttrType.GRAPH: AttrType.GRAPHS,
    AttrType.TYPE_PROTO: AttrType.TYPE_PROTOS,
}


def infer_attr_type(value: Any) -> AttrType:
    """The attribute type of a plain Python value (as onnx.helper.make_attribute would choose)."""
    if isinstance(value, (bool, int, np.integer)):
        return _INT
    if isinstance(value, (float, np.floating)):
        return _FLOAT
    if isinstance(value, (str, bytes)):
        return _STRING
    if isinstance(value, (Tensor, np.ndarray)):
        return _TENSOR
    if isinstance(value, Graph):
        return _GRAPH
    if isinstance(value, Type):
        return _TYPE_PROTO
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("cannot infer the type of an empty attribute list")
        single = infer_attr_type(value[0])
        if single == _INT and any(isinstance(v, float) for v in value):
            return _FLOATS
        return _PLURAL[single]
    raise TypeError(f"no attribute type for {type(value).__name__}")


class Function:
    """A model-local function: a named graph with attribute parameters."""

    def __init__(
        self,
        domain: str,
        name: str,
        graph: Graph,
        attributes: Sequence[str] = (),
        attribute_defaults: Iterable[Attr] = (),
        opset_imports: dict[str, int] | None = None,
        overload: str = "",
    ):
        self.domain = domain
        self.name = name
        self.overload = overload
        self.graph = graph
        #: Attribute names without defaults (FunctionProto.attribute), in order.
        self.attributes: list[str] = list(attributes)
        #: Attributes with defaults (FunctionProto.attribute_proto), in order.
        self.attribute_defaults: list[Attr] = list(attribute_defaults)
        self.opset_imports: dict[str, int] = dict(opset_imports or {})
        self.doc_string = ""
        self.metadata_props: dict[str, str] = {}
        self.extras: Any = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.domain, self.name, self.overload)

    def __repr__(self) -> str:
        return f"Function({self.domain}::{self.name})"


class Model:
    """A model: a main graph, the opsets it imports, local functions and metadata."""

    def __init__(
        self,
        graph: Graph,
        opset_imports: dict[str, int] | None = None,
        ir_version: int = 10,
        producer_name: str = "onyx",
        producer_version: str = "",
        functions: Iterable[Function] = (),
    ):
        self._graph = graph
        #: A zero-argument callable that builds the graph on first access (set by serde so that
        #: loading and re-saving an unedited model never converts its nodes).
        self._graph_source = None
        self.ir_version = ir_version
        self.opset_imports: dict[str, int] = dict(opset_imports if opset_imports else {"": 21})
        self.producer_name = producer_name
        self.producer_version = producer_version
        self.domain = ""
        self.model_version = 0
        self.doc_string = ""
        self.metadata_props: dict[str, str] = {}
        self.functions: dict[tuple[str, str, str], Function] = {f.key: f for f in functions}
        #: Where the model was loaded from (resolves external data); None for in-memory models.
        self.base_dir: str | None = None
        self.extras: Any = None

    @property
    def graph(self) -> Graph:
        if self._graph is None and self._graph_source is not None:
            self._graph = self._graph_source()
            self._graph_source = None
        return self._graph

    @graph.setter
    def graph(self, graph: Graph) -> None:
        self._graph = graph
        self._graph_source = None

    def set_graph_source(self, source) -> None:
        """Build the graph with ``source()`` on first access (serde: loading and re-saving an
        unedited model never converts its nodes)."""
        self._graph, self._graph_source = None, source

    @property
    def graph_source(self):
        """What builds the graph on first access, None once it is built (or set directly)."""
        return self._graph_source

    def graph_is_loaded(self) -> bool:
        """False while the graph read from a file has not been built yet (nobody asked for it)."""
        return self._graph_source is None

    def opset(self, domain: str = "") -> int | None:
        return opset_for(self.opset_imports, domain)

    def __repr__(self) -> str:
        return (
            f"Model(ir_version={self.ir_version}, opsets={self.opset_imports}, graph={self._graph})"
        )
