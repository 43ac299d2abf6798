"""Compile a graph once into a flat execution plan, then run it many times.

At compile time every Value gets a slot in a list, every node gets its kernel and its parsed
attributes, subgraphs and local functions get plans of their own, and each step learns which
slots it is the last reader of (they are freed after it runs).

Running: on first use, each schedule (the steps a set of wanted outputs needs) is turned into
one generated Python function, straight-line code with one line per node,
``v12 = k3(v7, c2, axis=a3_axis)``: values live in local variables, attributes are bound as
keyword constants, initializers are constants, and a value is deleted after its last reader.
That leaves nothing per node but the kernel call itself (no argument lists, no ``**attrs``
dicts, no slot indexing). Profiled runs take a plain loop over the same steps instead, so that
each kernel call can be timed.
"""

from __future__ import annotations

import copy
import functools
import keyword
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import ir
from ..errors import OnyxError, RuntimeFailure
from ..ir.frozen import DataValue
from .bind import Step, StepContext, bind, find_kernel, no_kernel, node_label
from .fpstate import ignoring_fp_errors
from .registry import ONYX_DOMAIN, lookup
from .values import FreshList, describe, sparse_value, tensor_value

__all__ = [
    "Compiler",
    "Frame",
    "Plan",
    "Step",
    "StepContext",
    "bind",
    "find_kernel",
    "ignoring_fp_errors",
]

STANDARD_DOMAINS = ir.STANDARD_DOMAINS
#: (module constants: ``ir.AttrType.X`` reads through the enum class's ``__getattr__``)
_SUBGRAPH_KINDS = frozenset({ir.AttrType.GRAPH, ir.AttrType.GRAPHS})


class Frame:
    """The slots of one run of one plan, chained to the frame of the enclosing graph."""

    __slots__ = ("plan", "slots", "parent")

    def __init__(self, plan: Plan, slots: list, parent: Frame | None):
        self.plan, self.slots, self.parent = plan, slots, parent


# (DataValue: what @dataclass gives, without compiling methods at every import)
@dataclass(init=False, repr=False, eq=False)
class Compiler(DataValue):
    """What compiling needs beyond one graph: the model's functions and opsets."""

    model: ir.Model
    strict_attributes: bool = True
    functions: dict = field(default_factory=dict)

    def __init__(self, model: ir.Model, strict_attributes: bool = True, functions=None):
        self.model = model
        self.strict_attributes = strict_attributes
        # (whatever is passed, the model's own functions: as the dataclass's __post_init__ did)
        self.functions = {(f.domain, f.name): f for f in model.functions.values()}


class Plan:
    """The executable form of one graph (the main graph, a subgraph, or a function body)."""

    def __init__(
        self,
        graph: ir.Graph,
        compiler: Compiler,
        opsets: dict[str, int],
        outer: dict[int, int] | None = None,
        bindings: dict[str, ir.Attr] | None = None,
    ):
        self.graph = graph
        self.name = graph.name
        slot_of: dict[int, int] = {}
        self.values: list[ir.Value] = []

        def new_slot(v: ir.Value) -> int:
            slot_of[id(v)] = len(self.values)
            self.values.append(v)
            return slot_of[id(v)]

        self.input_slots = [new_slot(v) for v in graph.inputs]
        # outer-scope values this graph reads, copied in from the enclosing frame at each run
        captures = ir.captured_values(graph) if outer is not None else []
        self.captured = captures
        self.capture_slots = [new_slot(v) for v in captures]
        self.capture_sources = [outer[id(v)] for v in captures] if outer is not None else []
        for v in graph.initializers.values():
            if id(v) not in slot_of:
                new_slot(v)
        # sparse initializers are Values only by name (their nodes' inputs): slot them densified
        sparse = {sp.name: sp for sp in graph.sparse_initializers}
        sparse_slots: dict[int, Any] = {}
        if sparse:
            for node in graph:
                for v in node.inputs:
                    if v is not None and v.producer is None and v.name in sparse:
                        if id(v) not in slot_of:
                            sparse_slots[new_slot(v)] = sparse_value(sparse[v.name])
        self.steps: list[Step] = []
        values = self.values
        for node in graph:  # (new_slot, inline: a slot per named output of every node)
            for v in node.outputs:
                if v.name:
                    slot_of[id(v)] = len(values)
                    values.append(v)
        self.slot_of = slot_of
        self.template: list[Any] = [None] * len(values)
        template = self.template
        for v in graph.initializers.values():
            t = v.const_value
            if t is not None:
                template[slot_of[id(v)]] = tensor_value(t)
        for slot, value in sparse_slots.items():
            self.template[slot] = value
        self.input_defaults = {slot_of[id(v)] for v in graph.inputs if v.name in graph.initializers}
        for node in graph:
            self.steps.append(self._compile_node(node, compiler, opsets, bindings))
        self.output_slots = []
        for v in graph.outputs:
            if id(v) not in slot_of:
                raise OnyxError(f"graph {graph.name!r}: output {v.name!r} is never produced")
            self.output_slots.append(slot_of[id(v)])
        self._schedules: dict[tuple[int, ...], list[Step]] = {}
        self.default_schedule = self.schedule(tuple(self.output_slots))
        self._runners: dict[tuple[int, ...] | None, Any] = {}

    # -- compiling ------------------------------------------------------------------------------
    def _slot(self, v: ir.Value | None, node: ir.Node) -> int:
        if v is None or not v.name:
            return -1
        try:
            return self.slot_of[id(v)]
        except KeyError:
            raise OnyxError(
                f"{node_label(node)} in graph {self.name!r}: input {v.name!r} is not defined "
                "(not a graph input, initializer, outer-scope value or earlier node output)"
            ) from None

    def _compile_node(self, node, compiler: Compiler, opsets, bindings) -> Step:
        domain = ir.canonical_domain(node.domain)
        version = ir.opset_for(opsets, domain)
        slot_of = self.slot_of
        inputs = node.inputs
        try:  # (_slot, inline: a node's inputs are all defined but in a broken graph)
            ins = tuple([-1 if v is None or not v.name else slot_of[id(v)] for v in inputs])
        except KeyError:
            ins = tuple(self._slot(v, node) for v in inputs)  # (raises, naming the input)
        node_attrs = node.attributes
        if node_attrs and node.has_subgraphs():
            reads = tuple(self._slot(v, node) for v in ir.inputs_with_captures(node))
            reads = tuple(r for r in reads if r >= 0)
        else:  # (no subgraph: it reads its inputs alone)
            reads = tuple([r for r in ins if r >= 0])
        outs_list = list(node.outputs)
        while outs_list and not outs_list[-1].name:
            outs_list.pop()
        outs = tuple([slot_of[id(v)] if v.name else -1 for v in outs_list])

        def common() -> dict:  # (a step that runs a body: the kernels' steps bind these)
            return dict(
                node=node,
                ins=ins,
                outs=outs,
                n_outputs=len(outs),
                outputs_wanted=tuple(o >= 0 for o in outs),
                opset=version or 0,
                reads=reads,
            )

        attrs = self._resolve_attrs(node, bindings) if node_attrs else {}
        functions = compiler.functions
        function = functions.get((node.domain, node.op_type)) if functions else None
        # (the optimizer's own functions run on onyx's kernels; their bodies are for others)
        if function is not None and not (
            node.domain == ONYX_DOMAIN and lookup(node.op_type, node.domain) is not None
        ):
            return self._function_step(function, node, attrs, compiler, common())
        if version is not None and (domain, node.op_type) == (
            "ai.onnx.preview.training",
            "Gradient",
        ):
            return self._gradient_step(node, compiler, opsets, common())
        kernel = lookup(node.op_type, domain, version) if version is not None else None
        if kernel is None and version is not None:
            body = standard_function(node.op_type, domain, version)
            if body is not None:  # no kernel: run the op as the standard defines it
                return self._function_step(body, node, attrs, compiler, common())
            raise no_kernel(node, version)
        step = bind(
            node,
            opsets,
            attrs=attrs,
            strict=compiler.strict_attributes,
            compile_graph=lambda g: Plan(g, compiler, opsets, outer=self.slot_of),
            kernel=kernel,
        )  # (raises for a missing opset or kernel, naming the node)
        n_missing = step.n_inputs - len(ins)
        step.ins = ins + (-1,) * n_missing if n_missing > 0 else ins  # (omitted trailing inputs)
        step.outs, step.reads = outs, reads
        runs_subgraphs = bool(attrs) and not _SUBGRAPH_KINDS.isdisjoint(
            [a.type for a in attrs.values()]
        )
        step.uses_frame = step.takes_ctx and runs_subgraphs
        fn = kernel.fn
        prepare = getattr(fn, "prepare", None)
        if prepare is not None and not step.takes_ctx:  # (kernels/derived.py: prepared)
            step.fn = PreparedCall(prepare, {**kernel.attr_defaults, **step.attrs})
            step.attrs = {}
        elif getattr(fn, "bind", None) is not None and not step.uses_frame:
            constant = tuple([i < 0 or self.is_constant(i) for i in step.ins])
            binds = all(constant[k] for k in fn.bind_constants)
            # (make gets every attribute, defaults filled in; a node that never binds calls
            # the kernel with its own attributes only, as a plain step does)
            attrs = {**kernel.attr_defaults, **step.attrs} if binds else dict(step.attrs)
            make = fn.bind if binds else None
            if step.takes_ctx:  # (no subgraph: its context made once, kernel and make get it)
                ctx = StepContext(step, None)
                fn, make = functools.partial(fn, ctx), make and functools.partial(make, ctx)
                step.takes_ctx = False
            step.fn = BoundCall(fn, attrs, make, constant)
            step.attrs = {}
        return step

    def is_constant(self, slot: int) -> bool:
        """Whether the slot holds the same object at every run: an initializer no input
        overrides."""
        return self.template[slot] is not None and slot not in self.input_defaults

    @staticmethod
    def _resolve_attrs(node: ir.Node, bindings) -> dict[str, ir.Attr]:
        """Node attributes, with references to the enclosing function's attributes resolved."""
        out = {}
        for name, a in node.attributes.items():
            if a.ref_attr_name:  # (is_ref, without the property's call)
                bound = (bindings or {}).get(a.ref_attr_name)
                if bound is None:
                    continue  # the caller did not set it and it has no default: use the op's
                a = ir.Attr(name, bound.type, bound.value)
            out[name] = a
        return out

    def _gradient_step(self, node, compiler, opsets, common) -> Step:
        """Gradient differentiates values of this graph: build its graph, run it as a subgraph."""
        from .gradient import gradient_graph

        opset = ir.opset_for(opsets, "")
        body = Plan(
            gradient_graph(node, self.graph, opset=opset), compiler, opsets, outer=self.slot_of
        )
        captured = tuple(self.slot_of[id(v)] for v in body.captured)
        common["reads"] = tuple(dict.fromkeys(common["reads"] + captured))

        def run_gradient(ctx, *args):
            return tuple(body.run(list(args), ctx.frame))

        return Step(fn=run_gradient, takes_ctx=True, attrs={}, uses_frame=True, **common)

    def _function_step(self, function: ir.Function, node, attrs, compiler, common) -> Step:
        bindings = {a.name: a for a in function.attribute_defaults}
        bindings.update(attrs)
        body = Plan(function.graph, compiler, function.opset_imports, bindings=bindings)
        n_formal = len(body.input_slots)

        def call_function(ctx, *args):
            args = list(args) + [None] * (n_formal - len(args))
            return tuple(body.run(args[:n_formal], None))

        return Step(fn=call_function, takes_ctx=True, attrs={}, **common)

    def with_steps(self, steps: list[Step]) -> Plan:
        """A copy of this plan running ``steps`` (the same slots; schedules made afresh)."""
        clone = copy.copy(self)
        clone.__dict__.update(steps=list(steps), _schedules={}, _runners={})
        clone.default_schedule = clone.schedule(tuple(clone.output_slots))
        return clone

    # -- scheduling -----------------------------------------------------------------------------
    def schedule(self, wanted: tuple[int, ...]) -> list[Step]:
        """The steps needed for the ``wanted`` slots, each knowing which slots to free after it."""
        cached = self._schedules.get(wanted)
        if cached is not None:
            return cached
        producer = {o: s for s in self.steps for o in s.outs if o >= 0}
        needed: set[int] = set()
        stack = [producer[w] for w in wanted if w in producer]
        while stack:
            s = stack.pop()
            if id(s) in needed:
                continue
            needed.add(id(s))
            stack.extend(producer[r] for r in s.reads if r in producer)
        steps = [s for s in self.steps if id(s) in needed]
        keep = set(wanted)
        frees: list[list[int]] = [[] for _ in steps]
        for slot, i in _last_reads(steps).items():
            if slot not in keep:
                frees[i].append(slot)
        scheduled = [_with_frees(s, tuple(f)) for s, f in zip(steps, frees)]
        self._schedules[wanted] = scheduled
        return scheduled

    # -- running --------------------------------------------------------------------------------
    def run(
        self,
        inputs: list,
        parent: Frame | None,
        wanted: tuple[int, ...] | None = None,
        profiler=None,
    ):
        if profiler is None:
            runner = self._runners.get(wanted)
            if runner is None:
                runner = self.runner(wanted)
            if len(inputs) != len(self.input_slots):  # (the generated code reads them all)
                inputs = (list(inputs) + [None] * len(self.input_slots))[: len(self.input_slots)]
            return runner(inputs, parent)
        return self._run_profiled(self.frame(inputs, parent), wanted, profiler)

    def runner(self, wanted: tuple[int, ...] | None = None):
        """The generated function running the schedule for ``wanted`` (made at first use)."""
        runner = self._runners.get(wanted)
        if runner is None:
            runner = self._runners[wanted] = _generate(self, wanted)
        return runner

    def frame(self, inputs: list, parent: Frame | None) -> Frame:
        """A run's frame: the constants, the inputs (a graph input with an initializer keeps
        it where the input is None) and the captured outer values in their slots."""
        slots = list(self.template)
        for slot, value in zip(self.input_slots, inputs):
            if value is not None or slot not in self.input_defaults:
                slots[slot] = value
        if self.capture_slots:
            src = parent.slots
            for mine, theirs in zip(self.capture_slots, self.capture_sources):
                slots[mine] = src[theirs]
        return Frame(self, slots, parent)

    def _run_profiled(self, frame: Frame, wanted, profiler) -> list:
        """The same steps as the generated runner, in a loop that times each kernel call."""
        slots = frame.slots
        for step in self.default_schedule if wanted is None else self.schedule(wanted):
            args = [slots[i] if i >= 0 else None for i in step.ins]
            start = time.perf_counter()
            try:
                result = step.call(args, frame)
            except OnyxError:
                raise
            except Exception as e:
                raise self.failure(step, args, e) from e
            profiler.node(step, start, time.perf_counter(), args, result)
            for slot, value in zip(step.outs, result):
                if slot >= 0:
                    slots[slot] = value
            for slot in step.frees:
                slots[slot] = None
        return [slots[i] for i in (self.output_slots if wanted is None else wanted)]

    def failure(self, step: Step, args: list, e: Exception) -> RuntimeFailure:
        return RuntimeFailure(
            f"{step.label()} in graph {self.name!r} failed with inputs "
            f"({', '.join(describe(a) for a in args)}): {type(e).__name__}: {e}"
        )


class OutputCheck:
    """Checks a run's step outputs against the types shape inference proved for them: element
    type, rank and every dim inference knows as a number (symbolic and unknown dims are
    skipped). Plugs into the profiled loop (``Plan.run(..., profiler=check)``), so a session
    runs it once per input shape signature and the generated runner stays as it is. A
    mismatch is a RuntimeFailure naming the node whose kernel produced it."""

    def __init__(self, plan: Plan, types: dict, then=None):
        #: slot -> (numpy dtype or None, dims with None where unknown, the type for messages)
        self.expected: dict[int, tuple] = {}
        self.then = then  # a profiler to pass each step on to
        self.graph_name = plan.name
        for step in plan.steps:
            for v, slot in zip(step.node.outputs, step.outs):
                known = types.get(id(v))
                entry = _expectation(known[1]) if slot >= 0 and known and known[0] is v else None
                if entry is not None:
                    self.expected[slot] = entry

    def node(self, step, start, end, args, result) -> None:
        for v, slot, value in zip(step.node.outputs, step.outs, result):
            want = self.expected.get(slot)
            if want is not None and not _matches(value, want[0], want[1]):
                raise RuntimeFailure(
                    f"{step.label()} in graph {self.graph_name!r}: output {v.name!r} is "
                    f"{describe(value)}, shape inference proved {_with_dims(want[2])}"
                )
        if self.then is not None:
            self.then.node(step, start, end, args, result)

    def span(self, *args, **kwargs) -> None:
        if self.then is not None:
            self.then.span(*args, **kwargs)


def _expectation(t) -> tuple | None:
    if not isinstance(t, ir.TensorType) or t.elem_type in (None, ir.DataType.STRING):
        return None
    try:
        dtype = np.dtype(ir.to_numpy(t.elem_type))
    except Exception:  # an element type without a numpy form: check the shape only
        dtype = None
    dims = None
    if t.shape is not None:
        dims = tuple(d if type(d) is int else None for d in t.shape.dims)
    if dtype is None and dims is None:
        return None
    return dtype, dims, t


def _with_dims(t) -> str:
    """A tensor type with its dims, as the check's message names it (a TensorType's own
    string leaves them out): ``tensor(float)[n,3]``, ``?`` where unknown."""
    return f"{t}{t.shape}" if t.shape is not None else f"{t} of unknown rank"


def _matches(value, dtype, dims) -> bool:
    if not isinstance(value, np.ndarray | np.generic):
        return False
    if dtype is not None and value.dtype != dtype:
        return False
    if dims is None:
        return True
    shape = np.shape(value)
    if len(shape) != len(dims):
        return False
    return all(d is None or d == s for d, s in zip(dims, shape))


def standard_function(op_type: str, domain: str, version: int) -> ir.Function | None:
    """The standard's function body for an op at opset ``version``, as an ``ir.Function`` whose
    attribute defaults are the schema's (so a body's references to attributes the node leaves
    unset get the op's defaults); None when the op has no context-free body."""
    from ..defs import get_schema

    schema = get_schema(op_type, version, domain)
    body = schema.function_for(version) if schema is not None else None
    if body is None:
        return None
    defaults = [ir.Attr(a.name, a.type, a.default) for a in schema.attributes.values()]
    return body.to_function(domain, op_type, [d for d in defaults if d.value is not None])


# -- the generated runner -----------------------------------------------------------------------


def _generate(plan: Plan, wanted: tuple[int, ...] | None):
    """One Python function running the schedule for ``wanted``: ``run(slots, frame) -> outputs``.

    Slot ``i`` is the local ``v{i}`` (an initializer that is no graph input: the constant
    ``c{i}``); step ``j`` calls ``k{j}`` with its attributes as keywords bound to constants.
    Each step's code sits on its own lines, so that a failure is traced back to its step by
    the traceback's line number (no per-step bookkeeping while running).
    """
    steps = plan.default_schedule if wanted is None else plan.schedule(wanted)
    out_slots = plan.output_slots if wanted is None else list(wanted)
    const_slots = {i for i in range(len(plan.template)) if plan.is_constant(i)}
    # (a shape memo's roots are Shape and Size steps: shape_memo.py is imported only for a
    # schedule that has one; a CNN's has none, and its session's plan.py is the smaller)
    memo = None
    if any(s.node.op_type in ("Shape", "Size") for s in steps):
        from .shape_memo import shape_memo

        memo = shape_memo(plan, steps, const_slots, out_slots)
    if memo is not None:  # (its steps first: they read only inputs' shapes and constants)
        steps = memo.steps + [s for s in steps if id(s) not in memo.ids]
    # (runs of channels-last layers as one native call each; imported here: a process whose
    # one run is its first, checked run never generates a runner; and only where two steps
    # may chain, its layers all being the layout pass's Nhwc ops: a model without them, the
    # tiny CNN, paid a second run the module's import to find none)
    if sum(s.node.op_type.startswith("Nhwc") for s in steps) >= 2:
        from . import conv_chain

        first = len(memo.steps) if memo is not None else 0
        steps = conv_chain.fuse(plan, steps, out_slots, first)
    produced = {o for s in steps for o in s.outs if o >= 0}
    used = {r for s in steps for r in s.reads} | set(out_slots)
    env: dict[str, Any] = {"_StepContext": StepContext, "_OnyxError": OnyxError, "_nd": np.ndarray}

    def name(slot: int) -> str:
        if slot in const_slots:
            env[f"c{slot}"] = plan.template[slot]
            return f"c{slot}"
        return f"v{slot}"

    lines = ["def run(inputs, parent):"]
    # (a frame only where a step's subgraphs read this run's slots; a kernel that takes a
    # context but runs no subgraph gets one made at generation, its frame None)
    if any(s.uses_frame for s in steps):  # (their kernels get the frame: the slots as ever)
        env["_frame"] = plan.frame
        lines += ["    frame = _frame(inputs, parent)", "    slots = frame.slots"]
        loaded = sorted(s for s in used - produced - const_slots)
        lines += [f"    v{i} = slots[{i}]" for i in loaded]
    else:  # straight from the inputs and the enclosing frame: no frame of its own
        lines += _loads(plan, used - produced - const_slots, env)
    lines.append("    try:")
    if memo is not None:
        env["_memo"], env["_keep"] = memo.values, memo.keep
        lines += memo.head_lines()
        dels = memo.frees(steps, set(out_slots) | const_slots)
    line_step: dict[int, int] = {}
    for j, step in enumerate(steps):
        first = len(lines) + 1  # code line numbers start at 1
        indent = "        "
        if memo is not None and j < len(memo.steps):
            indent = "            "  # (inside the memo's ``if``)
        elif memo is not None and j == len(memo.steps):
            lines += memo.tail_lines()
        fn = step.fn
        if fn.__class__ is PreparedCall and fn.fn is not None:
            fn = fn.fn  # (made at an earlier call, the checked run's: no frame of its own)
        env[f"k{j}"] = fn
        inputs = [name(i) if i >= 0 else "None" for i in step.ins]
        attrs, guard = step.attrs, None
        if fn.__class__ is BoundCall and not attrs:
            # a bound step: its signature's call looked up inline; an unknown signature goes
            # to the BoundCall, a declined one (None) to the kernel as written
            env[f"k{j}"], attrs = fn.fn, fn.attrs
            if fn.make is not None:  # (None: an input it needs constant is not)
                env[f"b{j}"], env[f"n{j}"] = fn.calls, fn
                guard = fn.guard(inputs, f"b{j}", f"n{j}")
        args = list(inputs)
        extra = {}
        for attr, value in attrs.items():
            if attr.isidentifier() and not keyword.iskeyword(attr):
                env[f"a{j}_{attr}"] = value
                args.append(f"{attr}=a{j}_{attr}")
            else:
                extra[attr] = value
        if extra:
            env[f"a{j}"] = extra
            args.append(f"**a{j}")
        if step.uses_frame:  # its subgraphs read this frame's slots
            lines += [f"        slots[{r}] = v{r}" for r in step.reads if r not in const_slots]
            env[f"s{j}"] = step
            args.insert(0, f"_StepContext(s{j}, frame)")
        elif step.takes_ctx:  # (no subgraph: its context made once, its frame None)
            env[f"x{j}"] = StepContext(step, None)
            args.insert(0, f"x{j}")
        call = f"k{j}({', '.join(args)})"
        outs = [(k, o) for k, o in enumerate(step.outs) if o >= 0 and o in used]
        code = []
        if guard is not None:
            code.append(f"_b = {guard}")
            call = f"({call} if _b is None else _b({', '.join(inputs)}))"
        if len(step.outs) == 1 and outs:
            o = outs[0][1]
            code.append(f"v{o} = {call}")
            code.append(f"if v{o}.__class__ is tuple: v{o} = v{o}[0]")
        elif outs:
            code.append(f"r = {call}")
            code.append("if r.__class__ is not tuple: r = (r,)")
            code += [f"v{o} = r[{k}] if len(r) > {k} else None" for k, o in outs]
        else:
            code.append(call)
        frees = step.frees if memo is None else dels[j]
        dead = [f"v{i}" for i in frees if i not in const_slots]
        if dead:
            code.append(f"del {', '.join(dead)}")
        lines += [indent + c for c in code]
        for n in range(first, len(lines) + 1):
            line_step[n] = j
    if memo is not None and len(steps) == len(memo.steps):
        lines += memo.tail_lines()
    if not steps:
        lines.append("        pass")
    lines += [
        "    except _OnyxError:",
        "        raise",
        "    except Exception as e:",
        "        raise _fail(e, locals()) from e",
        f"    return [{', '.join(name(i) for i in out_slots)}]",
    ]

    def fail(e: Exception, local_values: dict) -> RuntimeFailure:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code is not code:
            tb = tb.tb_next
        step = steps[line_step.get(tb.tb_lineno if tb is not None else -1, 0)]
        values = {**env, **local_values}
        args = [values.get(name(i)) if i >= 0 else None for i in step.ins]
        return plan.failure(step, args, e)

    env["_fail"] = fail
    exec(_compiled("\n".join(lines), f"<onyx plan {plan.name!r}>"), env)
    code = env["run"].__code__
    return env["run"]


#: (runner source, file name) -> its code object: compiling a runner costs as much as a few
#: runs of a small model, and a session of a model created before in the process, or of one
#: alike in structure, generates the same text (the values it reads live in ``env``, apart
#: from the text). Code objects are immutable: runners made from one share it.
RUNNER_CODE: dict[tuple[str, str], Any] = {}
#: Entries RUNNER_CODE keeps (it starts afresh when full), and the longest source it keeps (a
#: big graph's runner is compiled once per session, its kernels' time dwarfs it).
MAX_CACHED_RUNNERS = 256
MAX_CACHED_SOURCE = 256 << 10


def _compiled(source: str, filename: str):
    key = (source, filename)
    code = RUNNER_CODE.get(key)
    if code is None:
        code = compile(source, filename, "exec")
        if len(source) > MAX_CACHED_SOURCE:
            return code
        if len(RUNNER_CODE) >= MAX_CACHED_RUNNERS:
            RUNNER_CODE.clear()
        RUNNER_CODE[key] = code
    return code


def _last_reads(steps: list[Step]) -> dict[int, int]:
    """Each slot the steps read -> the index of the last step reading it (where it is freed)."""
    last_read: dict[int, int] = {}
    for i, s in enumerate(steps):
        for r in s.reads:
            last_read[r] = i
    return last_read


def _loads(plan: Plan, slots: set[int], env: dict) -> list[str]:
    """The generated runner's lines loading the ``slots`` it reads from its inputs and the
    enclosing frame, as ``Plan.frame`` places them (a graph input with an initializer: the
    initializer where the input is None)."""
    lines = []
    for k, slot in enumerate(plan.input_slots):
        if slot in slots:
            lines.append(f"    v{slot} = inputs[{k}]")
            if slot in plan.input_defaults:
                env[f"d{slot}"] = plan.template[slot]
                lines.append(f"    if v{slot} is None: v{slot} = d{slot}")
    captured = [(m, t) for m, t in zip(plan.capture_slots, plan.capture_sources) if m in slots]
    if captured:
        lines.append("    outer = parent.slots")
        lines += [f"    v{m} = outer[{t}]" for m, t in captured]
    # (a slot read before any step writes it, neither input nor capture: None, as in a frame)
    known = set(plan.input_slots) | set(plan.capture_slots)
    lines += [f"    v{slot} = None" for slot in sorted(slots - known)]
    return lines


class PreparedCall:
    """A node's compiled kernel (kernels/derived.py: prepared): made at the first call, so an
    error making it surfaces there, as the kernel's own would."""

    __slots__ = ("make", "attrs", "fn")

    def __init__(self, make, attrs: dict):
        self.make, self.attrs, self.fn = make, attrs, None

    def __call__(self, *inputs):
        fn = self.fn
        if fn is None:  # (two threads may both make it: either result is right)
            fn = self.fn = self.make(self.attrs)
        return fn(*inputs)


#: Input signatures a bound step keeps calls for (a new one past this starts afresh).
_BOUND_SIGNATURES = 8


class BoundCall:
    """A node whose kernel sets up a call per input signature (registry.binds): the call
    made for the signature of the non-constant inputs' shapes and dtypes, kept in ``calls``
    (None where the kernel declined: it runs as written; ``make`` None: every signature
    declined, an input the kernel's binds needs constant is not). The generated runner looks
    the call up inline (``guard``); other callers (the checked first run, the profiled loop,
    a wrapped step) come here."""

    __slots__ = ("fn", "attrs", "make", "constant", "varying", "calls")

    def __init__(self, fn, attrs: dict, make, constant: tuple[bool, ...]):
        self.fn, self.attrs, self.make, self.constant = fn, attrs, make, constant
        self.varying = tuple(k for k, c in enumerate(constant) if not c)
        #: signature -> its call; the generated code holds this dict: cleared, never replaced
        self.calls: dict = {}

    def key(self, inputs: tuple) -> tuple | None:
        """The inputs' signature, or None where a non-constant input is no ndarray."""
        key = []
        for k in self.varying:
            x = inputs[k] if k < len(inputs) else None
            if x.__class__ is not np.ndarray:
                return None
            key += (x.shape, x.dtype)
        return tuple(key)

    def guard(self, names: list[str], calls: str, new: str) -> str:
        """Generated code: for the variables ``names`` (the inputs), the signature's call,
        ``new`` (this object: binds it) for a signature not seen, or None (the kernel as
        written: declined, or an input no ndarray)."""
        names = [names[k] for k in self.varying]
        if not names:
            return f"{calls}.get((), {new})"
        is_array = " and ".join(f"{n}.__class__ is _nd" for n in names)
        key = "".join(f"{n}.shape, {n}.dtype, " for n in names)
        return f"{calls}.get(({key}), {new}) if {is_array} else None"

    def __call__(self, *inputs):
        key = None if self.make is None else self.key(inputs)
        call = None
        if key is not None:
            call = self.calls.get(key, self)
            if call is self:  # (two threads may both make it: either result is right)
                call = self.make(inputs, self.attrs, self.constant)
                if len(self.calls) >= _BOUND_SIGNATURES:
                    self.calls.clear()
                self.calls[key] = call  # (None: declined, the kernel as written)
        if call is None:
            return self.fn(*inputs, **self.attrs)
        return call(*inputs)


def _with_frees(step: Step, frees: tuple[int, ...]) -> Step:
    if step.frees == frees:
        return step
    # (copy.copy's fields alone, without its __reduce_ex__ round: a plan copies most steps)
    cls = step.__class__
    clone = cls.__new__(cls)
    clone.__dict__.update(step.__dict__)
    clone.frees = frees
    return clone


def as_array_result(value: Any) -> Any:
    """A kernel result as a caller gets it: arrays are owned and writeable, scalars 0-d arrays."""
    if isinstance(value, np.ndarray):
        return value if value.flags.writeable else value.copy()
    if isinstance(value, np.generic):
        return np.asarray(value)
    if value.__class__ is FreshList:
        return list(value)
    if isinstance(value, list):
        return [as_array_result(v) for v in value]
    if isinstance(value, dict):
        if _PLAIN.issuperset(map(type, value.values())):  # ZipMap's rows: one C-level check
            return dict(value)
        return {k: as_array_result(v) for k, v in value.items()}
    return value


#: value types as_array_result hands back as they are
_PLAIN = frozenset({float, int, str, bool})
