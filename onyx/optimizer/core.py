"""The pass manager's machinery: passes, the context they share, model cloning, helpers.

A pass is a function ``fn(ctx) -> bool`` (True when it changed the graph) marked with
:func:`graph_pass` with a name (onnxruntime's name where onnxruntime has the same pass, so one
``disabled_optimizers`` list works for both) and a level; ``pipeline.py`` lists the passes in
the order they run. Passes work on the main graph; nodes with subgraphs are left whole (their
reads of outer values count as uses, so nothing they need is ever removed).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import field

import numpy as np

from .. import ir
from ..ir.dtypes import from_numpy
from ..ir.frozen import DataValue, FrozenValue, lazy_fields
from ..runtime.registry import ONYX_DOMAIN

BASIC, EXTENDED, ALL = 1, 2, 99
LEVELS = {"disabled": 0, "none": 0, "basic": BASIC, "extended": EXTENDED, "all": ALL}
STANDARD = ("", "ai.onnx")
MS = "com.microsoft"


# (frozen values without dataclass's methods compiled at import: ir/frozen.py)
@lazy_fields
class Pass(FrozenValue):
    """A graph pass: its name, level and function."""

    name: str
    level: int
    fn: Callable[[PassContext], bool]
    #: Op types a change needs: each set must meet the graph's op types, or the pass is
    #: skipped without walking the graph (empty: always run).
    triggers: tuple[frozenset[str], ...] = ()
    #: (not a field) A cheap look at the graph made before the pass's module is imported
    #: (pipeline.GATES): False when the pass surely finds nothing to change, and it is then
    #: skipped as a run that found nothing would be. None: no such look.
    gate = None

    def __init__(
        self,
        name: str,
        level: int,
        fn: Callable[[PassContext], bool],
        triggers: tuple[frozenset[str], ...] = (),
    ):
        self._set(name=name, level=level, fn=fn, triggers=triggers)


class DeferredPass(Pass):
    """A pass given as "module:function" of this package, imported when its function is
    first asked for (pipeline.py: each pass module is a few hundred microseconds of a cold
    start, and most models need few of them). The same fields as a Pass otherwise."""

    def __init__(
        self,
        name: str,
        level: int,
        fn: str | Callable[[PassContext], bool],
        triggers: tuple[frozenset[str], ...] = (),
        gate: Callable[[PassContext], bool] | None = None,
    ):
        # (the fields set one by one, not through _set's keywords: sixty passes are made at
        # every cold start, pipeline.py's import)
        fields = self.__dict__
        fields["name"], fields["level"], fields["triggers"] = name, level, triggers
        fields["_fn" if callable(fn) else "_where"] = fn
        if gate is not None:
            fields["gate"] = gate

    @property
    def fn(self) -> Callable[[PassContext], bool]:
        fn = self.__dict__.get("_fn")
        if fn is None:
            module, name = self.__dict__["_where"].split(":")
            fn = getattr(importlib.import_module(f"{__package__}.{module}"), name)
            self.__dict__["_fn"] = fn
        return fn


DeferredPass.__qualname__ = "Pass"  # (its repr, as a Pass's)


@lazy_fields
class PassResult(FrozenValue):
    """What one run of a pass did: whether it changed the graph, and the changes it counted
    (``PassContext.count``), by name."""

    name: str
    changed: bool
    stats: dict[str, int]
    seconds: float

    def __init__(self, name: str, changed: bool, stats: dict[str, int], seconds: float):
        self._set(name=name, changed=changed, stats=stats, seconds=seconds)


def graph_pass(name: str, level: int = BASIC) -> Callable:
    """Mark ``fn`` as the pass ``name`` of ``level`` (listed in pipeline.py to run)."""

    def mark(fn):
        fn.graph_pass = Pass(name, level, fn)
        return fn

    return mark


def pass_of(fn: Callable) -> Pass:
    """The pass a :func:`graph_pass` function is."""
    return fn.graph_pass


# (DataValue: what @dataclass gives, without compiling methods at every import)
@lazy_fields
class PassContext(DataValue):
    """What a pass works on: the (cloned) model and its main graph, plus shared helpers."""

    model: ir.Model
    stats: dict[str, int] = field(default_factory=dict)
    #: Names of the passes this run uses (a basic pass may leave work to a fusion that runs).
    enabled: frozenset[str] = frozenset()
    _names: set[str] | None = None
    _suffixes: dict[str, int] = field(default_factory=dict)
    _declared: tuple | None = None
    #: Counts the changes made so far: every pass that changed the graph, every inference.
    version: int = 0
    #: pass name -> the version at which the pass last ran and changed nothing.
    idle: dict[str, int] = field(default_factory=dict)
    #: Names of the passes that have run at least once.
    ran: set[str] = field(default_factory=set)
    #: What passes keep between runs, by keys of their own (e.g. per-tensor digests).
    memo: dict = field(default_factory=dict)
    #: One result per pass run, in order.
    results: list[PassResult] = field(default_factory=list)
    #: Whether constant folding may grow the model without bound (a session's in-memory
    #: model: nothing is written) rather than keep big generated tensors as computations.
    unbounded_folding: bool = False
    #: Whether the model is a session's, to run (not to be written): float16 computes in
    #: float32 (float16.py).
    for_session: bool = False

    #: (the main graph's node list, its op types) as last found (op_types).
    _op_types: tuple[list, frozenset[str]] | None = None

    def __init__(
        self,
        model: ir.Model,
        stats: dict[str, int] | None = None,
        enabled: frozenset[str] = frozenset(),
        _names: set[str] | None = None,
        _suffixes: dict[str, int] | None = None,
        _declared: tuple | None = None,
        version: int = 0,
        idle: dict[str, int] | None = None,
        ran: set[str] | None = None,
        memo: dict | None = None,
        results: list[PassResult] | None = None,
        unbounded_folding: bool = False,
        for_session: bool = False,
        _op_types: tuple[list, frozenset[str]] | None = None,
    ):
        self.model = model
        #: The model's main graph (an attribute: the passes read it some thousand times a
        #: session, each read through two properties otherwise).
        self.graph: ir.Graph = model.graph
        self.stats = {} if stats is None else stats
        self.enabled = enabled
        self._names = _names
        self._suffixes = {} if _suffixes is None else _suffixes
        self._declared = _declared
        self.version = version
        self.idle = {} if idle is None else idle
        self.ran = set() if ran is None else ran
        self.memo = {} if memo is None else memo
        self.results = [] if results is None else results
        #: whether each pass run appends a PassResult to ``results`` (optimize's caller asks)
        self.record_results = True
        self.unbounded_folding = unbounded_folding
        self.for_session = for_session
        self._op_types = _op_types
        self._verdicts: tuple[frozenset[str], dict] | None = None
        #: (name, n) of each count() since the pass manager last emptied it (what one pass
        #: run counted: copying ``stats`` around every run cost more than most runs)
        self.counted: list[tuple[str, int]] = []
        #: What made each change since ``version`` was first: its tag (the pass's name, or
        #: what the running pass set ``change_tag`` to), by version less ``_first_version``.
        self.changes: list[str] = []
        self._first_version = version
        #: Set by a running pass that changed the graph: a tag saying what kind of change it
        #: made, for the pass manager's rules (pipeline.QUIET); None: the pass's name.
        self.change_tag: str | None = None
        #: The version at which DeadCodeElimination last started (-1: never): every node dead
        #: then is gone since.
        self.swept = -1
        #: Whether a node of the main graph held a subgraph when the op types were first
        #: found (op_types); none can later: the passes make no graph attributes (they copy
        #: a node's attributes at most), so a graph without one stays so.
        self.holds_subgraphs = True
        #: Whether the main graph's nodes were in topological order when optimize started
        #: (the passes keep them so: a fused node takes its pattern's last node's place;
        #: tests/test_optimizer_quiet.py checks the zoo's).
        self.ordered = False

    def changed(self, tag: str) -> None:
        """Note a change to the graph made by ``tag`` (see ``changes``)."""
        self.changes.append(tag)
        self.version += 1

    def changes_since(self, version: int) -> list[str]:
        """The tags of the changes made since ``version``, in order."""
        return self.changes[version - self._first_version :]

    def in_order(self) -> bool:
        """Whether every node of the main graph comes after the producers of its inputs (a
        pass walking the nodes once then sees each input as it will stay)."""
        return self.graph.in_topological_order()

    def op_types(self) -> frozenset[str]:
        """Op types of every node, subgraphs included: found again only when the main graph's
        node list changed (the graph makes a new order list at every insertion or removal;
        passes never retype a node nor edit a subgraph in place), not at every version."""
        order = self.graph._nodes  # noqa: SLF001 (its identity: whether nodes changed)
        known = self._op_types
        if known is None or known[0] is not order:
            if known is None:  # (the first look: whether any node holds a subgraph)
                self.holds_subgraphs = _holds_subgraphs(order)
            # (no pass makes a graph attribute, only copies a node's: a graph whose nodes
            # held none at first holds none, and the set of its op types is all there is)
            found = (
                _op_types_of(order)
                if self.holds_subgraphs
                else frozenset([n.op_type for n in order])
            )
            known = self._op_types = (order, found)
        return known[1]

    def nodes_of(self, ops: str | frozenset[str]) -> Sequence[ir.Node]:
        """The main graph's nodes of op type ``ops`` (one, or a set), in graph order, as
        ``for node in ctx.graph`` meets them (a list made before the walk: a node the walk
        inserts is not met, one it removes still is). For a pass that looks at a few op types'
        nodes: the others cost no visit of its own. Do not change the list."""
        order = self.graph._nodes  # noqa: SLF001
        if type(ops) is str:
            if ops not in self.op_types():
                return ()
            return [n for n in order if n.op_type == ops]
        return [n for n in order if n.op_type in ops]

    def may_change(self, p: Pass) -> bool:
        """Whether the graph holds the op types pass ``p`` needs to change anything."""
        if not p.triggers:
            return True
        present = self.op_types()
        for ops in p.triggers:
            if present.isdisjoint(ops):
                return False
        return True

    def trigger_verdicts(self) -> dict:
        """Pass name -> (its triggers, whether it may change the graph: :meth:`may_change`),
        for the op types the
        graph holds now: a table shared by every context that met the same op types (a session
        asks some fifty passes each round, and models created again meet the same sets).
        Filled as passes are asked about; a new table when the op types change."""
        present = self.op_types()
        known = self._verdicts
        if known is None or known[0] is not present:
            table = _VERDICTS.get(present)
            if table is None:
                if len(_VERDICTS) >= MAX_VERDICT_TABLES:
                    _VERDICTS.clear()
                table = _VERDICTS[present] = {}
            known = self._verdicts = (present, table)
        return known[1]

    # -- types --------------------------------------------------------------------------------
    @property
    def inferred(self) -> bool:
        return self._declared is not None

    def infer(self) -> None:
        """Annotate the main graph's values with inferred types (symbolic dims kept). The
        declared types come back at :meth:`finish`: inferred ones guide the passes only."""
        from ..inference import infer_shapes

        g = self.graph
        self.changed("infer")  # new types: a pass reading shapes may now find more
        if self._declared is None:
            # (the nodes' outputs: the values finish() types again; v keeps the id unique)
            types = {id(v): (v, v.type) for n in g._nodes for v in n._outputs}  # noqa: SLF001
            self._declared = (types, list(g.value_info))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                infer_shapes(self.model)
            except Exception:  # an aid only: without types, shape-based passes do less
                pass

    def finish(self) -> None:
        """Put back the declared types and value_info (dropping values no longer present)."""
        if self._declared is None:
            return
        types, value_info = self._declared
        g = self.graph
        outputs = {id(v) for v in g.outputs}
        alive = set()
        # (the nodes' outputs: the values with a producer; one walk finds them alive too)
        for n in g._nodes:  # noqa: SLF001
            for v in n._outputs:  # noqa: SLF001
                key = id(v)
                alive.add(key)
                known = types.get(key)
                if known is not None and key not in outputs:
                    if not _other_rank(known[1], v.type):  # (a fusion's new rank stays)
                        v.type = known[1]
        g.value_info = [v for v in value_info if id(v) in alive]

    def opset(self, domain: str = "") -> int:
        return self.model.opset(domain) or 0

    def count(self, name: str, n: int = 1) -> None:
        self.stats[name] = self.stats.get(name, 0) + n
        self.counted.append((name, n))

    # -- names --------------------------------------------------------------------------------
    def fresh_name(self, base: str) -> str:
        if self._names is None:
            self._names = self._taken_names()
        # (from the suffix this base had last: the ones below it are all taken, as before)
        i = self._suffixes.get(base, 0)
        name = f"{base}_{i}" if i else base
        while name in self._names:
            i += 1
            name = f"{base}_{i}"
        self._suffixes[base] = i
        self._names.add(name)
        return name

    def _taken_names(self) -> set[str]:
        """Every name the model's graphs give a value or a node (nodes' names too: a fused
        node is named from them). (Added one by one from the nodes' own lists: a generator and
        an outputs tuple made per node cost a first fresh_name more than the names.)"""
        names = set(self.graph.initializers)
        add = names.add
        self.op_types()  # (holds_subgraphs, found with them)
        graphs = _graphs(self.graph) if self.holds_subgraphs else (self.graph,)
        for g in graphs:
            for v in g.inputs:
                add(v.name)
            for n in g._nodes:  # noqa: SLF001
                for v in n._outputs:  # noqa: SLF001
                    add(v.name)
                add(n.name)
        return names

    # -- constants ----------------------------------------------------------------------------
    def const(self, v: ir.Value | None) -> np.ndarray | None:
        """The data of ``v`` if it is a constant of the main graph (an initializer that is not
        also a graph input, which a caller could override), else None."""
        if v is None or v.producer is not None or v.const_value is None:
            return None
        g = self.graph
        if g.initializers.get(v.name) is not v:
            return None
        # before IR 4 every initializer was also listed as an input; onnxruntime treats those
        # as constants (they cannot be overridden) and so do we (Values compare by identity)
        if self.model.ir_version >= 4 and v in g.inputs:
            return None
        try:
            return v.const_value.numpy()
        except Exception:  # unreadable external data: not a constant we can use
            return None

    def scalar(self, v: ir.Value | None) -> float | None:
        """A constant holding a single number, as a float."""
        c = self.const(v)
        if c is None or c.size != 1 or c.dtype.kind not in "biuf":
            return None
        return float(c.reshape(-1)[0])

    def add_const(self, array: np.ndarray, base: str) -> ir.Value:
        arr = np.asarray(array, order="C")  # (ascontiguousarray would make 0-d 1-d)
        name = self.fresh_name(base)
        v = ir.Value(
            name, ir.TensorType(from_numpy(arr.dtype), arr.shape), ir.Tensor(arr, name=name)
        )
        self.graph.add_initializer(v)
        return v

    def ensure_opset(self, domain: str, version: int = 1) -> None:
        self.model.opset_imports.setdefault(domain, version)

    def ensure_function(self, op_type: str, build: Callable[[], ir.Function]) -> None:
        """The model-local ai.onyx function ``op_type``, made by ``build`` the first time: a
        fused node that only onyx has a kernel for keeps a body in standard ops, so the saved
        model stays valid ONNX that other runtimes run."""
        self.ensure_opset(ONYX_DOMAIN, 1)
        if (ONYX_DOMAIN, op_type, "") not in self.model.functions:
            f = build()
            self.model.functions[f.key] = f

    # -- editing ------------------------------------------------------------------------------
    def is_output(self, v: ir.Value) -> bool:
        return any(o is v for o in self.graph.outputs)

    def replace_value(self, old: ir.Value, new: ir.Value) -> bool:
        """Make every reader of ``old`` read ``new``. A graph output keeps its name: ``new`` is
        renamed to it (refused, returning False, when ``new`` is itself a graph input,
        initializer or output and so cannot change its name)."""
        g = self.graph
        if self.is_output(old):
            if new.producer is None or self.is_output(new):
                return False
            new.name = old.name
            if old.type is not None:
                new.type = old.type
            g.outputs = [new if o is old else o for o in g.outputs]
        old.replace_all_uses_with(new)
        return True

    def single_use(self, v: ir.Value) -> ir.Node | None:
        """The only node reading ``v`` (once), when ``v`` is not a graph output."""
        use = v.only_use()
        if use is None or self.is_output(v):
            return None
        return use[0]

    def fuse(self, last: ir.Node, new: ir.Node, dead: Iterable[ir.Node] = ()) -> None:
        """:meth:`replace_nodes`, then ``new``'s domain imported (version 1, if it is not), for
        a fusion whose run changes the model through this alone (and ensure_function, called
        after it: a new function only keeps ConstantFolding from nodes it names): the run's
        change is tagged LOCAL_FUSION when each of its replacements is local
        (:func:`local_fusion`), one the basic passes find nothing new in (pipeline.QUIET),
        else FUSED."""
        dead = tuple(dead)
        local = self.change_tag in (None, LOCAL_FUSION) and local_fusion(last, new, dead)
        if local and new.domain not in self.model.opset_imports:
            # (its import could let ConstantFolding bind another node of that domain: none)
            local = not any(n.domain == new.domain for n in self.graph)
        self.replace_nodes(last, new, dead)
        self.ensure_opset(new.domain)
        self.change_tag = LOCAL_FUSION if local else FUSED

    def replace_nodes(self, last: ir.Node, new: ir.Node, dead: Iterable[ir.Node] = ()) -> None:
        """Put ``new`` where ``last`` was; ``new`` takes over ``last``'s outputs (same Values).

        ``dead`` are the other nodes of the fused pattern: removed, their outputs must have
        no reader left but the pattern itself.
        """
        g = self.graph
        g.insert_before(last, new)
        new.take_over_outputs(last)
        g.remove(last, safe=False)
        for n in dead:
            if n.graph is g:
                g.remove(n, safe=False)


#: PassContext.fuse's change tags: every replacement of the run was local; one was not.
LOCAL_FUSION, FUSED = "fusion:local", "fusion"

#: Standard ops whose producer a basic pass asks about (ShapeFolding's Shape chains and
#: Reshape targets, InsertCastTransformer's casts, RnnZeroInitialState's zeros): a value one
#: of them made stays so made.
_PRODUCERS_READ = frozenset(
    ("Shape", "Size", "Gather", "Slice", "Concat", "Cast", "Identity")
    + ("Expand", "ConstantOfShape")  # (RnnZeroInitialState's zeros: pipeline.QUIET)
)
#: Standard ops whose readers a basic pass asks about (ConstantFolding leaves a
#: DequantizeLinear a QDQ unit reads; QDQDataMovement moves them past their readers).
_READERS_READ = frozenset(("DequantizeLinear", "QuantizeLinear"))


def local_fusion(last: ir.Node, new: ir.Node, dead: tuple[ir.Node, ...]) -> bool:
    """Whether putting ``new`` (not yet in the graph, reading its inputs) in place of ``last``,
    ``dead`` removed, gives no basic pass anything new to do, when each found nothing before:
    - ``new`` is of no standard domain (the basic passes' rules are about standard ops,
      ConstantFolding's and CommonSubexpressionElimination's aside), and reads a value no
      constant holds (a node's output or a graph input: ConstantFolding cannot fold it);
    - no other node of its op reads its first input (it has no twin to merge);
    - it reads every value the pattern read from outside (nothing becomes dead or unused, no
      other node's inputs nor readers' count change), none of them made by a standard op
      whose readers a basic pass asks about;
    - ``last`` is no standard op whose outputs' producer a basic pass asks about (its outputs
      are ``new``'s now, of the same types).
    The fusion adds no initializer and changes no type (fuse's callers: see its doc)."""
    inputs = new._inputs  # noqa: SLF001
    first = inputs[0] if inputs else None
    if first is None or new.domain in STANDARD:
        return False
    if last.op_type in _PRODUCERS_READ and last.domain in STANDARD:
        return False
    op = new.op_type
    for user, _ in first._uses:  # noqa: SLF001
        if user.op_type == op and user is not new and user.domain == new.domain:
            return False
    if first.producer is None and first.const_value is not None:  # (most: a computed input)
        for v in inputs:  # (one that no constant holds: as ctx.const finds)
            if v is not None and v.name and (v.producer is not None or v.const_value is None):
                break
        else:
            return False
    # (Nodes and Values compare by identity: `in` a list of a few is a C loop)
    pattern = [last, *dead]
    for node in pattern:
        for v in node._inputs:  # noqa: SLF001
            if v is None:
                continue
            p = v.producer
            if p is None:
                if v not in inputs:
                    return False
            elif p not in pattern:
                if v not in inputs or (p.op_type in _READERS_READ and p.domain in STANDARD):
                    return False
    return True


#: Op types present -> {pass name: (triggers, whether they are met)} (trigger_verdicts).
_VERDICTS: dict[frozenset[str], dict] = {}
MAX_VERDICT_TABLES = 256


_GRAPH, _GRAPHS = ir.AttrType.GRAPH, ir.AttrType.GRAPHS


def _holds_subgraphs(nodes) -> bool:
    """Whether one of ``nodes`` holds a subgraph (asked once a session: the attributes' kinds
    looked at here, a node asked only when one is a graph's)."""
    for n in nodes:
        attrs = n.attributes
        if attrs:
            for a in attrs.values():
                kind = a.type
                if (kind == _GRAPH or kind == _GRAPHS) and n.has_subgraphs():
                    return True
    return False


def _op_types_of(nodes) -> frozenset[str]:
    """The op types of ``nodes`` and of their subgraphs' nodes."""
    found = {n.op_type for n in nodes}
    for n in nodes:
        if n.attributes and n.has_subgraphs():  # (most nodes have no attributes)
            for sub in n.subgraphs():
                found |= _op_types_of(sub._nodes)  # noqa: SLF001
    return frozenset(found)


def _other_rank(declared, now) -> bool:
    """Whether a value's declared tensor type has another rank than its type now (a fused node
    that took over a value of another shape: the declaration no longer holds)."""
    a = getattr(declared, "shape", None)
    b = getattr(now, "shape", None)
    return a is not None and b is not None and len(a.dims) != len(b.dims)


def _graphs(g: ir.Graph):
    yield g
    for n in g:
        for sub in n.subgraphs():
            yield from _graphs(sub)


def producer(v: ir.Value | None, op_type: str) -> ir.Node | None:
    """The standard-domain node of type ``op_type`` producing ``v``."""
    p = v.producer if v is not None else None
    if p is not None and p.op_type == op_type and p.domain in STANDARD:
        return p
    return None


def is_op(node: ir.Node | None, *op_types: str) -> bool:
    return node is not None and node.domain in STANDARD and node.op_type in op_types


def per_channel(c: np.ndarray, channels: int, rank: int) -> np.ndarray | None:
    """A constant that broadcasts over an (N, C, spatial...) tensor of ``rank`` dims along C
    only, as (C,) float64; None for any other constant."""
    if c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + c.shape
    if shape[0] != 1 or any(d != 1 for d in shape[2:]) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(c.reshape(-1), (channels,)).astype(np.float64)


def inference_batch_norm(ctx: PassContext, bn: ir.Node | None) -> bool:
    """Whether ``bn`` is a BatchNormalization in inference mode with one output read: a
    per-channel affine map of its input (the running statistics as given)."""
    if not is_op(bn, "BatchNormalization") or len(bn.inputs) < 5:
        return False
    if any(v.name and (v.has_uses() or ctx.is_output(v)) for v in bn.outputs[1:]):
        return False
    if bn.attr("training_mode", 0) or not bn.attr("spatial", 1):
        return False
    return ctx.opset() >= 7 or bool(bn.attr("is_test", 0))


def other_input(node: ir.Node, v: ir.Value) -> ir.Value | None:
    """For a binary node, the input that is not ``v`` (None if ``v`` is not an input)."""
    a, b = node.inputs[0], node.inputs[1]
    if a is v:
        return b
    if b is v:
        return a
    return None


def scale_of(ctx: PassContext, node: ir.Node | None, v: ir.Value) -> float | None:
    """c when ``node`` is Mul(v, c), Mul(c, v) or Div(v, 1/c), c a nonzero float32 constant
    scalar of rank <= 1 (so it cannot broadcast the result to a higher rank)."""
    if is_op(node, "Mul"):
        k = other_input(node, v)
    elif is_op(node, "Div") and node.inputs[0] is v:
        k = node.inputs[1]
    else:
        return None
    c = ctx.const(k)
    if c is None or c.size != 1 or c.ndim > 1 or c.dtype != np.float32 or not c.reshape(-1)[0]:
        return None
    c = float(c.reshape(-1)[0])
    return c if node.op_type == "Mul" else 1 / c


def as_int32(ctx: PassContext, v: ir.Value, casts: dict) -> ir.Value:
    """v as int32: one Cast per value (``casts`` remembers them across a pass's matches),
    placed right after v's producer, or first in the graph for an input."""
    if v.type.elem_type == ir.DataType.INT32:
        return v
    if id(v) not in casts:
        cast = ir.Node("Cast", [v], [ctx.fresh_name(v.name + "_int32")])
        cast.set_attr("to", int(ir.DataType.INT32))
        if v.producer is not None:
            ctx.graph.insert_after(v.producer, cast)
        else:
            ctx.graph.insert_before(ctx.graph.nodes[0], cast)
        casts[id(v)] = cast.outputs[0]
    return casts[id(v)]


def static_shape(v: ir.Value | None) -> tuple | None:
    s = v.shape if v is not None else None
    return tuple(s.dims) if s is not None else None


def same_dims(a: tuple | None, b: tuple | None) -> bool:
    """Two inferred shapes that are certainly equal (known ints or the same symbol)."""
    if a is None or b is None or len(a) != len(b):
        return False
    return all(x == y and x is not None for x, y in zip(a, b))


# ---------------------------------------------------------------------------------- cloning


def clone_model(model: ir.Model) -> ir.Model:
    """A copy whose graph can be edited freely. Tensors (read-only data) and functions are
    shared with the original; nodes, values and graphs are new."""
    m = ir.Model(
        clone_graph(model.graph, {}),
        opset_imports=dict(model.opset_imports),
        ir_version=model.ir_version,
        producer_name=model.producer_name,
        producer_version=model.producer_version,
    )
    m.functions = dict(model.functions)
    for attr in ("domain", "model_version", "doc_string", "base_dir", "extras"):
        setattr(m, attr, getattr(model, attr))
    m.metadata_props = dict(model.metadata_props)
    return m


def _clone_value(v: ir.Value) -> ir.Value:
    c = ir.Value(v.name, v.type, v.const_value)
    c.doc_string, c.metadata_props, c.extras = v.doc_string, dict(v.metadata_props), v.extras
    return c


def clone_graph(g: ir.Graph, vmap: dict[int, ir.Value]) -> ir.Graph:
    """Clone ``g``; ``vmap`` maps ids of outer values (already cloned) to their clones."""
    vmap = dict(vmap)

    def get(v: ir.Value | None) -> ir.Value | None:
        if v is None:
            return None
        c = vmap.get(id(v))
        if c is None:  # an undefined reference: keep it dangling, the plan will report it
            c = vmap[id(v)] = _clone_value(v)
        return c

    for v in g.inputs:
        vmap[id(v)] = _clone_value(v)
    for v in g.initializers.values():
        if id(v) not in vmap:
            vmap[id(v)] = _clone_value(v)
    nodes = []
    for n in g:
        outs = [_clone_value(v) for v in n.outputs]
        for v, c in zip(n.outputs, outs):
            vmap[id(v)] = c
        nodes.append((n, outs))
    new_nodes = []
    for n, outs in nodes:
        attrs = []
        for a in n.attributes.values():
            value = a.value
            if a.type == ir.AttrType.GRAPH and value is not None:
                value = clone_graph(value, vmap)
            elif a.type == ir.AttrType.GRAPHS and value:
                value = [clone_graph(s, vmap) for s in value]
            elif isinstance(value, list):
                value = list(value)
            attrs.append(ir.Attr(a.name, a.type, value, a.doc_string, a.ref_attr_name, a.extras))
        c = ir.Node(
            n.op_type, [get(v) for v in n.inputs], outs, attrs, n.domain, n.name, n.overload
        )
        c.doc_string, c.metadata_props, c.extras = n.doc_string, dict(n.metadata_props), n.extras
        new_nodes.append(c)
    out = ir.Graph(
        [vmap[id(v)] for v in g.inputs],
        [get(v) for v in g.outputs],
        new_nodes,
        [vmap[id(v)] for v in g.initializers.values()],
        name=g.name,
    )
    out.doc_string, out.metadata_props, out.extras = g.doc_string, dict(g.metadata_props), g.extras
    out.value_info = [get(v) for v in g.value_info]
    out.sparse_initializers = list(g.sparse_initializers)
    return out


def downstream_chain(
    root: ir.Value, position: dict, takes: Callable[[ir.Node, set[int]], bool]
) -> list[ir.Node]:
    """The nodes reachable from root's uses that ``takes(node, inside)`` accepts, ``inside``
    being the ids of root and of the accepted nodes' outputs, in graph order (see
    reachable_in_order)."""
    inside = {id(root)}
    members: list[ir.Node] = []
    for node in reachable_in_order(root, position, lambda n: takes(n, inside)):
        members.append(node)
        inside.update(id(v) for v in node.outputs)
    return members


#: The heapq module, once reachable_in_order first needs it.
_HEAPQ: list = [None]


def reachable_in_order(
    root: ir.Value, position: dict, accept: Callable[[ir.Node], bool]
) -> Iterator[ir.Node]:
    """The nodes reachable from root's uses through nodes ``accept`` accepts, each yielded once
    accepted, in graph order (``position``: node id -> index) so that a node's producers in
    the chain come first. The walk goes on from a node's users only after the caller has
    taken the node (its bookkeeping, which ``accept`` may read, is then up to date)."""
    heapq = _HEAPQ[0]
    if heapq is None:  # (here: only models with byte tensors or tree chains get this far;
        import heapq  # imported once: an import statement costs a call of its own)

        _HEAPQ[0] = heapq
    heap = [(position[id(n)], id(n), n) for n, _ in root.iter_uses() if id(n) in position]
    heapq.heapify(heap)
    seen = set()
    while heap:
        _, key, node = heapq.heappop(heap)
        if key in seen:
            continue
        seen.add(key)
        if not accept(node):
            continue
        yield node
        for v in node.outputs:
            for user, _ in v.iter_uses():
                if id(user) in position:
                    heapq.heappush(heap, (position[id(user)], id(user), user))
