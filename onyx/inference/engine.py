"""The inference engine: walks a graph in order, applies each op's rule, merges with declared types.

Types live in an environment (``id(Value) -> Type``) while a graph is inferred, so that a local
function body can be inferred once per call site without touching its Values; the main graph's
results are written back onto its Values at the end.

Data propagation: small integer tensors that describe shapes are tracked as ``Data`` (a list of
dims, each an int, a symbol or None) so that Shape -> Gather -> Concat -> Reshape chains give
concrete (or symbolic) output shapes. Fully known constants are numpy arrays.
"""

from __future__ import annotations

import importlib
import itertools
import math
import warnings
from collections.abc import Callable

import numpy as np

from .. import defs
from ..errors import ValidationError
from ..ir import (
    AttrType,
    DataType,
    Graph,
    Model,
    Node,
    OptionalType,
    SequenceType,
    Shape,
    SparseTensorType,
    TensorType,
    canonical_domain,
    inputs_with_captures,
    opset_for,
)
from ..ir.dtypes import BY_NAME
from ..ir.frozen import DataValue, lazy_fields
from . import memo
from . import symbolic as sym

Dim = int | str | None


class _Rules(dict):
    """The shape rules by (domain, op). A rule module is imported at the first lookup of one
    of its ops (``_index.py`` names it), so that a model's inference imports the modules of
    its own ops only; iterating or sizing the table imports them all."""

    def get(self, key, default=None):
        if not dict.__contains__(self, key):
            _load_rules_for(key)
        return dict.get(self, key, default)

    def __contains__(self, key) -> bool:
        if not dict.__contains__(self, key):
            _load_rules_for(key)
        return dict.__contains__(self, key)

    def __missing__(self, key):
        _load_rules_for(key)
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        raise KeyError(key)

    def __iter__(self):
        _load_all_rules()
        return dict.__iter__(self)

    def __len__(self) -> int:
        _load_all_rules()
        return dict.__len__(self)

    def keys(self):
        _load_all_rules()
        return dict.keys(self)

    def values(self):
        _load_all_rules()
        return dict.values(self)

    def items(self):
        _load_all_rules()
        return dict.items(self)


RULES: dict[tuple[str, str], Callable] = _Rules()
_RULE_OF = dict.get


def _load_rules_for(key) -> None:
    from ._index import module_of

    module = module_of(*key) if key.__class__ is tuple and len(key) == 2 else None
    if module is not None and module not in _LOADED:
        importlib.import_module(f"{__package__}.{module}")
        _LOADED.add(module)


#: The rule modules imported so far (by a lookup or by another module's import).
_LOADED: set[str] = set()


def _load_all_rules() -> None:
    from ._index import MODULES

    for module in sorted(set(MODULES.values()) - _LOADED):  # (once: len() and iter() call it)
        importlib.import_module(f"{__package__}.{module}")
        _LOADED.add(module)


def rule(*ops: str, domain: str = ""):
    """Register a shape/type rule for one or more operators (all versions unless it checks)."""

    def deco(fn):
        for op in ops:
            # (one rule per op: a reader finds it by the op's name)
            if dict.__contains__(RULES, (domain, op)):
                raise RuntimeError(f"two shape rules for {domain or 'ai.onnx'}::{op}")
            RULES[(domain, op)] = fn
        return fn

    return deco


#: Functions computing a node's small integer results from known inputs (data propagation),
#: run after its rule: registered with :func:`data_fold` (elementwise.py's shape arithmetic).
DATA_FOLDS: list[Callable] = []
#: fold -> the op types it acts on (None: any), so that a node of another op (a Constant, a
#: Conv: most nodes) calls none of them.
FOLD_OPS: dict[Callable, frozenset | None] = {}


def data_fold(fn: Callable | None = None, *, ops=None):
    """Register ``fn(ctx)`` to run after the rule of every node (of an op type in ``ops``,
    when given: the fold does nothing for any other) when data is propagated."""

    def register(fn: Callable) -> Callable:
        DATA_FOLDS.append(fn)
        FOLD_OPS[fn] = None if ops is None else frozenset(ops)
        return fn

    return register if fn is None else register(fn)


#: Rules cheaper than their memo key (memo.py): an elementwise op whose output is its input's
#: type, a Constant (whose key holds its value's bytes, which the rule only reads). Nodes of
#: these ops are inferred by their rule at every run; what they find is what the memo held.
CHEAP_RULES: set[Callable] = set()


def cheap(fn: Callable) -> Callable:
    """Mark a rule as cheaper than its memo key (see CHEAP_RULES)."""
    CHEAP_RULES.add(fn)
    return fn


class InferenceError(Exception):
    """A rule found the node's inputs inconsistent (an error in strict mode)."""


# (DataValue: what @dataclass gives, without compiling methods at every import)
@lazy_fields
class Data(DataValue):
    """Propagated contents of a 0-D or 1-D integer tensor: dims that may be symbols or None."""

    dims: list
    scalar: bool = False

    def __init__(self, dims: list, scalar: bool = False):
        self.dims = dims
        self.scalar = scalar

    def known(self) -> bool:
        return all(isinstance(d, int) for d in self.dims)


memo.DATA[0] = Data  # (the class of propagated dims, for memo.py's keys)


class Symbols:
    """Fresh symbolic dims ('unk__0', 'unk__1', ...) unique within one inference run."""

    def __init__(self, start: int = 0, past: Graph | None = None):
        self._count = itertools.count(start) if past is None else None
        self._past = past

    @classmethod
    def after_existing(cls, g: Graph) -> Symbols:
        """Start past every 'unk__N' already in the graph, so fresh names never collide
        (the graph is scanned at the first fresh name: a graph of known dims never needs one,
        and until then inference has written no type back to it)."""
        return cls(past=g)

    def fresh(self) -> str:
        if self._count is None:
            self._count = itertools.count(_past_unknowns(self._past))
            self._past = None
        return f"unk__{next(self._count)}"


def _past_unknowns(g: Graph) -> int:
    """One past the largest N of the 'unk__N' dims of ``g``'s values (0 if none)."""
    top = -1
    seen: set[int] = set()  # (values share their type objects)
    tops = _UNKNOWN_TOPS
    for v in itertools.chain(g.values(), g.value_info, g.outputs):
        t = v.type
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        hit = tops.get(id(t))
        if hit is None or hit[0] is not t:
            hit = _unknown_top(t)
        if hit[1] > top:
            top = hit[1]
    return top + 1


#: id(type) -> (the type, the largest N of its 'unk__N' dims, -1 if none): types are immutable
#: and shared (a model read again reuses its reader's), so each is read once.
_UNKNOWN_TOPS: dict[int, tuple] = {}


def _unknown_top(t) -> tuple:
    top = -1
    for d in getattr(getattr(t, "shape", None), "dims", ()) or ():
        if isinstance(d, str) and d.startswith("unk__") and d[5:].isdigit():
            top = max(top, int(d[5:]))
    if len(_UNKNOWN_TOPS) >= 16_384:
        _UNKNOWN_TOPS.clear()
    hit = _UNKNOWN_TOPS[id(t)] = (t, top)  # (the entry holds the type: its id stays its)
    return hit


#: infer_node's ``declared`` where a node output's declared type is the one its Value holds.
ON_VALUES: dict = {}


class NodeContext:
    """What a rule sees: input types and data, attributes with defaults, the opset."""

    def __init__(self, engine: Engine, node: Node, env: dict, schema, opset: int):
        self.engine = engine
        self.node = node
        # (rules ask often; Node.inputs makes a tuple each time: the node's list, read only)
        self.inputs = node._inputs  # noqa: SLF001
        self.env = env
        self.schema = schema
        self.opset = opset
        self.outputs: dict[int, object] = {}
        self.out_data: dict[int, object] = {}
        self.minted = False  # (whether the rule named a fresh dim: memo.py keeps no such node)
        #: Whether the rule (or a data fold) asked for an input's data (value, data, raw):
        #: what one that did not found follows from memo.py's key without the data.
        self.read_data = False

    # -- inputs -------------------------------------------------------------------------------
    @property
    def n_inputs(self) -> int:
        return len(self.inputs)

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def type(self, i: int):
        if not self.has(i):
            return None
        return self.env["types"].get(id(self.inputs[i]))

    def dtype(self, i: int) -> DataType | None:
        t = self.type(i)
        if isinstance(t, TensorType) and t.elem_type:
            return t.elem_type
        return None

    def shape(self, i: int) -> tuple | None:
        t = self.type(i)
        if isinstance(t, TensorType) and t.shape is not None:
            return tuple(t.shape.dims)
        return None

    def rank(self, i: int) -> int | None:
        s = self.shape(i)
        return None if s is None else len(s)

    def value(self, i: int):
        """The input's full constant value as a numpy array, or None."""
        self.read_data = True
        if not self.has(i):
            return None
        d = self.env["data"].get(id(self.inputs[i]))
        if isinstance(d, np.ndarray):
            return d
        if isinstance(d, Data) and d.known():
            arr = np.array(d.dims, dtype=np.int64)
            return arr.reshape(()) if d.scalar else arr
        return None

    def data(self, i: int) -> Data | None:
        """The input as propagated dims (known constants included), or None."""
        self.read_data = True
        if not self.has(i):
            return None
        d = self.env["data"].get(id(self.inputs[i]))
        if isinstance(d, Data):
            return d
        if isinstance(d, np.ndarray) and d.ndim <= 1 and d.dtype.kind in "iu" and d.size <= 64:
            return Data([int(x) for x in d.reshape(-1)], d.ndim == 0)
        return None

    def raw(self, i: int):
        """The input's propagated data as it is kept (an array or engine.Data), or None."""
        self.read_data = True
        if not self.has(i):
            return None
        return self.env["data"].get(id(self.inputs[i]))

    def attr(self, name: str, default=None):
        a = self.node.attributes.get(name)
        if a is not None and not a.is_ref:
            v = a.value
            if a.type == AttrType.TENSOR and v is not None:
                return v.numpy()
            return v
        if self.schema is not None:
            spec = self.schema.attributes.get(name)
            if spec is not None and spec.default is not None:
                return spec.default
        return default

    def fresh(self) -> str:
        self.minted = True
        return self.engine.symbols.fresh()

    # -- outputs ------------------------------------------------------------------------------
    def set(self, i: int, elem_type, shape=None) -> None:
        """Output i is a tensor of ``elem_type`` and ``shape`` (None: rank unknown)."""
        if elem_type is None or elem_type == DataType.UNDEFINED:
            if shape is None:
                return
            elem_type = DataType.UNDEFINED
        if shape is not None:  # (a known dim, most, taken as it is: what _dim gives it)
            shape = tuple([d if d.__class__ is int and d >= 0 else _dim(d) for d in shape])
        # (one object per type: a later node's memo key reads a type's key once, memo.py)
        self.outputs[i] = _tensor_type(elem_type, shape)

    def set_type(self, i: int, t) -> None:
        if t is not None:
            self.outputs[i] = t

    def set_data(self, i: int, data) -> None:
        self.out_data[i] = data

    def same(self, i: int = 0, src: int = 0) -> None:
        """Output i has the type and shape of input src."""
        t = self.type(src)
        if t is not None:
            self.outputs[i] = t


def _dim(d) -> Dim:
    if d is None or isinstance(d, str):
        return d
    if isinstance(d, int | np.integer):
        if d < 0:
            raise InferenceError(f"negative dim {d}")
        return int(d)
    return None


# -- merging inferred with declared types ---------------------------------------------------------


def merge(declared, inferred, where: str, conflicts: list[str]):
    """The union of what two types know; a clash is recorded in ``conflicts``."""
    if declared is None:
        return inferred
    if inferred is None or declared == inferred:  # (the common case of a typed model)
        return declared
    if isinstance(declared, TensorType) and isinstance(inferred, TensorType):
        elem = declared.elem_type or inferred.elem_type
        if declared.elem_type and inferred.elem_type and declared.elem_type != inferred.elem_type:
            conflicts.append(
                f"{where}: inferred element type {inferred.elem_type.name}, "
                f"declared {declared.elem_type.name}"
            )
        ds, is_ = declared.shape, inferred.shape
        if ds is None or is_ is None:
            return TensorType(elem, ds if ds is not None else is_, declared.denotation)
        if ds.rank != is_.rank:
            conflicts.append(f"{where}: inferred rank {is_.rank}, declared rank {ds.rank}")
            return TensorType(elem, ds, declared.denotation)
        dims = []
        for a, b in zip(ds.dims, is_.dims):
            if isinstance(a, int) and isinstance(b, int) and a != b:
                conflicts.append(f"{where}: inferred shape {is_}, declared {ds}")
                dims.append(a)
            elif isinstance(a, int) or (
                isinstance(a, str) and not isinstance(b, int) and not _says_more(b, a)
            ):
                dims.append(a)
            else:
                dims.append(b if b is not None else a)
        return TensorType(elem, Shape(tuple(dims), ds.denotations), declared.denotation)
    if isinstance(declared, SequenceType) and isinstance(inferred, SequenceType):
        return SequenceType(merge(declared.elem, inferred.elem, where, conflicts))
    if isinstance(declared, OptionalType) and isinstance(inferred, OptionalType):
        return OptionalType(merge(declared.elem, inferred.elem, where, conflicts))
    if type(declared) is not type(inferred):
        conflicts.append(f"{where}: inferred {inferred}, declared {declared}")
    return declared


def _placeholder(d) -> bool:
    """A name tools give a dim they could not infer ('unk__3')."""
    return isinstance(d, str) and d.startswith("unk__") and d[5:].isdigit()


def _says_more(inferred, declared: str) -> bool:
    """An inferred dim replaces a declared placeholder name (inference names no dim 'unk__N'
    before the end, so an inferred one came from the inputs: it ties dims together)."""
    return inferred is not None and _placeholder(declared)


# -- the engine -----------------------------------------------------------------------------------


class Engine:
    def __init__(self, model: Model, strict: bool, data_prop: bool):
        self.model = model
        self.strict = strict
        self.data_prop = data_prop
        self.symbols = Symbols()
        self.problems: list[str] = []
        self.functions = {(f.domain, f.name): f for f in model.functions.values()}
        self._function_depth = 0
        #: Whether node outputs' declared types (value_info, graph outputs) join the inferred
        #: ones (off: only what follows from the inputs and initializers).
        self.trust_declared = True
        #: Whether nodes go through the memo (memo.py). Off for a one-off pass whose nodes
        #: a creation's inference did not see (a session's first-run output check, on the
        #: optimized graph: its keys cost a CNN's first run more than its rules did).
        self.memo = True

    def problem(self, msg: str) -> None:
        self.problems.append(msg)

    def new_env(self, outer: dict | None = None) -> dict:
        if outer is None:
            return {"types": {}, "data": {}}
        return {"types": dict(outer["types"]), "data": dict(outer["data"])}

    def seed(self, g: Graph, env: dict) -> None:
        types, data = env["types"], env["data"]
        for v in g.inputs:
            if v.type is not None:
                types[id(v)] = v.type
        inputs = _overridable_inputs(g, self.model.ir_version)
        for v in g.initializers.values():
            t = v.const_value
            if t is None:
                continue
            key = id(v)
            if key not in types or key in inputs:
                types[key] = types.get(key) or _tensor_type(t.dtype, t.shape)
            if key not in inputs and t.external is None and math.prod(t.shape) <= 4096:
                try:
                    data[key] = t.numpy()
                except Exception:  # unreadable data: no propagation
                    pass

    def infer_graph(self, g: Graph, env: dict, opsets: dict[str, int], label: str = "") -> None:
        # (a node output's declared type is its Value's: the graph outputs and the value_info
        # entries that name it are that Value, and nothing writes a type before the end)
        declared = ON_VALUES if self.trust_declared else {}
        resolved: dict = {}  # (the graph's nodes share a few op types)
        gname = label or g.name
        for node in _in_order(g):
            self.infer_node(node, env, opsets, declared, gname, resolved)

    def infer_node(
        self,
        node: Node,
        env: dict,
        opsets,
        declared: dict,
        gname: str,
        resolved: dict | None = None,
    ) -> None:
        """``declared``: id(output) -> its declared type, or ON_VALUES (the type its Value
        holds); ``resolved``: what was found for the op types seen so far under ``opsets``."""
        key = (node.domain, node.op_type)
        found = None if resolved is None else resolved.get(key)
        if found is None:
            found = _resolve(node.domain, node.op_type, opsets)
            if resolved is not None:
                resolved[key] = found
        domain, opset, schema, fn, _ = found
        known = None
        if fn is not None and self.memo and fn not in CHEAP_RULES:
            known, hit = memo.find(self, node, env, found)
            if hit is not None:  # (the entry's own dicts, read only: no context, no copies)
                self._take(node, env, hit[0], hit[1], declared, gname, True)
                return
        ctx = NodeContext(self, node, env, schema, opset or 0)
        try:
            if fn is not None:
                fn(ctx)
            elif (domain, node.op_type) in self.functions:
                self.infer_call(ctx, self.functions[(domain, node.op_type)], opsets)
            elif schema is not None:
                body = schema.function_for(opset) if schema.functions else None
                if body is not None:
                    f = body.to_function(domain, node.op_type)
                    self.infer_call(ctx, f, {**opsets, **f.opset_imports})
                if not ctx.outputs:
                    generic(ctx)
            if self.data_prop:
                op = node.op_type
                for fold in DATA_FOLDS:
                    ops = FOLD_OPS.get(fold)
                    if ops is None or op in ops:
                        fold(ctx)
            if known is not None and not ctx.minted:
                memo.remember(known, ctx.outputs, ctx.out_data, schema, ctx.read_data)
        except InferenceError as e:
            self.problem(f"graph {gname!r}, {_label(node)}: {e}")
        except Exception as e:  # noqa: BLE001  (a rule that meets a malformed node fails: a
            # non-strict run keeps the declared types, a strict one reports the node)
            if self.strict:
                self.problem(f"graph {gname!r}, {_label(node)}: inference failed: {e}")
        self._take(node, env, ctx.outputs, ctx.out_data, declared, gname, False)

    def _take(
        self, node: Node, env: dict, outputs: dict, out_data: dict, declared, gname, shared
    ) -> None:
        """Record the node's output types (merged with the declared ones) and data in ``env``;
        ``shared``: the data are a memo entry's, copied as they are recorded."""
        types = env["types"]
        data = env["data"] if self.data_prop and out_data else None
        on_values = declared is ON_VALUES
        for i, v in enumerate(node._outputs):  # noqa: SLF001 (read only: no tuple made)
            if not v.name:
                continue
            inferred = outputs.get(i)
            known = v.type if on_values else declared.get(id(v))
            if known is None:  # (nothing to merge with: what merge would answer)
                t = inferred
            else:
                conflicts: list[str] = []
                # (the conflicts' location is written only when there are some)
                t = merge(known, inferred, "", conflicts)
                for c in conflicts:
                    self.problem(f"graph {gname!r}, {_label(node)}, output {v.name!r}{c}")
            if t is not None:
                types[id(v)] = t
            if data is not None:
                d = out_data.get(i)
                if d is not None:
                    data[id(v)] = memo.copy_data(d) if shared else d

    def infer_call(self, ctx: NodeContext, f, opsets) -> None:
        """Infer a function body with the call's input types; its Values are left untouched."""
        if self._function_depth > 16:
            return
        self._function_depth += 1
        ctx.read_data = True  # (the body's nodes read the call's data: below)
        try:
            env = self.new_env()
            for i, v in enumerate(f.graph.inputs):
                if ctx.has(i):
                    if ctx.type(i) is not None:
                        env["types"][id(v)] = ctx.type(i)
                    d = ctx.env["data"].get(id(ctx.node.inputs[i]))
                    if d is not None:
                        env["data"][id(v)] = d
            attrs = {a.name: a for a in f.attribute_defaults}
            attrs.update(ctx.node.attributes)
            if ctx.schema is not None:
                for name, default in ctx.schema.defaults.items():
                    attrs.setdefault(name, _default_attr(ctx.schema, name, default))
            saved = _bind_refs(f.graph, attrs)
            try:
                self.infer_graph(f.graph, env, {**opsets, **f.opset_imports}, f.name)
            finally:
                _unbind_refs(saved)
            for i, v in enumerate(f.graph.outputs):
                if i < len(ctx.node.outputs):
                    ctx.set_type(i, env["types"].get(id(v)))
                    if id(v) in env["data"]:
                        ctx.set_data(i, env["data"][id(v)])
        finally:
            self._function_depth -= 1

    def infer_subgraph(self, ctx: NodeContext, g: Graph, input_types: list) -> list:
        """Infer a subgraph (reading outer values) with the given input types; its output types."""
        env = self.new_env(ctx.env)
        self.seed(g, env)
        for v, t in zip(g.inputs, input_types):
            if t is not None and v.type is None:
                env["types"][id(v)] = t
            elif v.type is not None:
                # the outer value's dims flow in (a Loop's first iteration) where the body
                # declares none or placeholders
                env["types"][id(v)] = merge(v.type, t, "", []) if t is not None else v.type
        for v in g.inputs:
            env["data"].pop(id(v), None)
        opsets = self.model.opset_imports
        self.infer_graph(g, env, opsets, g.name)
        self.subgraph_envs.append((g, env))
        return [env["types"].get(id(v)) or v.type for v in g.outputs]


#: (element type, shape) -> its TensorType (immutable): a model's initializers repeat a few.
_TENSOR_TYPES: dict[tuple, TensorType] = {}


def _tensor_type(dtype, shape: tuple) -> TensorType:
    key = (dtype, shape)
    t = _TENSOR_TYPES.get(key)
    if t is None:
        if len(_TENSOR_TYPES) >= 4096:
            _TENSOR_TYPES.clear()
        t = _TENSOR_TYPES[key] = TensorType(dtype, shape)
    return t


def _resolve(node_domain: str, op_type: str, opsets) -> tuple:
    """(canonical domain, imported opset, schema, shape rule, the op's part of a memo key: an
    int, memo.op_id) of an op under ``opsets`` (the key's part made once per op type, not
    per node)."""
    domain = canonical_domain(node_domain)
    opset = opset_for(opsets, domain)
    schema = defs.get_schema(op_type, opset, domain) if opset else None
    key = (domain, op_type)
    fn = _RULE_OF(RULES, key) or RULES.get(key)
    # (the schema by identity: memo.OP_IDS holds it, so its id is not reused while it lives)
    op = memo.op_id((node_domain, op_type, domain, opset, id(schema), fn), schema, fn)
    return domain, opset, schema, fn, op


def _overridable_inputs(g: Graph, ir_version: int) -> set[int]:
    """The ids of the graph inputs whose initializer a caller may override (no data flows
    from those). Before IR 4 every initializer had to be listed as an input too; onnxruntime
    (and onyx's optimizer, core.PassContext.const) treat those as constants, so inference does:
    a Reshape to an initializer shape then keeps its dims."""
    if ir_version < 4:
        return set()
    return {id(v) for v in g.inputs}


def _in_order(g: Graph) -> list[Node]:
    """The graph's nodes, producers first. Tools that append nodes (onnxconverter-common's
    input casts) leave graphs unsorted, which onnxruntime runs; the model is not reordered."""
    nodes = list(g)
    seen: set[int] = set()
    for n in nodes:
        # (a node without a subgraph reads its inputs alone: its list, read only)
        for v in inputs_with_captures(n) if n.attributes and n.has_subgraphs() else n._inputs:  # noqa: SLF001
            p = None if v is None else v.producer
            # (a producer of this graph is a node whose graph is g: no set of them made first)
            if p is not None and id(p) not in seen and p is not n and p.graph is g:
                return _sorted(nodes, {id(n) for n in nodes})
        seen.add(id(n))
    return nodes


def _sorted(nodes: list[Node], mine: set[int]) -> list[Node]:
    """Depth-first: each node after its producers (iterative: chains run thousands deep)."""
    order: list[Node] = []
    placed: set[int] = set()
    for root in nodes:
        stack = [(root, False)]
        while stack:
            n, expanded = stack.pop()
            if expanded:
                order.append(n)
                continue
            if id(n) in placed:
                continue
            placed.add(id(n))  # (before its inputs: a cycle stops here)
            stack.append((n, True))
            for v in reversed(list(inputs_with_captures(n))):
                p = v.producer
                if p is not None and id(p) in mine and id(p) not in placed:
                    stack.append((p, False))
    return order


def _default_attr(schema, name, default):
    from ..ir import Attr

    return Attr(name, schema.attributes[name].type, default)


def _bind_refs(g: Graph, attrs: dict) -> list:
    """Replace attribute references in a function body by the caller's values (undone later)."""
    saved = []
    for node in g.all_nodes():
        for key, a in list(node.attributes.items()):
            if a.is_ref:
                saved.append((node, key, a))
                target = attrs.get(a.ref_attr_name)
                if target is None:
                    del node.attributes[key]
                else:
                    from ..ir import Attr

                    node.attributes[key] = Attr(key, target.type, target.value)
    return saved


def _unbind_refs(saved: list) -> None:
    for node, key, a in saved:
        node.attributes[key] = a


def type_from_str(type_str: str):
    """A Type for a concrete schema type string ('tensor(int64)', 'seq(tensor(float))')."""
    type_str = type_str.replace(" ", "")
    if type_str.startswith("tensor(") and type_str.endswith(")"):
        info = BY_NAME.get(type_str[7:-1])
        return TensorType(info.dtype) if info else None
    if type_str.startswith("seq(") and type_str.endswith(")"):
        inner = type_from_str(type_str[4:-1])
        return SequenceType(inner) if inner else None
    return None


def generic(ctx: NodeContext) -> None:
    """The fallback rule: element types from the schema's type constraints, shapes unknown."""
    s = ctx.schema
    if s is None:
        return
    bound: dict[str, object] = {}
    for i, p in enumerate(s.inputs):
        t = ctx.type(i)
        if t is not None and p.type_str not in bound:
            bound[p.type_str] = t
    for i, p in enumerate(s.outputs):
        if i >= len(ctx.node.outputs):
            break
        tc = s.type_constraints.get(p.type_str)
        if tc is None:
            t = type_from_str(p.type_str)
        elif p.type_str in bound:
            src = bound[p.type_str]
            t = TensorType(src.elem_type) if isinstance(src, TensorType) else src
        elif len(tc.allowed) == 1:
            t = type_from_str(tc.allowed[0])
        else:
            t = None
        if t is not None:
            ctx.outputs.setdefault(i, t)


def _label(node: Node) -> str:
    return f"node {node.name or node.op_type} ({node.op_type})"


def derived_types(model: Model) -> dict[int, tuple]:
    """id(value) -> (value, type) for the main graph's node outputs whose type follows from
    the graph inputs' and initializers' types alone (declared types of node outputs are not
    taken: they may be wrong, or more specific than a run). Nothing is written to the model."""
    engine = Engine(model, strict=False, data_prop=True)
    engine.trust_declared = False
    engine.memo = False
    engine.subgraph_envs = []
    env = engine.new_env()
    engine.seed(model.graph, env)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine.infer_graph(model.graph, env, model.opset_imports)
    types = env["types"]
    return {id(v): (v, types[id(v)]) for n in model.graph for v in n.outputs if id(v) in types}


def run(
    model: Model,
    strict: bool = False,
    data_prop: bool = True,
    symbolic: bool = True,
    name_unknown: bool = True,
) -> Model:
    engine = Engine(model, strict, data_prop)
    engine.symbols = Symbols.after_existing(model.graph)
    engine.subgraph_envs = []
    env = engine.new_env()
    engine.seed(model.graph, env)
    engine.infer_graph(model.graph, env, model.opset_imports)
    keep = None if symbolic else _declared_dims(model.graph)
    writer = _DimWriter(engine.symbols if name_unknown else None, keep)
    _write_back(model.graph, env, writer)
    for g, sub_env in engine.subgraph_envs:
        _write_back(g, sub_env, writer)
    if engine.problems:
        if strict:
            raise ValidationError(engine.problems)
        for p in engine.problems:
            warnings.warn(f"shape inference: {p}", stacklevel=3)
    return model


class _DimWriter:
    """How inferred dims are written: unknown ones get a fresh 'unk__N' (when ``symbols`` is
    given), so distinct unknowns stay distinct; without symbolic output, an expression that no
    declared type names (``past + seq``) is written as unknown."""

    def __init__(self, symbols: Symbols | None, keep: set | None):
        self.symbols = symbols
        self.keep = keep

    def dim(self, d):
        if self.keep is not None and sym.is_compound(d) and d not in self.keep:
            d = None
        if d is None and self.symbols is not None:
            return self.symbols.fresh()
        return d

    def type(self, t):
        if isinstance(t, TensorType) and t.shape is not None:
            if self.keep is None:
                if self.symbols is None or None not in t.shape.dims:
                    return t  # (nothing to name or drop: most values, so dims are not rebuilt)
                # (each unknown dim named: what dim() does without ``keep``, in one list; a
                # model of unknown batch names every value's, a tenth of its inference)
                fresh = self.symbols.fresh
                dims = tuple([fresh() if d is None else d for d in t.shape.dims])
                return TensorType(t.elem_type, Shape(dims, t.shape.denotations), t.denotation)
            dims = tuple(self.dim(d) for d in t.shape.dims)
            if dims != t.shape.dims:
                return TensorType(t.elem_type, Shape(dims, t.shape.denotations), t.denotation)
            return t
        if isinstance(t, SequenceType) and t.elem is not None:
            return SequenceType(self.type(t.elem), t.denotation)
        if isinstance(t, OptionalType) and t.elem is not None:
            return OptionalType(self.type(t.elem), t.denotation)
        return t


def _declared_dims(g: Graph) -> set:
    """Every dim string the model's own types use (kept when expressions are not written)."""
    out: set = set()
    for v in itertools.chain(g.values(), g.value_info, g.outputs):
        out.update(d for d in getattr(getattr(v.type, "shape", None), "dims", ()) or ())
    return out


#: (module constants: ``DataType.UNDEFINED`` goes through the enum class's ``__getattr__`` hook
#: (Python 3.11's EnumType defines one), and ``A | B`` makes a union object, at every call)
_UNDEFINED = DataType.UNDEFINED
_TENSOR_CLASSES = (TensorType, SparseTensorType)


def _is_complete(t) -> bool:
    """Whether a type names every element type inside it (UNDEFINED is not written out)."""
    if isinstance(t, _TENSOR_CLASSES):
        return t.elem_type != _UNDEFINED
    inner = getattr(t, "elem", None) or getattr(t, "value", None)
    return inner is None or _is_complete(inner)


def _write_back(g: Graph, env: dict, writer: _DimWriter) -> None:
    known = {id(v) for v in g.value_info}
    outputs = {id(v) for v in g.outputs}
    types = env["types"]
    listed = g.value_info
    as_is = writer.keep is None  # (a known tensor type is then written as it is)
    # (and an unknown dim named: writer.type's way, without its call and _is_complete's)
    fresh = writer.symbols.fresh if as_is and writer.symbols is not None else None
    for node in g:
        for v in node._outputs:  # noqa: SLF001 (read only: no tuple made)
            t = types.get(id(v))
            if t is None or not v.name:
                continue
            shape = t.shape if t.__class__ is TensorType else None
            if as_is and shape is not None and t.elem_type != _UNDEFINED:
                dims = shape.dims
                if None not in dims:
                    v.type = t  # (what _is_complete passes and writer.type gives back: most)
                elif fresh is None:
                    v.type = t  # (no names for unknown dims: writer.type gives it back)
                else:
                    dims = tuple([fresh() if d is None else d for d in dims])
                    v.type = TensorType(t.elem_type, Shape(dims, shape.denotations), t.denotation)
            elif not _is_complete(t):
                continue  # a type with no element type (an op we have no rule for) says nothing
            else:
                v.type = writer.type(t)
            if id(v) not in known and id(v) not in outputs:
                listed.append(v)
                known.add(id(v))
