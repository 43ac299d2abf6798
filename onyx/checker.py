"""The model checker: every rule of the ONNX standard that a model can break, all reported at once.

    onyx.check(model)             # raises onyx.ValidationError listing every problem
    onyx.check("model.onnx", full=True)   # plus strict shape/type inference

Each problem names its rule, the graph and the node it was found in (``Problem``); the
exception's ``problems`` holds them as data.
"""

from __future__ import annotations

import math
import os
from collections import ChainMap

from . import defs
from .errors import FormatError, ValidationError
from .ir import (
    AttrType,
    DataType,
    Function,
    Graph,
    MapType,
    Model,
    Node,
    OptionalType,
    SequenceType,
    SparseTensorType,
    Tensor,
    TensorType,
    Value,
)
from .ir.dtypes import bit_width, type_name
from .ir.frozen import FrozenValue, lazy_fields
from .ir.opsets import canonical_domain, opset_for
from .ir.tensor import wire_size
from .serde.model_io import read_file
from .utils import gc_paused

__all__ = ["MAX_IR_VERSION", "Problem", "check", "problems", "type_string"]

#: The newest IR version this checker knows (onnx 1.23's IR_VERSION).
MAX_IR_VERSION = 14

# The IR version that introduced a feature (onnx/IR.md history); a model must be at least that.
_IR_SINCE = {
    "opset_import": 3,
    "sparse_tensor": 6,
    "local_functions": 8,
    "optional_type": 8,
    "float8": 9,
    "int4": 10,
    "float4": 11,
    "float8e8m0": 12,
    "int2": 13,
}
_DTYPE_FEATURE = {
    DataType.FLOAT8E4M3FN: "float8",
    DataType.FLOAT8E4M3FNUZ: "float8",
    DataType.FLOAT8E5M2: "float8",
    DataType.FLOAT8E5M2FNUZ: "float8",
    DataType.INT4: "int4",
    DataType.UINT4: "int4",
    DataType.FLOAT4E2M1: "float4",
    DataType.FLOAT8E8M0: "float8e8m0",
    DataType.INT2: "int2",
    DataType.UINT2: "int2",
}


# (FrozenValue: what frozen=True gives, without compiling methods at every import)
@lazy_fields
class Problem(FrozenValue):
    """One finding of the checker: its rule, what is wrong, and where (graph, node)."""

    rule: str  # a short identifier, e.g. "ssa", "undefined-input", "attribute-type"
    message: str
    graph: str = ""
    node: str = ""

    def __init__(self, rule: str, message: str, graph: str = "", node: str = ""):
        self._set(rule=rule, message=message, graph=graph, node=node)

    def __str__(self) -> str:
        where = []
        if self.graph:
            where.append(f"graph {self.graph!r}")
        if self.node:
            where.append(f"node {self.node}")
        at = f" ({', '.join(where)})" if where else ""
        return f"[{self.rule}]{at} {self.message}"


def type_string(t) -> str | None:
    """The schema spelling of a value type: 'tensor(float)', 'seq(tensor(int64))', ..."""
    if isinstance(t, TensorType):
        return f"tensor({type_name(t.elem_type)})" if t.elem_type else None
    if isinstance(t, SparseTensorType):
        return f"sparse_tensor({type_name(t.elem_type)})" if t.elem_type else None
    if isinstance(t, SequenceType):
        inner = type_string(t.elem)
        return f"seq({inner})" if inner else None
    if isinstance(t, OptionalType):
        inner = type_string(t.elem)
        return f"optional({inner})" if inner else None
    if isinstance(t, MapType):
        inner = type_string(t.value)
        if inner is None:
            return None
        if inner.startswith("tensor("):  # schemas write map values as bare element types
            inner = inner[7:-1]
        return f"map({type_name(t.key)},{inner})"
    return None


def _norm(type_str: str) -> str:
    return type_str.replace(" ", "")


def node_label(node: Node) -> str:
    dom = f"{node.domain}::" if node.domain else ""
    return f"{node.name!r} ({dom}{node.op_type})" if node.name else f"({dom}{node.op_type})"


#: Process-wide memos of the schema rules' verdicts (see _Checker.__init__); the node
#: signatures are dropped past _MEMO_LIMIT (a bound for processes that see endless models).
_CLEAN: set[tuple] = set()
_ALLOWED: dict[tuple, frozenset | None] = {}
_TYPE_STRINGS: dict[int, tuple] = {}
_TYPE_STRINGS_LIMIT = 16_384
#: id(type) -> (the type, the IR version) of the declared types that passed the type rules
#: under that IR version (check_type_features; the entry holds the type: its id stays its).
_TYPES_PASSED: dict[int, tuple] = {}
_MEMO_LIMIT = 100_000
_MISSING = object()
#: In a node's key, between its inputs' part and its outputs' (values_key).
_OUTPUTS_FOLLOW = "outputs"


def _type_string_entry(t) -> tuple:
    """_TYPE_STRINGS's entry for the type ``t``, made (a miss: the memo starts afresh at its
    limit here, where it grows, since one checker of a large model, or a long-lived process's
    checkers, added entries past a limit read only when a checker started)."""
    if len(_TYPE_STRINGS) >= _TYPE_STRINGS_LIMIT:
        _TYPE_STRINGS.clear()
    hit = _TYPE_STRINGS[id(t)] = (t, type_string(t))
    return hit


class _Checker:
    def __init__(self, model: Model):
        self.model = model
        self.problems: list[Problem] = []
        self.ir_version = model.ir_version or 0
        self.functions = {(f.domain, f.name) for f in model.functions.values()}
        # signatures of nodes that passed the schema rules, and the schemas' allowed types: the
        # schemas are fixed, so these hold for every model, and a process shared by many
        # sessions of a model (or of models alike) checks each kind of node once
        if len(_CLEAN) > _MEMO_LIMIT:
            _CLEAN.clear()
        self.clean = _CLEAN
        # id(type) -> (the type, its string): the process's, as the verdicts are (types are
        # immutable, and a model read again reuses its reader's types: serde/reader.py);
        # bounded where it grows (_type_string_entry)
        self.type_strings = _TYPE_STRINGS
        self.allowed = _ALLOWED
        self.real_base: str | None = None

    @staticmethod
    def resolve_domain(domain: str, opsets: dict[str, int]) -> tuple[str, int | None, bool]:
        """A node's domain as (canonical domain, the opset version imported for it, whether the
        standard defines the domain)."""
        domain = canonical_domain(domain)
        return domain, opset_for(opsets, domain), defs.is_known_domain(domain)

    def report(self, rule: str, message: str, graph: str = "", node: Node | None = None):
        self.problems.append(Problem(rule, message, graph, node_label(node) if node else ""))

    def need_ir(self, feature: str, where: str, graph: str = "", node: Node | None = None):
        need = _IR_SINCE[feature]
        if self.ir_version and self.ir_version < need:
            self.report(
                "ir-version-feature",
                f"{where} uses {feature.replace('_', ' ')}, which needs IR version >= {need} "
                f"(model has {self.ir_version})",
                graph,
                node,
            )

    # -- model --------------------------------------------------------------------------------
    def check_model(self) -> None:
        self.check_header()
        m = self.model
        if m.graph is None:
            self.report("graph", "the model has no graph")
            return
        self.check_graph(m.graph, {}, m.opset_imports, top=True)

    def check_header(self) -> None:
        """Everything but the main graph: IR version, opset imports, local functions."""
        m = self.model
        if not m.ir_version:
            self.report("ir-version", "the model's ir_version is not set")
        elif m.ir_version > MAX_IR_VERSION:
            self.report(
                "ir-version",
                f"ir_version {m.ir_version} is newer than the newest known ({MAX_IR_VERSION})",
            )
        self.check_opsets(m.opset_imports, "model")
        for f in m.functions.values():
            self.check_function(f)
        self.check_recursion()

    def check_recursion(self) -> None:
        """Model-local functions must not call themselves, directly or through others: a call
        would expand forever."""
        if not self.functions:
            return  # (no local function: nothing can call itself)
        calls = {
            (f.domain, f.name): {
                key
                for n in f.graph.all_nodes()
                if (key := ("" if n.domain == "ai.onnx" else n.domain, n.op_type)) in self.functions
            }
            for f in self.model.functions.values()
        }
        for key in _on_cycles(calls):
            self.report("function-recursion", f"function {key[0]}::{key[1]} calls itself")

    def check_opsets(self, opsets: dict[str, int], where: str) -> None:
        if self.ir_version >= 3 and not opsets:
            self.report("opset-import", f"{where} imports no opset (required from IR version 3)")
        known = None  # defs.domains(), made once (it is a new dict at every call)
        for domain, version in opsets.items():
            if not isinstance(version, int) or version < 1:
                self.report("opset-import", f"{where}: opset {domain!r} version {version} invalid")
                continue
            if not defs.is_known_domain(domain):
                continue  # custom domains are the producer's business
            if known is None:
                known = defs.domains()
            lo, hi = known[domain if domain != "ai.onnx" else ""]
            if version > hi:
                self.report(
                    "opset-import",
                    f"{where} imports opset {domain or 'ai.onnx'} {version}, "
                    f"newer than the newest supported ({hi})",
                )

    # -- functions ----------------------------------------------------------------------------
    def check_function(self, f: Function) -> None:
        from .checker_rare import check_function  # (rare: a local function)

        check_function(self, f)

    # -- graphs -------------------------------------------------------------------------------
    def check_graph(
        self,
        g: Graph,
        outer: dict[str, Value],
        opsets: dict[str, int],
        *,
        top: bool = False,
        function: Function | None = None,
        label: str = "",
    ) -> None:
        gname = label or g.name
        if not g.name and function is None:
            self.report("graph-name", "a graph has no name", gname)
        scope: dict[str, Value] = {}

        def define(v: Value, what: str, node: Node | None = None) -> None:
            if not v.name:
                if what != "output":
                    self.report("empty-name", f"a {what} has an empty name", gname, node)
                return
            if v.name in scope or v.name in outer:
                self.report(
                    "ssa",
                    f"{v.name!r} is defined more than once (static single assignment)",
                    gname,
                    node,
                )
            scope[v.name] = v

        for v in g.inputs:
            define(v, "graph input")
            if top:
                self.check_value_type(v, gname, "graph input")
        input_names = {v.name for v in g.inputs}
        before_ir4 = self.ir_version and self.ir_version < 4
        for name, v in g.initializers.items():
            t = v.const_value
            if t is not None and not _plainly_valid(t):
                self.check_tensor(t, gname, f"initializer {name!r}")
            if name in input_names:
                continue
            if before_ir4:
                self.report(
                    "initializer-not-input",
                    f"initializer {name!r} is not a graph input (required before IR version 4)",
                    gname,
                )
            if v.name and v.name not in scope and v.name not in outer:
                scope[v.name] = v
            else:
                define(v, "initializer")  # (reports it)
        for sp in g.sparse_initializers:
            self.need_ir("sparse_tensor", "a sparse initializer", gname)
            self.check_sparse(sp, gname)
            v = Value(_sparse_name(sp))
            define(v, "sparse initializer")

        nodes = g.nodes
        later: set[str] | None = None  # names defined anywhere in this graph, made on a miss
        # the names a node sees: this graph's so far, then the enclosing graphs' (a live view:
        # copying the scope per node made checking quadratic in the graph's size)
        visible = ChainMap(scope, outer) if outer else scope
        out_of_order = False
        domains: dict[str, tuple] = {}  # a node's domain -> (canonical, version, known?)
        for node in nodes:
            inputs = node._inputs  # noqa: SLF001 (read only: Node.inputs makes a tuple)
            outputs = node._outputs  # noqa: SLF001
            for v in inputs:
                if v is None or v.name in visible:
                    continue
                if not v.name:
                    self.report("empty-name", "an input has an empty name", gname, node)
                    continue
                if later is None:
                    later = {v.name for n in nodes for v in n.outputs if v.name}
                if v.name in later:
                    out_of_order = True
                    self.report(
                        "topological-order",
                        f"input {v.name!r} is used before the node producing it",
                        gname,
                        node,
                    )
                else:
                    self.report("undefined-input", f"input {v.name!r} is not defined", gname, node)
            resolved = domains.get(node.domain)
            if resolved is None:
                resolved = domains[node.domain] = self.resolve_domain(node.domain, opsets)
            self.check_node(node, inputs, outputs, resolved, gname, visible, opsets, function)
            for v in outputs:
                name = v.name
                if name:
                    if name in scope or name in outer:
                        define(v, "output", node)  # (reports it)
                    scope[name] = v
        if out_of_order:  # onnxruntime sorts such a graph, unless its nodes form a cycle
            self.check_cycles(g, gname)

        for v in g.outputs:
            if not v.name:
                self.report("empty-name", "a graph output has an empty name", gname)
            elif v.name not in scope and v.name not in outer:
                self.report("graph-output", f"graph output {v.name!r} is never produced", gname)
            if top:
                self.check_value_type(v, gname, "graph output")
        for v in g.value_info:
            if not v.name:
                self.report("empty-name", "a value_info entry has an empty name", gname)
            if v.type is None:
                self.report("value-type", f"value_info {v.name!r} has no type", gname)
            else:
                self.check_type_features(v.type, gname, f"value_info {v.name!r}")

    def check_cycles(self, g: Graph, gname: str) -> None:
        producers = {id(v): n for n in g.nodes for v in n.outputs if v.name}
        deps = {
            id(n): {id(p) for v in n.inputs if v is not None and (p := producers.get(id(v)))}
            for n in g.nodes
        }
        on_cycle = _on_cycles(deps)
        for n in g.nodes:
            if id(n) in on_cycle:
                self.report("cycle", "the node is part of a cycle", gname, n)
                return

    def check_value_type(self, v: Value, gname: str, what: str) -> None:
        if v.type is None:
            self.report("value-type", f"{what} {v.name!r} has no type", gname)
            return
        self.check_type_features(v.type, gname, f"{what} {v.name!r}")

    def check_type_features(self, t, gname: str, what: str) -> None:
        """The type rules for a declared type: the verdict is a function of the type and the
        IR version alone, and the types that passed are kept (types are immutable and shared:
        a model read again reuses its reader's, serde/reader.py)."""
        hit = _TYPES_PASSED.get(id(t))
        if hit is not None and hit[0] is t and hit[1] == self.ir_version:
            return
        found = len(self.problems)
        self.type_rules(t, gname, what)
        if len(self.problems) == found:
            if len(_TYPES_PASSED) >= _TYPE_STRINGS_LIMIT:
                _TYPES_PASSED.clear()
            _TYPES_PASSED[id(t)] = (t, self.ir_version)

    def type_rules(self, t, gname: str, what: str) -> None:
        if isinstance(t, TensorType | SparseTensorType):
            if t.shape is not None and any(isinstance(d, int) and d < 0 for d in t.shape.dims):
                # onnxruntime (and onyx's session) run it as a dynamic dim: PaddlePaddle's -1
                self.report("negative-dim", f"{what} has a negative dim {t.shape}", gname)
            if t.elem_type == _UNDEFINED:
                self.report("elem-type", f"{what} has no element type", gname)
            dims = t.shape.dims if t.shape is not None else ()
            if any(isinstance(d, int) and d < 0 for d in dims):
                self.report("negative-dim", f"{what} has a negative dim {list(dims)}", gname)
            if any(isinstance(d, int) and d > _MAX_DIM for d in dims):
                self.report("dim-range", f"{what} has a dim over 2**62 {list(dims)}", gname)
            feature = _DTYPE_FEATURE.get(t.elem_type)
            if feature:
                self.need_ir(feature, what, gname)
            if isinstance(t, SparseTensorType):
                self.need_ir("sparse_tensor", what, gname)
        elif isinstance(t, SequenceType | OptionalType):
            if isinstance(t, OptionalType):
                self.need_ir("optional_type", what, gname)
            if t.elem is not None:
                self.check_type_features(t.elem, gname, what)
        elif isinstance(t, MapType) and t.value is not None:
            self.check_type_features(t.value, gname, what)

    # -- tensors ------------------------------------------------------------------------------
    def check_tensor(self, t: Tensor, gname: str, what: str) -> None:
        if t.dtype == _UNDEFINED:
            self.report("tensor-type", f"{what} has no data type", gname)
            return
        if any(d < 0 for d in t.shape):
            self.report("tensor-dims", f"{what} has negative dims {list(t.shape)}", gname)
            return
        feature = _DTYPE_FEATURE.get(t.dtype)
        if feature:
            self.need_ir(feature, what, gname)
        if t.external is not None:
            self.check_external(t, gname, what)
            return
        raw = getattr(t, "_raw", None)
        if raw is not None and t.dtype != _STRING:
            got = len(memoryview(raw).cast("B"))
            want = wire_size(t.dtype, t.shape)
            if got != want:
                self.report(
                    "tensor-data-size",
                    f"{what}: {got} bytes of data for {t.dtype.name}{list(t.shape)} (needs {want})",
                    gname,
                )
        elif t.loaded_array() is not None:
            if t.loaded_array().size != t.size:
                self.report(
                    "tensor-data-size",
                    f"{what}: {t.loaded_array().size} values for dims {list(t.shape)}",
                    gname,
                )

    def check_external(self, t: Tensor, gname: str, what: str) -> None:
        from .checker_rare import check_external  # (rare: a tensor of external data)

        check_external(self, t, gname, what)

    def check_sparse(self, sp, gname: str, what: str = "") -> None:
        from .checker_rare import check_sparse  # (rare: a sparse tensor)

        check_sparse(self, sp, gname, what)

    # -- nodes --------------------------------------------------------------------------------
    def check_node(
        self,
        node: Node,
        inputs: tuple,
        outputs: tuple,
        resolved: tuple[str, int | None, bool],
        gname: str,
        visible: dict[str, Value],
        opsets: dict[str, int],
        function: Function | None,
    ) -> None:
        """``resolved``: the node's canonical domain, the opset version imported for it and
        whether the standard defines the domain."""
        if not node.op_type:
            self.report("node", "a node has no op_type", gname, node)
            return
        if not inputs and not outputs:
            self.report("node", "a node has neither inputs nor outputs", gname, node)
        attributes = node.attributes
        op = node.op_type
        signature = []  # what the schema rules read of the attributes (the key below)
        for n, a in attributes.items():
            # (most attributes meet no rule: a plain value under a name no rule reads)
            name, kind, ref = a.name, a.type, a.ref_attr_name
            signature.append((n, kind, ref))
            if name in _RULED_ATTRS or kind not in _PLAIN_ATTR_TYPES or ref or not name:
                if ref or not name:
                    self.check_attribute(a, node, gname, visible, opsets, function)
                elif name in _TABLED_ATTRS and kind in _TABLED_KINDS:
                    # (inlined check_tabled: a conv has four such attributes)
                    value = a.value
                    if kind in _LIST_KINDS:
                        if a.array is not None:
                            self.check_attribute(a, node, gname, visible, opsets, function)
                            continue
                        value = tuple(value)
                    if (op, name, kind, value) not in _ATTRS_PASSED:
                        self.check_tabled(a, op, node, gname)
                elif name == "group" and kind == _ATTR_INT:
                    self.check_group(a.value, node, gname)
                elif kind == _ATTR_TENSOR and name not in _RULED_ATTRS:
                    # (a Constant's value: check_attribute's one rule for it, check_tensor,
                    # whose common case _plainly_valid decides)
                    t = a.value
                    if t.__class__ is not Tensor or not _plainly_valid(t):
                        self.check_attribute(a, node, gname, visible, opsets, function)
                else:
                    self.check_attribute(a, node, gname, visible, opsets, function)
        domain, version, known = resolved
        if version is None:
            self.report(
                "opset-import",
                f"no opset imported for domain {domain or 'ai.onnx'!r}",
                gname,
                node,
            )
            return
        if self.functions and (domain, node.op_type) in self.functions:
            self.check_call(node, gname)
            return
        if not known:
            return  # a custom operator: nothing in the standard to check it against
        # Nodes alike in everything the schema rules read pass or fail alike: a model repeats a
        # few kinds of node thousands of times, and each kind is checked once.
        key = (
            domain,
            node.op_type,
            version,
            self.values_key(inputs, outputs),
            tuple(signature),
        )
        if key not in self.clean:
            found = len(self.problems)
            self.check_schema_rules(node, domain, version, gname, function)
            if len(self.problems) == found:
                self.clean.add(key)
        # (an attribute value, which the key leaves out)
        removed = _REMOVED_ATTR_VALUES.get((domain, op)) if op in _REMOVED_OPS else None
        if removed and version >= removed[0] and node.attr(removed[1]) == removed[2]:
            self.report(
                "removed-attribute-value",
                f"{removed[1]}={removed[2]!r} was removed from {node.op_type} at opset "
                f"{removed[0]} (onnxruntime still runs it)",
                gname,
                node,
            )

    def check_tabled(self, a, op: str, node: Node, gname: str) -> None:
        """check_attribute of an attribute whose verdict follows from its op type, name, type
        and value alone (_TABLED_ATTRS): each value that passed is kept in a table, and a
        model's (or a model created again) kernel_shape, strides, pads... are checked once."""
        value = a.value
        if a.type in _LIST_KINDS:
            if a.array is not None:  # (a long list kept as an array: checked, not keyed)
                self.check_attribute(a, node, gname, {}, {}, None)
                return
            value = tuple(value)
        key = (op, a.name, a.type, value)
        if key in _ATTRS_PASSED:
            return
        found = len(self.problems)
        self.check_attribute(a, node, gname, {}, {}, None)
        if len(self.problems) == found:
            if len(_ATTRS_PASSED) >= _MEMO_LIMIT:
                _ATTRS_PASSED.clear()
            _ATTRS_PASSED.add(key)

    def check_group(self, group: int, node: Node, gname: str) -> None:
        """check_attribute's rules for an INT attribute named group (its bound, and whether it
        splits a convolution's channels), without the rules that cannot apply to it."""
        lo, hi, what = _ATTR_BOUNDS["group"]
        if not lo <= group <= hi:
            self.report("attribute-value", f"attribute 'group' = {group}: {what}", gname, node)
        if 1 <= group < 2**31:
            wrong = _group_problem(node, group)
            if wrong:
                self.report("attribute-value", wrong, gname, node)

    def values_key(self, values, outputs=()) -> tuple:
        """What the schema rules read of a node's inputs (``values``) and outputs: which are
        present (named) and their type strings (one call for both: a node's key makes it)."""
        strings = self.type_strings
        key = []
        # (the outputs' part after a marker, where there are outputs: one loop for both)
        for vs in (values, (_OUTPUTS_FOLLOW, *outputs) if outputs else ()):
            for v in vs:
                if v is None or v is _OUTPUTS_FOLLOW:
                    key.append(v)
                    continue
                t = v.type
                if t is None:
                    key.append((v.name != "", None))
                    continue
                hit = strings.get(id(t))
                if hit is None or hit[0] is not t:
                    hit = _type_string_entry(t)
                key.append((v.name != "", hit[1]))
        return tuple(key)

    def type_str(self, t) -> str | None:
        if t is None:
            return None
        hit = self.type_strings.get(id(t))
        if hit is None or hit[0] is not t:
            hit = _type_string_entry(t)
        return hit[1]

    def check_schema_rules(self, node: Node, domain: str, version: int, gname: str, function):
        schema = defs.get_schema(node.op_type, version, domain)
        if schema is None:
            self.report(
                "unknown-op",
                f"no operator {node.op_type} in {domain or 'ai.onnx'} opset {version}",
                gname,
                node,
            )
            return
        if schema.deprecated:
            self.report(
                "deprecated-op",
                f"{node.op_type} is deprecated at {domain or 'ai.onnx'} opset {version}",
                gname,
                node,
            )
            return
        self.check_against_schema(node, schema, gname, function)

    def check_call(self, node: Node, gname: str) -> None:
        from .checker_rare import check_call  # (rare: a call of a local function)

        check_call(self, node, gname)

    def check_against_schema(self, node: Node, schema, gname: str, function) -> None:
        n_in, n_out = len(node.inputs), len(node.outputs)
        while n_out and not node.outputs[n_out - 1].name:
            n_out -= 1  # trailing omitted outputs do not count
        if not schema.min_input <= n_in <= schema.max_input:
            self.report(
                "input-count",
                f"{n_in} inputs, {node.op_type}-{schema.since_version} takes "
                f"{_range(schema.min_input, schema.max_input)}",
                gname,
                node,
            )
        if not schema.min_output <= n_out <= schema.max_output:
            self.report(
                "output-count",
                f"{n_out} outputs, {node.op_type}-{schema.since_version} has "
                f"{_range(schema.min_output, schema.max_output)}",
                gname,
                node,
            )
        for i, p in enumerate(schema.inputs):
            if p.option == "single" and i < n_in and node.inputs[i] is None:
                self.report("missing-input", f"required input {p.name!r} is missing", gname, node)
        if schema.inputs and schema.inputs[-1].option == "variadic":
            # a variadic input's entries are never optional (onnx's checker lets an empty name
            # pass; every kernel then fails on it: Sum, Concat, Loop's carried values...)
            first = len(schema.inputs) - 1
            for i in range(first, n_in):
                if node.inputs[i] is None:
                    self.report(
                        "missing-input",
                        f"entry {i - first} of variadic input {schema.inputs[-1].name!r} is "
                        "omitted ('')",
                        gname,
                        node,
                    )
        for i, p in enumerate(schema.outputs):
            if p.option == "single" and i < n_out and not node.outputs[i].name:
                self.report("missing-output", f"required output {p.name!r} is missing", gname, node)
        # attributes
        for name, a in node.attributes.items():
            spec = schema.attributes.get(name)
            if spec is None:
                self.report(
                    "attribute-name",
                    f"{node.op_type}-{schema.since_version} has no attribute {name!r}",
                    gname,
                    node,
                )
            elif spec.type != AttrType.UNDEFINED and a.type != spec.type:
                self.report(
                    "attribute-type",
                    f"attribute {name!r} is {a.type.name}, the schema says {spec.type.name}",
                    gname,
                    node,
                )
        for name in schema.required_attributes:
            if name not in node.attributes:
                self.report(
                    "attribute-required", f"required attribute {name!r} is missing", gname, node
                )
        self.check_types(node, schema, gname)

    def check_types(self, node: Node, schema, gname: str) -> None:
        """Known value types must be allowed by the constraints, and agree per type parameter."""
        bound: dict[str, str] = {}

        def visit(params, values, what: str) -> None:
            for i, v in enumerate(values):
                if v is None or v.type is None or not v.name:
                    continue
                if not params:
                    return
                p = params[min(i, len(params) - 1)]
                if i >= len(params) and not p.is_variadic:
                    return
                ts = self.type_str(v.type)
                if ts is None:
                    continue
                allowed = self.allowed_types(schema, p.type_str)
                if allowed is not None and _norm(ts) not in allowed:
                    self.report(
                        "type-constraint",
                        f"{what} {v.name!r} is {ts}, not allowed for {p.name!r} ({p.type_str})",
                        gname,
                        node,
                    )
                    continue
                if p.type_str in schema.type_constraints and (p.homogeneous or not p.is_variadic):
                    prev = bound.setdefault(p.type_str, ts)
                    if prev != ts:
                        self.report(
                            "type-mismatch",
                            f"{what} {v.name!r} is {ts} but {p.type_str} is bound to {prev}",
                            gname,
                            node,
                        )

        visit(schema.inputs, node.inputs, "input")
        visit(schema.outputs, node.outputs, "output")

    def allowed_types(self, schema, type_str: str) -> frozenset | None:
        key = (schema.domain, schema.name, schema.since_version, type_str)
        hit = self.allowed.get(key, _MISSING)
        if hit is _MISSING:
            allowed = schema.allowed_types(type_str)
            hit = self.allowed[key] = None if allowed is None else frozenset(map(_norm, allowed))
        return hit

    def check_attribute(self, a, node: Node, gname: str, visible, opsets, function) -> None:
        # (check_node calls this only for the names in _RULED_ATTRS or the types outside
        # _PLAIN_ATTR_TYPES: a new rule on another name must add that name there)
        if not a.name:
            self.report("attribute-name", "an attribute has no name", gname, node)
        if a.is_ref:
            if function is None:
                self.report(
                    "attribute-ref",
                    f"attribute {a.name!r} refers to {a.ref_attr_name!r} outside a function",
                    gname,
                    node,
                )
            return
        kind = a.type  # (compared with module constants: see _ATTR_INT)
        if kind == _ATTR_UNDEFINED:
            self.report("attribute-type", f"attribute {a.name!r} has no type", gname, node)
            return
        bound = _ATTR_BOUNDS.get(a.name)
        if bound is not None and kind in _ATTR_INTEGERS:
            lo, hi, what = bound
            values = [a.value] if kind == _ATTR_INT else a.value
            if any(not lo <= v <= hi for v in values):
                self.report(
                    "attribute-value", f"attribute {a.name!r} = {a.value}: {what}", gname, node
                )
        allowed = _ENUMS.get((node.op_type, a.name)) or _ENUMS.get(("", a.name))
        if allowed is not None and kind == _ATTR_STRING and a.value not in allowed:
            self.report(
                "attribute-value",
                f"attribute {a.name!r} = {a.value!r} is not one of {sorted(allowed)}",
                gname,
                node,
            )
        if node.op_type == "Scan" and a.name == "num_scan_inputs" and kind == _ATTR_INT:
            if not 0 < a.value <= len(node.inputs):
                self.report(
                    "attribute-value",
                    f"num_scan_inputs = {a.value}, the node has {len(node.inputs)} inputs",
                    gname,
                    node,
                )
        if a.name == "group" and kind == _ATTR_INT and 1 <= a.value < 2**31:
            wrong = _group_problem(node, a.value)
            if wrong:
                self.report("attribute-value", wrong, gname, node)
        if node.op_type == "Split" and a.name == "num_outputs" and a.value != len(node.outputs):
            self.report(
                "attribute-value",
                f"num_outputs = {a.value}, the node has {len(node.outputs)} outputs",
                gname,
                node,
            )
        if a.name in _DTYPE_ATTRS and kind == _ATTR_INT and not _is_dtype(a.value):
            self.report(
                "attribute-value",
                f"attribute {a.name!r} = {a.value} is no element type",
                gname,
                node,
            )
        if kind in _ATTR_SPARSE:
            self.need_ir("sparse_tensor", f"attribute {a.name!r}", gname, node)
            for sp in a.value if kind == _ATTR_SPARSE_TENSORS else [a.value]:
                if sp is not None and hasattr(sp, "values"):
                    self.check_sparse(sp, gname, f"attribute {a.name!r}")
        if kind == _ATTR_TENSOR and isinstance(a.value, Tensor):
            self.check_tensor(a.value, gname, f"attribute {a.name!r}")
        if kind in _ATTR_GRAPHS:
            graphs = a.value if kind == _ATTR_GRAPHS_TYPE else [a.value]
            for sub in graphs or []:
                if sub is None:
                    self.report(
                        "attribute-value", f"graph attribute {a.name!r} is empty", gname, node
                    )
                    continue
                self.check_graph(sub, visible, opsets, function=function, label=sub.name or a.name)


#: The attribute types check_attribute compares with, as module constants: reading
#: ``AttrType.X`` goes through the enum class's ``__getattr__`` hook (Python 3.11's EnumType
#: defines one), some 0.25 us a read, a dozen of them for each ruled attribute of each node.
_ATTR_UNDEFINED, _ATTR_INT, _ATTR_STRING = AttrType.UNDEFINED, AttrType.INT, AttrType.STRING
_ATTR_TENSOR, _ATTR_SPARSE_TENSORS = AttrType.TENSOR, AttrType.SPARSE_TENSORS
_ATTR_GRAPHS_TYPE = AttrType.GRAPHS
_UNDEFINED, _STRING = DataType.UNDEFINED, DataType.STRING  # (check_tensor's, per tensor)
_ATTR_INTEGERS = (AttrType.INT, AttrType.INTS)
_ATTR_SPARSE = (AttrType.SPARSE_TENSOR, AttrType.SPARSE_TENSORS)
_ATTR_GRAPHS = (AttrType.GRAPH, AttrType.GRAPHS)
#: (domain, op) -> (opset that removed it, attribute, value): values onnxruntime still accepts
_REMOVED_ATTR_VALUES = {
    ("", "Resize"): (13, "coordinate_transformation_mode", "tf_half_pixel_for_nn"),
}
_REMOVED_OPS = frozenset(op for _, op in _REMOVED_ATTR_VALUES)
#: Attributes that count or index elements, with the values that can make sense: a kernel
#: would allocate or loop by them (a dilation near 2**32 overflows a padded plane's size).
_ATTR_BOUNDS = {
    "kernel_shape": (1, 2**31 - 1, "kernel sizes must be 1 to 2**31-1"),
    "dilations": (1, 2**31 - 1, "dilations must be 1 to 2**31-1"),
    "strides": (1, 2**31 - 1, "strides must be 1 to 2**31-1"),
    "pads": (-(2**31), 2**31 - 1, "pads must fit in 32 bits"),
    "axis": (-(2**31), 2**31 - 1, "an axis must fit in 32 bits"),
    "axes": (-(2**31), 2**31 - 1, "an axis must fit in 32 bits"),
    "group": (1, 2**31 - 1, "group must be 1 to 2**31-1"),
}
#: Grouped convolutions by their W input's index: W is (M, C / group, kernel...), a
#: ConvTranspose's (C, M / group, kernel...).
_GROUPED_CONVS = {
    "Conv": 1,
    "ConvInteger": 1,
    "QLinearConv": 3,
    "DeformConv": 1,
    "FusedConv": 1,
    "ConvTranspose": 1,
}


def _known_dims(v) -> tuple | None:
    t = None if v is None else v.type
    if t is None or t.__class__ is not TensorType or t.shape is None:
        return None
    return t.shape.dims


#: conv_geometry.channel_group_problem, once a conv's group is first checked.
_GROUP_RULE: list = [None]


def _group_problem(node: Node, group: int) -> str | None:
    """Why a convolution's ``group`` cannot split its channels as its declared shapes say (X's
    channels, W's output channels), or None: the kernels' own rule (conv_geometry's, a module
    of pure arithmetic), dims a declaration leaves unknown passing (the kernels check them)."""
    w_at = _GROUPED_CONVS.get(node.op_type)
    if w_at is None or len(node.inputs) <= w_at:
        return None
    channel_group_problem = _GROUP_RULE[0]
    if channel_group_problem is None:  # (imported once: an import statement runs at every conv)
        from .runtime.kernels.conv_geometry import channel_group_problem

        _GROUP_RULE[0] = channel_group_problem
    x, w = _known_dims(node.inputs[0]), _known_dims(node.inputs[w_at])
    channels = x[1] if x is not None and len(x) > 2 and isinstance(x[1], int) else None
    if w is None or len(w) < 3 or not all(isinstance(d, int) for d in w[:2]):
        w = None
    return channel_group_problem(channels, w, group, node.op_type == "ConvTranspose")


_REDUCTIONS = frozenset({"none", "add", "mul", "max", "min"})
#: String attributes with a fixed set of values, by (op, attribute); op "" for any op. A
#: kernel would otherwise take an unknown (or byte-flipped) value for its default.
_ENUMS = {
    ("", "auto_pad"): frozenset({"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"}),
    ("Gelu", "approximate"): frozenset({"none", "tanh"}),
    ("Pad", "mode"): frozenset({"constant", "reflect", "edge", "wrap"}),
    ("DepthToSpace", "mode"): frozenset({"DCR", "CRD"}),
    ("Resize", "mode"): frozenset({"nearest", "linear", "cubic"}),
    ("Resize", "nearest_mode"): frozenset(
        {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}
    ),
    ("Resize", "coordinate_transformation_mode"): frozenset(
        {
            "half_pixel",
            "half_pixel_symmetric",
            "pytorch_half_pixel",
            "align_corners",
            "asymmetric",
            "tf_half_pixel_for_nn",
            "tf_crop_and_resize",
        }
    ),
    ("Resize", "keep_aspect_ratio_policy"): frozenset({"stretch", "not_larger", "not_smaller"}),
    ("ScatterElements", "reduction"): _REDUCTIONS,
    ("ScatterND", "reduction"): _REDUCTIONS,
}
#: The largest dim a value type may declare: sizes computed from larger ones overflow int64.
_MAX_DIM = 2**62
#: Attributes that name an element type.
_DTYPE_ATTRS = frozenset({"to", "dtype", "output_dtype"})
#: The names check_attribute has a rule for, and the attribute types whose values it never
#: looks into: any other attribute passes it untouched (check_node skips the call).
_RULED_ATTRS = frozenset(
    {*_ATTR_BOUNDS, *(name for _, name in _ENUMS), *_DTYPE_ATTRS, "num_scan_inputs", "num_outputs"}
)
#: The ruled attributes whose verdict is a function of the node's op type and the attribute's
#: name, type and value (not of the node's inputs or outputs, as a conv's group, Scan's
#: num_scan_inputs and Split's num_outputs are), for the types whose values key a table.
_TABLED_ATTRS = _RULED_ATTRS - {"group", "num_scan_inputs", "num_outputs"}
_LIST_KINDS = frozenset({AttrType.INTS, AttrType.FLOATS, AttrType.STRINGS})
_TABLED_KINDS = frozenset({AttrType.INT, AttrType.FLOAT, AttrType.STRING, *_LIST_KINDS})
#: (op type, name, type, value) of the tabled attributes that passed check_attribute.
_ATTRS_PASSED: set[tuple] = set()
_PLAIN_ATTR_TYPES = frozenset(
    {
        AttrType.FLOAT,
        AttrType.INT,
        AttrType.STRING,
        AttrType.FLOATS,
        AttrType.INTS,
        AttrType.STRINGS,
        AttrType.TYPE_PROTO,
        AttrType.TYPE_PROTOS,
    }
)


#: Bytes per element of the types whose tensors need no IR version and no per-type rule.
_PLAIN_ITEM_BYTES = {
    dt: bit_width(dt) // 8
    for dt in DataType
    if dt not in _DTYPE_FEATURE
    and dt not in (DataType.UNDEFINED, DataType.STRING)
    and bit_width(dt) % 8 == 0
}


def _plainly_valid(t: Tensor) -> bool:
    """Whether ``check_tensor`` would find nothing to report, decided cheaply for the common
    case (wire bytes of the right size, or values already read into an array of the right
    size); False means "look closer", not "invalid"."""
    size = _PLAIN_ITEM_BYTES.get(t.dtype)
    raw = t._raw  # noqa: SLF001 (has_raw_bytes and raw_bytes read it: two calls per tensor)
    if t.external is not None:
        return False
    shape = t.shape
    if raw is None:  # (values read into an array: a converter's typed fields, a string tensor)
        arr = t.loaded_array()
        return (
            arr is not None
            and (size is not None or t.dtype == _STRING)
            and arr.size == math.prod(shape)
            and not (shape and min(shape) < 0)
        )
    return (
        size is not None
        and type(raw) is bytes
        and len(raw) == math.prod(shape) * size
        and not (shape and min(shape) < 0)
    )


def _is_dtype(value: int) -> bool:
    try:
        return DataType(value) != DataType.UNDEFINED
    except ValueError:
        return False


def _on_cycles(edges: dict) -> set:
    """The keys of ``edges`` (key -> keys it depends on) that lie on a cycle or depend on one,
    found by peeling off keys whose dependencies are all resolved (Kahn's algorithm)."""
    pending = {k: {d for d in deps if d in edges} for k, deps in edges.items()}
    users: dict = {}
    for k, deps in pending.items():
        for d in deps:
            users.setdefault(d, []).append(k)
    ready = [k for k, deps in pending.items() if not deps]
    done = set()
    while ready:
        k = ready.pop()
        done.add(k)
        for u in users.get(k, ()):
            pending[u].discard(k)
            if not pending[u]:
                ready.append(u)
    return set(edges) - done


def _sparse_name(sp) -> str:
    values = getattr(sp, "values", None)
    return getattr(sp, "name", "") or getattr(values, "name", "") or ""


def _range(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    return f"{lo} or more" if hi >= 2**31 - 1 else f"{lo} to {hi}"


def _load(model, where: str | None = None) -> Model:
    """The model to check: ``model`` loaded, or the bytes of the file ``where`` parsed (its
    folder is the model's, for the external data's locations)."""
    from .serde import as_model, loads

    # (external data: the checker only needs its locations)
    if where is not None:
        return loads(model, base_dir=os.path.dirname(os.path.abspath(where)), where=where)
    return as_model(model, load_external_data=False, user="the checker")


def _dismantle(m: Model) -> None:
    for g in [m.graph, *(f.graph for f in m.functions.values())]:
        if g is not None:
            g.dismantle()


def _certified(source, where: str | None) -> bool:
    """checker_fast's proof that serialized ``source`` is valid (imported here: a session
    checks the model it built, which the proof does not take, and never needs the module)."""
    from .checker_fast import certify

    return certify(source, _Checker, where or "")


def problems(model, full: bool = False) -> list[Problem]:
    """Every problem of a model (an empty list when it is valid; a file that cannot be read
    at all is one problem, ``format``)."""
    # paused GC: the graph (built lazily from the file), the scopes and the signatures are
    # many linked objects, and the GC's collections would rescan the whole heap over and over
    source, where = model, None
    if isinstance(model, str | os.PathLike):  # read once, for the proof and, if it fails, the load
        where = os.fspath(model)
        source = read_file(where)
    with gc_paused():
        if not full and not isinstance(source, Model) and _certified(source, where):
            return []  # (proven valid without building the IR; see checker_fast)
        try:
            m = _load(source, where)
        except FormatError as e:
            return [Problem("format", str(e))]
        c = _Checker(m)
        c.check_model()
        if m is not model and not (full and not c.problems):
            _dismantle(m)  # read here and dropped here: freed now, not by the cyclic GC later
    if full and not c.problems:
        from .inference import infer_shapes

        try:
            infer_shapes(m, strict=True)
        except ValidationError as e:
            c.problems.extend(
                p if isinstance(p, Problem) else Problem("inference", str(p)) for p in e.problems
            )
    return c.problems


def check(model, full: bool = False) -> None:
    """Validate a model (an ir.Model, a path or serialized bytes).

    Raises ``ValidationError`` listing every problem found. ``full=True`` also runs strict
    shape and type inference, so that inconsistent shapes and types are reported as well.
    """
    found = problems(model, full)
    if found:
        raise ValidationError(found)
