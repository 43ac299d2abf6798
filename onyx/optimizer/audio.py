"""Audio front-ends and 1-D signal nets.

An STFT written as a strided Conv1d (torchaudio-style exporters, VADs and
keyword spotters) puts the real and imaginary parts in two halves of its output channels and
takes the magnitude as

    Sqrt(Add(Add(Mul(re, re), Mul(im, im)), eps)),  re = Slice(x, ...), im = Slice(x, ...)

seven nodes, each a session step, over a few hundred values. ``SpectralMagnitudeFusion``
makes them one ai.onyx ``SpectralMagnitude`` node (kernels/audio.py) doing the same
float32 operations in the same order (the same bits), with the chain as its function body.
"""

from __future__ import annotations

import numpy as np

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from .conv import _REF_TYPES
from .core import EXTENDED, MS, STANDARD, PassContext, graph_pass, producer, static_shape
from .pipeline import pooled_stem

_NAMES = ("x", "re_starts", "re_ends", "im_starts", "im_ends", "axes", "eps")


def _only_reader(ctx: PassContext, v: ir.Value, node: ir.Node) -> bool:
    """``node`` is the only node reading v (once or more), and v is no graph output."""
    return not ctx.is_output(v) and all(user is node for user, _ in v.iter_uses())


def _square_of(ctx: PassContext, v: ir.Value, reader: ir.Node) -> ir.Node | None:
    """The Mul(s, s) that makes v, read only by ``reader``."""
    mul = producer(v, "Mul")
    if mul is None or mul.domain not in STANDARD or len(mul.inputs) != 2:
        return None
    if mul.inputs[0] is not mul.inputs[1] or mul.inputs[0] is None:
        return None
    return mul if _only_reader(ctx, v, reader) else None


def _unit_slice(ctx: PassContext, v: ir.Value, reader: ir.Node) -> dict | None:
    """v = Slice(x, start, end, axis) of one axis with step 1 (constants), read only by
    ``reader``: its parts."""
    s = producer(v, "Slice")
    if s is None or s.domain not in STANDARD or not 3 <= len(s.inputs) <= 5:
        return None
    if not _only_reader(ctx, v, reader):
        return None
    consts = [ctx.const(i) for i in s.inputs[1:]]
    if any(c is None or c.size != 1 or c.dtype.kind != "i" for c in consts):
        return None
    axes = s.inputs[3] if len(s.inputs) > 3 else None
    steps = consts[3] if len(consts) > 3 else None
    if steps is not None and int(steps.reshape(-1)[0]) != 1:
        return None
    axis = 0 if axes is None else int(consts[2].reshape(-1)[0])
    return dict(node=s, x=s.inputs[0], starts=s.inputs[1], ends=s.inputs[2], axis=axis)


def _magnitude(ctx: PassContext, sqrt: ir.Node) -> dict | None:
    """The chain ending in ``sqrt``, or None."""
    if sqrt.domain not in STANDARD or len(sqrt.inputs) != 1:
        return None
    outer = producer(sqrt.inputs[0], "Add")
    if (
        outer is None
        or outer.domain not in STANDARD
        or not _only_reader(ctx, outer.outputs[0], sqrt)
    ):
        return None
    inner, eps = outer, None
    for k in (0, 1):  # Add(sum, eps) or Add(eps, sum): eps a float32 constant of one value
        c = ctx.const(outer.inputs[k])
        candidate = producer(outer.inputs[1 - k], "Add")
        if c is not None and candidate is not None and c.size == 1 and c.ndim <= 1:
            if c.dtype == np.float32 and _only_reader(ctx, candidate.outputs[0], outer):
                inner, eps = candidate, outer.inputs[k]
                break
    if inner.domain not in STANDARD or len(inner.inputs) != 2:
        return None
    squares = [_square_of(ctx, v, inner) for v in inner.inputs]
    if any(m is None for m in squares):
        return None
    slices = [_unit_slice(ctx, m.inputs[0], m) for m in squares]
    if any(s is None for s in slices) or slices[0]["x"] is not slices[1]["x"]:
        return None
    x = slices[0]["x"]
    if slices[0]["axis"] != slices[1]["axis"] or x is None:
        return None
    if not isinstance(x.type, ir.TensorType) or x.type.elem_type != ir.DataType.FLOAT:
        return None
    dead = [s["node"] for s in slices] + squares + ([inner] if eps is not None else [])
    return dict(slices=slices, eps=eps, dead=dead + ([outer] if outer is not sqrt else []))


@graph_pass("SpectralMagnitudeFusion", EXTENDED)
def spectral_magnitude_fusion(ctx: PassContext) -> bool:
    changed = False
    if ctx.opset() < 10:  # (Slice's starts and ends are inputs from opset 10)
        return False
    for sqrt in ctx.nodes_of("Sqrt"):
        if sqrt.op_type != "Sqrt":
            continue
        found = _magnitude(ctx, sqrt)
        if found is None:
            continue
        re, im = found["slices"]
        eps = found["eps"]
        if eps is None:  # (+0.0: re^2 + im^2 is never -0.0, so adding it changes no bit)
            eps = ctx.add_const(np.array(0.0, np.float32), "magnitude_eps")
        axes = ctx.add_const(np.array([re["axis"]], np.int64), "magnitude_axes")
        inputs = [re["x"], re["starts"], re["ends"], im["starts"], im["ends"], axes, eps]
        conv, dead = _stft_conv(ctx, re["x"], found["slices"]), found["dead"]
        if conv is None:
            op_type, attrs = "SpectralMagnitude", []
        else:  # (the STFT's conv too: one step fewer)
            op_type, attrs = "ConvMagnitude", list(conv.attributes.values())
            inputs[:1], dead = list(conv.inputs), [*dead, conv]
            unsqueeze = _channel_axis(ctx, conv.inputs[0])
            if unsqueeze is not None:  # (and the audio's channel axis: one more)
                op_type, dead = "SignalMagnitude", [*dead, unsqueeze]
                inputs[:1] = list(unsqueeze.inputs)
        fused = ir.Node(op_type, inputs, 1, attrs, domain=ONYX_DOMAIN,
                        name=ctx.fresh_name(op_type))  # fmt: skip
        ctx.ensure_function(op_type, lambda op_type=op_type: _magnitude_function(ctx, op_type))
        ctx.replace_nodes(sqrt, fused, dead)
        ctx.count("SpectralMagnitudeFusion")
        changed = True
    return changed


def _stft_conv(ctx: PassContext, x: ir.Value, slices: list) -> ir.Node | None:
    """The standard Conv without bias that makes x, read only by the two Slices."""
    conv = producer(x, "Conv")
    if conv is None or conv.domain not in STANDARD or len(conv.inputs) != 2:
        return None
    if ctx.is_output(x) or any(a.is_ref for a in conv.attributes.values()):
        return None
    readers = {id(s["node"]) for s in slices}
    return conv if all(id(user) in readers for user, _ in x.iter_uses()) else None


def _channel_axis(ctx: PassContext, x: ir.Value) -> ir.Node | None:
    """The Unsqueeze (axes a constant input) that makes x, read by the conv alone."""
    unsqueeze = producer(x, "Unsqueeze")
    if unsqueeze is None or unsqueeze.domain not in STANDARD or len(unsqueeze.inputs) != 2:
        return None
    if ctx.const(unsqueeze.inputs[1]) is None or ctx.single_use(x) is None:
        return None
    return unsqueeze


def _magnitude_function(ctx: PassContext, op_type: str) -> ir.Function:
    """The model-local function SpectralMagnitude (ConvMagnitude: the conv too; SignalMagnitude:
    the Unsqueeze before the conv too): the chain it replaces, in standard ops."""
    with_conv = op_type != "SpectralMagnitude"
    x, re_starts, re_ends, im_starts, im_ends, axes, eps = (ir.Value(n) for n in _NAMES)
    nodes = []

    def node(op, inputs, attrs=()):
        made = ir.Node(op, inputs, [f"{op}_{len(nodes)}"], list(attrs))
        nodes.append(made)
        return made.outputs[0]

    params = [x]
    if with_conv:  # ConvMagnitude(X, W, ...): Conv(X, W) with the node's attributes
        params = [ir.Value("X"), ir.Value("W")]
        refs = [ir.Attr(k, t, ref_attr_name=k) for k, t in _CONV_TYPES.items()]
        conv_input = params[0]
        if op_type == "SignalMagnitude":  # SignalMagnitude(audio, axes, W, ...)
            params = [ir.Value("audio"), ir.Value("unsqueeze_axes"), params[1]]
            conv_input = node("Unsqueeze", params[:2])
        x = node("Conv", [conv_input, params[-1]], refs)

    re = node("Slice", [x, re_starts, re_ends, axes])
    im = node("Slice", [x, im_starts, im_ends, axes])
    power = node("Add", [node("Mul", [re, re]), node("Mul", [im, im])])
    y = node("Sqrt", [node("Add", [power, eps])])
    graph = ir.Graph(
        [*params, re_starts, re_ends, im_starts, im_ends, axes, eps], [y], nodes, name=op_type
    )
    f = ir.Function(ONYX_DOMAIN, op_type, graph, opset_imports={"": ctx.opset()},
                    attributes=list(_CONV_TYPES) if with_conv else [])  # fmt: skip
    f.doc_string = "an STFT's magnitude from its real and imaginary halves (one onyx kernel)"
    return f


# --- a 1-D conv and its MaxPool ------------------------------------------------------------------

#: attribute types of the conv (Conv / FusedConv: conv.py's) and of MaxPool, for the function
#: bodies' refs
_CONV_TYPES = _REF_TYPES
_FUSED_TYPES = {"activation": ir.AttrType.STRING, "activation_params": ir.AttrType.FLOATS}
_POOL_TYPES = {
    "auto_pad": ir.AttrType.STRING,
    "ceil_mode": ir.AttrType.INT,
    "dilations": ir.AttrType.INTS,
    "kernel_shape": ir.AttrType.INTS,
    "pads": ir.AttrType.INTS,
    "storage_order": ir.AttrType.INT,
    "strides": ir.AttrType.INTS,
}
#: the conv's (op, domain) -> the fused op
_POOLED = {("Conv", ""): "ConvMaxPool", ("FusedConv", MS): "FusedConvMaxPool"}


@graph_pass("ConvMaxPoolFusion", EXTENDED)
def conv_max_pool_fusion(ctx: PassContext) -> bool:
    """MaxPool(conv(x)) of a float32 1-D conv (a signal classifier's conv -> relu -> pool
    blocks), or of a 2-D stem FusedConv + Relu (pipeline.pooled_stem: SqueezeNet's first conv and
    pool), becomes one ai.onyx ConvMaxPool / FusedConvMaxPool node (kernels/audio.py): the
    two kernels in one step, the same bits; the pair is its function body."""
    changed = False
    for pool in ctx.nodes_of("MaxPool"):
        if pool.op_type != "MaxPool" or pool.domain not in STANDARD or len(pool.inputs) != 1:
            continue
        if len(pool.outputs) > 1 and pool.outputs[1].name:  # (its Indices: left alone)
            continue
        conv = pool.inputs[0].producer if pool.inputs[0] is not None else None
        if conv is None or len(conv.inputs) > 3 or conv.outputs[0] is not pool.inputs[0]:
            continue
        domain = "" if conv.domain in STANDARD else conv.domain
        op_type = _POOLED.get((conv.op_type, domain))
        if op_type is None or ctx.single_use(conv.outputs[0]) is not pool:
            continue
        w, x = conv.inputs[1] if len(conv.inputs) > 1 else None, conv.inputs[0]
        if w is None or x is None:
            continue
        w_shape = static_shape(w) or ()
        if len(w_shape) != 3 and not pooled_stem(conv, pool, w_shape):
            continue  # (a 1-D conv: its weights are rank 3; or a 2-D stem)
        if not isinstance(x.type, ir.TensorType) or x.type.elem_type != ir.DataType.FLOAT:
            continue
        if conv.attributes_have_refs() or pool.attributes_have_refs():
            continue
        attrs = [a for a in conv.attributes.values()]
        attrs += [ir.Attr("pool_" + a.name, a.type, a.value) for a in pool.attributes.values()]
        fused = ir.Node(op_type, list(conv.inputs), 1, attrs, domain=ONYX_DOMAIN,
                        name=ctx.fresh_name(op_type))  # fmt: skip
        ctx.fuse(pool, fused, [conv])  # (the function after it: see fuse)
        body = (ctx, conv.op_type, domain, op_type)
        ctx.ensure_function(op_type, lambda body=body: _pooled_function(*body))
        ctx.count("ConvMaxPoolFusion")
        changed = True
    return changed


def _pooled_function(ctx: PassContext, conv_op: str, domain: str, op_type: str) -> ir.Function:
    """The model-local function ``op_type``: the conv then MaxPool, attributes referred."""
    x, w, b = ir.Value("X"), ir.Value("W"), ir.Value("B")
    conv_types = {**_CONV_TYPES, **(_FUSED_TYPES if domain else {})}
    refs = [ir.Attr(k, t, ref_attr_name=k) for k, t in conv_types.items()]
    conv = ir.Node(conv_op, [x, w, b], ["conv"], refs, domain=domain)
    pool_refs = [ir.Attr(k, t, ref_attr_name="pool_" + k) for k, t in _POOL_TYPES.items()]
    pool = ir.Node("MaxPool", [conv.outputs[0]], ["Y"], pool_refs)
    graph = ir.Graph([x, w, b], [pool.outputs[0]], [conv, pool], name=op_type)
    opsets = {"": ctx.opset(), **({domain: 1} if domain else {})}
    names = [*conv_types, *("pool_" + k for k in _POOL_TYPES)]
    f = ir.Function(ONYX_DOMAIN, op_type, graph, attributes=names, opset_imports=opsets)
    f.doc_string = "a 1-D conv (or a 2-D stem) and the MaxPool after it (one onyx kernel)"
    return f
