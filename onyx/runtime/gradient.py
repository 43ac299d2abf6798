"""ai.onnx.preview.training::Gradient as a graph: reverse-mode differentiation of the enclosing graph.

Gradient(xs, zs, y) names tensors of the graph it sits in; its inputs are the values of xs then zs
at which dy/dx is wanted. :func:`gradient_graph` builds a new graph that

1. takes fresh inputs standing for xs and zs (in that order),
2. recomputes the forward path from them to y (copies of the nodes between them; values off the
   path stay the ORIGINAL Values, captured from the enclosing scope at run time),
3. runs the chain rule backwards from the seed dy = ones_like(y), one rule per op type, with
   broadcast gradients summed back to their input's shape,

and outputs dy/dx for each x of xs, in order (zeros when y does not depend on x). Only standard
ai.onnx ops are emitted, in the form valid at the opset in force (``opset``; newest when None):
static shapes are used where the Values' types tell them, Shape ops at run time otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import ir
from ..errors import NotImplementedOp, OnyxError
from ..ir.dtypes import to_numpy

Dims = tuple  # static shape: ints, symbols (str) or None (unknown) per axis
NEWEST = 1 << 30  # ``opset=None`` means the newest forms of every op


def gradient_graph(node: ir.Node, graph: ir.Graph, *, opset: int | None = None) -> ir.Graph:
    """The graph computing ``node``'s outputs (dy/dx per x of xs) from ``node``'s inputs.

    ``opset`` is the ai.onnx opset version the graph will run at (it picks the form of ops such
    as ReduceSum whose axes moved from attribute to input at version 13).
    """
    xs, zs, y_name = list(node.attr("xs") or []), list(node.attr("zs") or []), node.attr("y")
    label = f"Gradient node {node.name!r}" if node.name else "Gradient node"
    if not y_name or not xs:
        raise OnyxError(f"{label}: attributes 'xs' and 'y' are required")
    if len(node.inputs) != len(xs) + len(zs):
        raise OnyxError(
            f"{label}: {len(node.inputs)} inputs given, xs and zs name {len(xs) + len(zs)}"
        )
    by_name = _values_by_name(graph)
    missing = [n for n in [*xs, *zs, y_name] if n not in by_name]
    if missing:
        raise OnyxError(f"{label}: {missing} name no value of graph {graph.name!r}")
    cut = [by_name[n] for n in [*xs, *zs]]
    y = by_name[y_name]
    # The original types describe the copies only when the inputs are those very tensors (or
    # have the same declared type): Gradient may be fed other values, of other shapes.
    same_types = all(
        v is c or (v is not None and v.type is not None and v.type == c.type)
        for v, c in zip(node.inputs, cut)
    )
    return _Differentiator(node, graph, label, opset or NEWEST, same_types).build(cut, xs, y)


def _values_by_name(graph: ir.Graph) -> dict[str, ir.Value]:
    found = {v.name: v for v in ir.captured_values(graph) if v.name}
    found.update((v.name, v) for v in graph.values() if v.name)
    return found


class _Differentiator:
    """Builds one gradient graph: forward copies, then backward nodes (see the module doc)."""

    def __init__(self, node: ir.Node, graph: ir.Graph, label: str, opset: int, same_types: bool):
        self.node, self.outer, self.label = node, graph, label
        self.opset, self.same_types = opset, same_types
        self.prefix = f"{node.name or 'Gradient'}/"
        self.nodes: list[ir.Node] = []
        self.shapes: dict[int, Dims] = {}  # static shapes of values this builder made
        self.elems: dict[int, int] = {}  # element types of values this builder made
        self.dtype: int | None = None  # element type of the differentiated values
        self._count = 0

    # -- the three phases -----------------------------------------------------------------------
    def build(self, cut: list[ir.Value], xs: list[str], y: ir.Value) -> ir.Graph:
        inputs = [self._fresh_input(v, c) for v, c in zip(self.node.inputs, cut)]
        new_of = {id(c): i for c, i in zip(cut, inputs)}
        path = self._forward_path(y, new_of)
        copies = [self._copy(n, new_of) for n in path]
        # values that depend on an x (not only on zs): the ones gradients flow through
        live = {id(v) for v in inputs[: len(xs)]}
        for c in copies:
            if any(v is not None and id(v) in live for v in c.inputs):
                live.update(id(v) for v in c.outputs)
        y_new = new_of.get(id(y), y)
        self.dtype = self._first_elem(
            [y, *cut[: len(xs)], *(v for c in copies for v in c.outputs if id(v) in live)]
        )
        grads = self._backward(copies, y_new, live)
        # y independent of x: dy/dx = 0
        outputs = [grads.get(id(x)) for x in inputs[: len(xs)]]
        outputs = [self._zeros_like(x) if g is None else g for x, g in zip(inputs, outputs)]
        return self._graph(inputs, outputs)

    def _forward_path(self, y: ir.Value, new_of: dict[int, ir.Value]) -> list[ir.Node]:
        """Nodes of the enclosing graph between the cut values (xs, zs) and y, in graph order."""
        own = {id(n) for n in self.outer}
        ancestors: set[int] = set()
        stack = [] if id(y) in new_of else [y]
        while stack:
            v = stack.pop()
            p = v.producer
            if p is None or id(p) not in own or id(p) in ancestors:
                continue
            ancestors.add(id(p))
            stack.extend(u for u in _reads(p) if id(u) not in new_of)
        depends = set(new_of)
        path = []
        for n in self.outer:
            if id(n) in ancestors and any(id(u) in depends for u in _reads(n)):
                if n is self.node:
                    raise NotImplementedOp(f"{self.label}: y depends on the Gradient itself")
                depends.update(id(v) for v in n.outputs)
                path.append(n)
        return path

    def _copy(self, n: ir.Node, new_of: dict[int, ir.Value]) -> ir.Node:
        """A copy of forward node ``n`` reading the recomputed values (``new_of``) where it can."""
        for sub in n.subgraphs():
            if any(id(v) in new_of for v in ir.captured_values(sub)):
                raise NotImplementedOp(
                    f"{self.label}: node {n.name!r} ({n.op_type}) reads recomputed values "
                    "inside a subgraph"
                )
        copy = ir.Node(
            n.op_type,
            [None if v is None else new_of.get(id(v), v) for v in n.inputs],
            [self._name(v.name) if v.name else "" for v in n.outputs],
            list(n.attributes.values()),
            domain=n.domain,
            name=self._name(n.name or n.op_type),
        )
        copy.extras = n  # the original, for error messages
        for old, new in zip(n.outputs, copy.outputs):
            new_of[id(old)] = new
            if self.same_types:
                new.type = old.type
        out = copy.outputs[0]
        if self.shape(out) is None:
            shape = self._infer_shape(copy)
            if shape is not None:
                self.shapes[id(out)] = shape
        if self.elem(out) is None and copy.inputs and copy.inputs[0] is not None:
            # every op with a derivative rule keeps its first input's element type, but Cast
            elem = copy.attr("to") if copy.op_type == "Cast" else None
            if copy.op_type in _RULES and copy.op_type != "Cast":
                elem = self.elem(copy.inputs[0])
            if elem:
                self.elems[id(out)] = elem
        self.nodes.append(copy)
        return copy

    def _infer_shape(self, n: ir.Node) -> Dims | None:
        """Static output shape of an elementwise forward op (declared types often stop at inputs)."""
        shapes = [self.shape(v) for v in n.inputs if v is not None]
        if not shapes or any(s is None for s in shapes):
            return None
        if n.op_type in _BROADCASTING:
            out = shapes[0]
            for s in shapes[1:]:
                out = _broadcast_shape(out, s)
            return out
        return shapes[0] if n.op_type in _SAME_SHAPE else None

    def _backward(self, copies: list[ir.Node], y: ir.Value, live: set[int]) -> dict[int, ir.Value]:
        grads: dict[int, ir.Value] = {
            id(y): self.op("Expand", self.const(1, y), self.op("Shape", y))
        }
        self.shapes[id(grads[id(y)])] = self.shape(y)
        for n in reversed(copies):
            g = [grads.get(id(v)) for v in n.outputs]
            if all(v is None for v in g):
                continue
            rule = _RULES.get(n.op_type) if n.domain in ("", "ai.onnx") else None
            if rule is None:
                orig = n.extras
                raise NotImplementedOp(
                    f"{self.label}: no derivative rule for node {orig.name!r} "
                    f"({(n.domain + '::') if n.domain else ''}{n.op_type})"
                )
            for v, dv in zip(n.inputs, rule(self, n, g)):
                if v is None or dv is None or id(v) not in live:
                    continue
                prev = grads.get(id(v))
                grads[id(v)] = dv if prev is None else self.op("Add", prev, dv)
        return grads

    def _graph(self, inputs: list[ir.Value], outputs: list[ir.Value]) -> ir.Graph:
        """The graph of the nodes the outputs need; the others are dropped (and detached)."""
        needed: set[int] = set()
        mine = {id(v): n for n in self.nodes for v in n.outputs}
        stack = list(outputs)
        while stack:
            p = mine.get(id(stack.pop()))
            if p is not None and id(p) not in needed:
                needed.add(id(p))
                stack.extend(v for v in p.inputs if v is not None)
        for n in self.nodes:
            if id(n) not in needed:
                n.detach()
        kept = [n for n in self.nodes if id(n) in needed]
        g = ir.Graph(inputs, outputs, kept, name=self.prefix + "gradient")
        for x, out in zip(inputs, outputs):
            if out.type is None and x.type is not None:
                out.type = x.type
        return g

    # -- values ---------------------------------------------------------------------------------
    def _name(self, base: str) -> str:
        self._count += 1
        return f"{self.prefix}{base}#{self._count}"

    def _fresh_input(self, given: ir.Value | None, named: ir.Value) -> ir.Value:
        v = ir.Value(self._name(named.name))
        v.type = given.type if given is not None and given.type is not None else None
        if v.type is None and self.same_types:
            v.type = named.type
        return v

    def shape(self, v: ir.Value) -> Dims | None:
        """Static shape of ``v`` (None when even its rank is unknown)."""
        if id(v) in self.shapes:
            return self.shapes[id(v)]
        s = v.shape
        return None if s is None else tuple(s.dims)

    def elem(self, v: ir.Value) -> int | None:
        if id(v) in self.elems:
            return self.elems[id(v)]
        e = v.dtype
        return e if isinstance(e, int) else None  # tensors only (a sequence's is a Type)

    def _first_elem(self, values) -> int | None:
        return next((e for e in (self.elem(v) for v in values if v is not None) if e), None)

    # -- emitting ops ---------------------------------------------------------------------------
    def op(self, op_type: str, *inputs: ir.Value | None, **attrs) -> ir.Value:
        attrs = {k: v for k, v in attrs.items() if v is not None}
        n = ir.Node(op_type, inputs, [self._name(op_type)], attrs, name=self._name(op_type))
        self.nodes.append(n)
        return n.outputs[0]

    def const(self, value, like: ir.Value) -> ir.Value:
        """A scalar of ``like``'s element type (a typed Constant, or CastLike when unknown)."""
        elem = self.elem(like) or self.dtype
        if elem:
            c = self.op("Constant", value=np.asarray(value, dtype=to_numpy(elem)))
            self.elems[id(c)], self.shapes[id(c)] = elem, ()
            return c
        self.need(15, "an element type known only at run time")
        return self.op("CastLike", self.op("Constant", value=np.asarray(value, np.float32)), like)

    def ints(self, values: Sequence[int]) -> ir.Value:
        return self.op("Constant", value=np.asarray(values, dtype=np.int64))

    def cast_like(self, v: ir.Value, like: ir.Value, on_path: bool = True) -> ir.Value:
        """``v`` cast to ``like``'s element type (``on_path``: like is a differentiated value)."""
        target, have = self.elem(like) or (self.dtype if on_path else None), self.elem(v)
        if target and target == have:
            return v
        if target:
            return self.op("Cast", v, to=int(target))
        self.need(15, "an element type known only at run time")
        return self.op("CastLike", v, like)

    def need(self, version: int, what: str) -> None:
        if self.opset < version:
            raise NotImplementedOp(f"{self.label}: {what} needs ai.onnx opset {version} or later")

    def reduce_sum(self, x: ir.Value, axes: Sequence[int], keepdims: int = 1) -> ir.Value:
        if self.opset < 13:
            return self.op("ReduceSum", x, axes=list(axes), keepdims=keepdims)
        return self.op("ReduceSum", x, self.ints(axes), keepdims=keepdims)

    def unsqueeze(self, x: ir.Value, axes: Sequence[int] | ir.Value) -> ir.Value:
        if isinstance(axes, ir.Value):  # an axes input: the forward op is opset 13+ already
            return self.op("Unsqueeze", x, axes)
        if self.opset < 13:
            return self.op("Unsqueeze", x, axes=list(axes))
        return self.op("Unsqueeze", x, self.ints(axes))

    def transpose_last2(self, x: ir.Value, rank: int) -> ir.Value:
        perm = [*range(rank - 2), rank - 1, rank - 2]
        return self.op("Transpose", x, perm=perm)

    def reshape_like(self, g: ir.Value, x: ir.Value) -> ir.Value:
        return self.op("Reshape", g, self.op("Shape", x))

    def _zeros_like(self, x: ir.Value) -> ir.Value:
        return self.op("Expand", self.const(0, x), self.op("Shape", x))

    def unbroadcast(
        self, g: ir.Value, x: ir.Value, g_shape: Dims | None, x_shape: Dims | None = None
    ) -> ir.Value:
        """``g`` (the gradient of a broadcast result) summed back to the shape of ``x``."""
        x_shape = self.shape(x) if x_shape is None else x_shape
        axes = _broadcast_axes(g_shape, x_shape)
        if axes is not None:
            if not axes and len(g_shape) == len(x_shape):
                return g
            r = self.reduce_sum(g, axes) if axes else g
            return r if len(g_shape) == len(x_shape) else self.reshape_like(r, x)
        # shapes unknown: the axes are where Shape(x), padded with leading 1s, differs from Shape(g)
        self.need(13, "a broadcast gradient of unknown shape")
        sg, sx = self.op("Shape", g), self.op("Shape", x)
        one = np.ones(1, dtype=np.int64)
        pad = self.op(
            "ConstantOfShape", self.op("Sub", self.op("Shape", sg), self.op("Shape", sx)), value=one
        )
        differs = self.op("Not", self.op("Equal", self.op("Concat", pad, sx, axis=0), sg))
        found = self.op("Reshape", self.op("NonZero", differs), self.ints([-1]))
        r = self.op("ReduceSum", g, found, keepdims=1, noop_with_empty_axes=1)
        return self.op("Reshape", r, sx)


def _reads(n: ir.Node):
    """A node's inputs and the outer values its subgraphs read."""
    yield from (v for v in n.inputs if v is not None)
    for sub in n.subgraphs():
        yield from ir.captured_values(sub)


def _broadcast_axes(g_shape: Dims | None, x_shape: Dims | None) -> list[int] | None:
    """Axes of ``g`` to sum to undo broadcasting ``x`` to it, or None when shapes cannot tell."""
    if g_shape is None or x_shape is None or len(g_shape) < len(x_shape):
        return None
    lead = len(g_shape) - len(x_shape)
    axes = list(range(lead))
    for i, (dx, dg) in enumerate(zip(x_shape, g_shape[lead:]), start=lead):
        if dx == 1:
            if dg != 1:
                axes.append(i)  # summing a dim that is 1 after all is harmless
        elif not (isinstance(dx, int) or (dx is not None and dx == dg)):
            return None  # x's dim may be 1 or not
    return axes


def _broadcast_shape(a: Dims, b: Dims) -> Dims:
    """Static numpy broadcast of two shapes (None where it cannot be told)."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)

    def dim(p, q):
        if p == 1:
            return q
        if q == 1 or p == q:
            return p
        if isinstance(p, int):
            return p
        return q if isinstance(q, int) else None

    return tuple(dim(p, q) for p, q in zip(a, b))


_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Sum"})
_SAME_SHAPE = frozenset(
    {"Identity", "Neg", "Exp", "Log", "Sqrt", "Abs", "Relu", "Sigmoid", "Tanh", "Cast"}
    | {"Softmax", "LogSoftmax"}
)


# -- derivative rules ---------------------------------------------------------------------------
# rule(d, node, g) -> one gradient per input of ``node`` (None where none flows); ``node`` is the
# forward copy (its inputs and outputs are the recomputed values), ``g`` the gradient per output.
Rule = Callable[[_Differentiator, ir.Node, list], list]
_RULES: dict[str, Rule] = {}


def rule(*op_types: str):
    def register(fn: Rule) -> Rule:
        for t in op_types:
            _RULES[t] = fn
        return fn

    return register


def _out_shape(d: _Differentiator, n: ir.Node) -> Dims | None:
    return d.shape(n.outputs[0])


@rule("Add", "Sub")
def _add(d, n, g):
    a, b = n.inputs
    gb = g[0] if n.op_type == "Add" else d.op("Neg", g[0])
    s = _out_shape(d, n)
    return [d.unbroadcast(g[0], a, s), d.unbroadcast(gb, b, s)]


@rule("Sum")
def _sum(d, n, g):
    return [d.unbroadcast(g[0], v, _out_shape(d, n)) for v in n.inputs]


@rule("Mul")
def _mul(d, n, g):
    a, b = n.inputs
    s = _out_shape(d, n)
    return [d.unbroadcast(d.op("Mul", g[0], b), a, s), d.unbroadcast(d.op("Mul", g[0], a), b, s)]


@rule("Div")
def _div(d, n, g):
    (a, b), y = n.inputs, n.outputs[0]
    s = _out_shape(d, n)
    ga = d.op("Div", g[0], b)
    gb = d.op("Neg", d.op("Div", d.op("Mul", g[0], y), b))  # -g * a / b^2 = -g * y / b
    return [d.unbroadcast(ga, a, s), d.unbroadcast(gb, b, s)]


@rule("Pow")
def _pow(d, n, g):
    (a, p), y = n.inputs, n.outputs[0]
    s = _out_shape(d, n)
    pa = d.cast_like(p, a)  # the exponent may have its own element type (opset 12+)
    ga = d.op("Mul", g[0], d.op("Mul", pa, d.op("Pow", a, d.op("Sub", pa, d.const(1, a)))))
    gp = d.op("Mul", d.op("Mul", g[0], y), d.op("Log", a))  # d(a^p)/dp = a^p ln a
    return [d.unbroadcast(ga, a, s), d.cast_like(d.unbroadcast(gp, p, s), p)]


@rule("Expand")
def _expand(d, n, g):
    return [d.unbroadcast(g[0], n.inputs[0], _out_shape(d, n)), None]


# y = f(x) elementwise: dx = g * f'(x), f' written with x and y
_UNARY: dict[str, Callable] = {
    "Identity": lambda d, x, y, g: g,
    "Neg": lambda d, x, y, g: d.op("Neg", g),
    "Exp": lambda d, x, y, g: d.op("Mul", g, y),
    "Log": lambda d, x, y, g: d.op("Div", g, x),
    "Sqrt": lambda d, x, y, g: d.op("Div", g, d.op("Add", y, y)),
    "Abs": lambda d, x, y, g: d.op("Mul", g, d.op("Sign", x)),
    "Relu": lambda d, x, y, g: d.op("Where", d.op("Greater", x, d.const(0, x)), g, d.const(0, x)),
    "Sigmoid": lambda d, x, y, g: d.op("Mul", d.op("Mul", g, y), d.op("Sub", d.const(1, y), y)),
    "Tanh": lambda d, x, y, g: d.op("Mul", g, d.op("Sub", d.const(1, y), d.op("Mul", y, y))),
    "Cast": lambda d, x, y, g: d.cast_like(g, x, on_path=False),
}


def _unary_rule(f: Callable) -> Rule:
    return lambda d, n, g: [f(d, n.inputs[0], n.outputs[0], g[0])]


for _op_type, _f in _UNARY.items():
    rule(_op_type)(_unary_rule(_f))


@rule("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(d, n, g):
    return [d.reshape_like(g[0], n.inputs[0]), *([None] * (len(n.inputs) - 1))]


@rule("Transpose")
def _transpose(d, n, g):
    perm = n.attr("perm")
    inverse = None if perm is None else [int(i) for i in np.argsort(perm)]  # default: reversal
    return [d.op("Transpose", g[0], perm=inverse)]


@rule("MatMul")
def _matmul(d, n, g):
    a, b = n.inputs
    sa, sb = d.shape(a), d.shape(b)
    if sa is None or sb is None:  # ranks unknown: batched products over any leading dims
        d.need(12, "MatMul of unknown rank")
        ga = d.op("Einsum", g[0], b, equation="...ij,...kj->...ik")
        gb = d.op("Einsum", a, g[0], equation="...ij,...ik->...jk")
        return [d.unbroadcast(ga, a, None), d.unbroadcast(gb, b, None)]
    # 1-D operands are promoted to matrices: a (k) -> (1, k), b (k) -> (k, 1)
    a2, sa2 = (a, sa) if len(sa) > 1 else (d.unsqueeze(a, [0]), (1, *sa))
    b2, sb2 = (b, sb) if len(sb) > 1 else (d.unsqueeze(b, [1]), (*sb, 1))
    rank = max(len(sa2), len(sb2))
    dropped = ([rank - 2] if len(sa) == 1 else []) + ([rank - 1] if len(sb) == 1 else [])
    g2 = d.unsqueeze(g[0], dropped) if dropped else g[0]
    batch = _broadcast_shape(sa2[:-2], sb2[:-2])
    ga = d.op("MatMul", g2, d.transpose_last2(b2, len(sb2)))
    gb = d.op("MatMul", d.transpose_last2(a2, len(sa2)), g2)
    ga = d.unbroadcast(ga, a2, (*batch, *sa2[-2:]), sa2)
    gb = d.unbroadcast(gb, b2, (*batch, *sb2[-2:]), sb2)
    return [
        ga if a2 is a else d.reshape_like(ga, a),
        gb if b2 is b else d.reshape_like(gb, b),
    ]


def _matmul_t(d, x: ir.Value, y: ir.Value, tx: int, ty: int, alpha: float) -> ir.Value:
    """alpha * op(x) @ op(y) for 2-D x and y, op transposing where asked."""
    x = d.op("Transpose", x) if tx else x
    y = d.op("Transpose", y) if ty else y
    r = d.op("MatMul", x, y)
    return r if alpha == 1.0 else d.op("Mul", r, d.const(alpha, r))


@rule("Gemm")
def _gemm(d, n, g):
    a, b, c = (*n.inputs, None)[:3]
    alpha, beta = n.attr("alpha", 1.0), n.attr("beta", 1.0)
    ta, tb = n.attr("transA", 0), n.attr("transB", 0)
    g0 = g[0]
    # Y = alpha op(A) op(B) + beta C: dop(A) = alpha g op(B)^T, dop(B) = alpha op(A)^T g
    ga = _matmul_t(d, g0, b, 0, 1 - tb, alpha) if not ta else _matmul_t(d, b, g0, tb, 1, alpha)
    gb = _matmul_t(d, a, g0, 1 - ta, 0, alpha) if not tb else _matmul_t(d, g0, a, 1, ta, alpha)
    gc = None
    if c is not None:
        gbeta = g0 if beta == 1.0 else d.op("Mul", g0, d.const(beta, c))
        shape = _out_shape(d, n) or (None, None)
        gc = d.unbroadcast(gbeta, c, shape)
    return [ga, gb, gc]


def _reduce_axes(n: ir.Node):
    """(axes, empty_is_noop) of a reduction: a list (attribute), a Value (input) or None (all)."""
    attr = n.attr("axes")
    axes = attr if attr is not None else (n.inputs[1] if len(n.inputs) > 1 else None)
    return axes, bool(n.attr("noop_with_empty_axes", 0))


@rule("ReduceSum", "ReduceMean")
def _reduce(d, n, g):
    x, y = n.inputs[0], n.outputs[0]
    axes, noop = _reduce_axes(n)
    rest = [None] * (len(n.inputs) - 1)
    if axes is None and noop:
        return [g[0], *rest]  # no axes and noop_with_empty_axes: the identity
    gk = g[0]
    reduced_all = axes is None or (isinstance(axes, list) and not axes)
    if not n.attr("keepdims", 1) and not reduced_all:
        gk = d.unsqueeze(gk, axes)  # put the reduced axes back (negative axes count from x's end)
    gx = d.op("Expand", gk, d.op("Shape", x))
    if n.op_type == "ReduceMean":  # each input counted |y| / |x| times
        size_y, size_x = (d.cast_like(d.op("Size", v), x) for v in (y, x))
        gx = d.op("Mul", gx, d.op("Div", size_y, size_x))
    return [gx, *rest]


def _softmax_axis(d: _Differentiator, n: ir.Node) -> int:
    return n.attr("axis", -1 if d.opset >= 13 else 1)


@rule("Softmax", "LogSoftmax")
def _softmax(d, n, g):
    x, y, g0 = n.inputs[0], n.outputs[0], g[0]
    axis = _softmax_axis(d, n)
    if d.opset < 13:  # softmax over the input coerced to 2-D at ``axis``: work on that view
        y, g0, axis = d.op("Flatten", y, axis=axis), d.op("Flatten", g0, axis=axis), 1
    if n.op_type == "Softmax":  # dx = y (g - sum(g y))
        dx = d.op("Mul", y, d.op("Sub", g0, d.reduce_sum(d.op("Mul", g0, y), [axis])))
    else:  # dx = g - exp(y) sum(g)
        dx = d.op("Sub", g0, d.op("Mul", d.op("Exp", y), d.reduce_sum(g0, [axis])))
    return [dx if d.opset >= 13 else d.reshape_like(dx, x)]
