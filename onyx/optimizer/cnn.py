"""Fusions for classic CNNs (onnx's light models, issue 23): a BatchNormalization that no conv
precedes, then Relu, into ai.onyx BatchNormRelu (one pass over the maps).

DenseNet normalizes each Concat of its feature maps before the next conv (pre-activation):
ConvBNFusion has no conv to fold that BatchNormalization into, so the pair ran as two passes
(and a temporary) over ever wider maps.

SqueezeNet's fire modules end in Concat(expand 1x1 conv, expand 3x3 conv) of one input:
``ConvConcatFusion`` makes the pair ai.onyx ConvConcat, whose kernel has each conv write its
channels of the output in place (at batch 1 a channel range of an NCHW tensor is one
contiguous block), so the Concat's copy and a step are gone.
"""

from __future__ import annotations

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from .core import (
    EXTENDED,
    MS,
    PassContext,
    graph_pass,
    inference_batch_norm,
    is_op,
    other_input,
    producer,
    static_shape,
)

#: the BatchNormalization attributes BatchNormRelu takes (the others must be absent: momentum
#: does nothing in inference; training_mode is there only as 0, inference_batch_norm checks it,
#: and PyTorch's TorchScript exporter writes it on every BN, so its pre-activation ResNet's
#: pairs ran unfused where the dynamo export's were fused)
_BN_ATTRIBUTES = {"epsilon", "momentum", "training_mode"}


@graph_pass("BatchNormReluFusion", EXTENDED)
def batch_norm_relu(ctx: PassContext) -> bool:
    """BatchNormalization (inference) -> Relu  =>  ai.onyx BatchNormRelu(X, scale, B, mean,
    var), a model-local function whose body is the two ops, so a saved model runs anywhere."""
    if ctx.opset() < 7:  # (is_test and consumed_inputs before: the body's BN would differ)
        return False
    changed = False
    for relu in ctx.nodes_of("Relu"):
        if not is_op(relu, "Relu") or relu.graph is None:
            continue
        bn = producer(relu.inputs[0], "BatchNormalization")
        if bn is None or ctx.single_use(relu.inputs[0]) is not relu:
            continue
        if not inference_batch_norm(ctx, bn) or set(bn.attributes) - _BN_ATTRIBUTES:
            continue
        ctx.ensure_function("BatchNormRelu", lambda: _batch_norm_relu_function(ctx))
        fused = ir.Node(
            "BatchNormRelu",
            list(bn.inputs[:5]),
            1,
            [ir.Attr("epsilon", ir.AttrType.FLOAT, float(bn.attr("epsilon", 1e-5)))],
            domain=ONYX_DOMAIN,
            name=ctx.fresh_name((bn.name or "bn") + "_relu"),
        )
        ctx.replace_nodes(relu, fused, [bn])
        ctx.count("BatchNormReluFusion")
        changed = True
    return changed


def _batch_norm_relu_function(ctx: PassContext) -> ir.Function:
    """The model-local function BatchNormRelu(X, scale, B, mean, var) =
    Relu(BatchNormalization(X, scale, B, mean, var)), epsilon the call's."""
    x, scale, b, mean, var = (ir.Value(n) for n in ("X", "scale", "B", "mean", "var"))
    eps = ir.Attr("epsilon", ir.AttrType.FLOAT, ref_attr_name="epsilon")
    bn = ir.Node("BatchNormalization", [x, scale, b, mean, var], ["normalized"], [eps])
    relu = ir.Node("Relu", [bn.outputs[0]], ["Y"])
    body = ir.Graph([x, scale, b, mean, var], [relu.outputs[0]], [bn, relu], name="BatchNormRelu")
    f = ir.Function(
        ONYX_DOMAIN, "BatchNormRelu", body, attributes=("epsilon",),
        opset_imports={"": ctx.opset()},
    )  # fmt: skip
    f.doc_string = "Y = Relu(BatchNormalization(X, scale, B, mean, var)) (onyx: one kernel)"
    return f


@graph_pass("HardSigmoidMulFusion", EXTENDED)
def hard_sigmoid_mul(ctx: PassContext) -> bool:
    """x * HardSigmoid(x)  =>  ai.onyx HardSigmoidMul(x) (alpha, beta the HardSigmoid's): how
    PyTorch exports hardswish (MobileNetV3). One pass where there were two, to the same bits
    (not HardSwish: its x / 6 rounds otherwise than x * alpha); float32 only. A quantized
    pair (DequantizeLinear in, QuantizeLinear out) stays for LookupTableFusion's table."""
    changed = False
    for hs in ctx.nodes_of("HardSigmoid"):
        if not is_op(hs, "HardSigmoid") or hs.graph is None or not _is_float32(hs.inputs[0]):
            continue
        x = hs.inputs[0]
        mul = ctx.single_use(hs.outputs[0])
        if not is_op(mul, "Mul") or other_input(mul, hs.outputs[0]) is not x:
            continue
        if producer(x, "DequantizeLinear") is not None or is_op(
            ctx.single_use(mul.outputs[0]), "QuantizeLinear"
        ):
            continue
        ctx.ensure_function("HardSigmoidMul", lambda: _hard_sigmoid_mul_function(ctx))
        attrs = [
            ir.Attr("alpha", ir.AttrType.FLOAT, float(hs.attr("alpha", 0.2))),
            ir.Attr("beta", ir.AttrType.FLOAT, float(hs.attr("beta", 0.5))),
        ]
        fused = ir.Node(
            "HardSigmoidMul",
            [x],
            1,
            attrs,
            domain=ONYX_DOMAIN,
            name=ctx.fresh_name((hs.name or "hard_sigmoid") + "_mul"),
        )
        ctx.replace_nodes(mul, fused, [hs])
        ctx.count("HardSigmoidMulFusion")
        changed = True
    return changed


def _is_float32(v: ir.Value) -> bool:
    return isinstance(v.type, ir.TensorType) and v.type.elem_type == ir.DataType.FLOAT


def _hard_sigmoid_mul_function(ctx: PassContext) -> ir.Function:
    """The model-local function HardSigmoidMul(X) = X * HardSigmoid(X), alpha and beta the
    call's."""
    x = ir.Value("X")
    refs = [ir.Attr(a, ir.AttrType.FLOAT, ref_attr_name=a) for a in ("alpha", "beta")]
    hs = ir.Node("HardSigmoid", [x], ["hard_sigmoid"], refs)
    mul = ir.Node("Mul", [x, hs.outputs[0]], ["Y"])
    body = ir.Graph([x], [mul.outputs[0]], [hs, mul], name="HardSigmoidMul")
    f = ir.Function(
        ONYX_DOMAIN, "HardSigmoidMul", body, attributes=("alpha", "beta"),
        opset_imports={"": ctx.opset()},
    )  # fmt: skip
    f.doc_string = "Y = X * HardSigmoid(X) (onyx runs it as one kernel)"
    return f


#: the FusedConv attributes ConvConcat takes once for both convs
_SHARED = ("strides", "dilations", "activation", "activation_params")
#: ... and per conv, suffixed with its place (0 or 1)
_OWN = ("kernel_shape", "pads")
_ATTR_TYPES = {
    "strides": ir.AttrType.INTS,
    "dilations": ir.AttrType.INTS,
    "activation": ir.AttrType.STRING,
    "activation_params": ir.AttrType.FLOATS,
    "kernel_shape": ir.AttrType.INTS,
    "pads": ir.AttrType.INTS,
}


@graph_pass("ConvConcatFusion", EXTENDED)
def conv_concat(ctx: PassContext) -> bool:
    """Concat(FusedConv(X, W0, B0), FusedConv(X, W1, B1), axis=1)  =>  ai.onyx ConvConcat(X,
    W0, B0, W1, B1): two 2-D float32 convs of one input, group 1, explicit pads, the same
    strides, dilations and activation, constant weights and biases, each read by the Concat
    alone (SqueezeNet's fire module). A model-local function whose body is the three ops."""
    changed = False
    for cat in ctx.nodes_of("Concat"):
        if not is_op(cat, "Concat") or cat.graph is None or len(cat.inputs) != 2:
            continue
        convs = [_fusable_conv(ctx, v, cat) for v in cat.inputs]
        if None in convs or convs[0] is convs[1] or cat.attr("axis") not in (1, -3):
            continue
        attrs = [_conv_attrs(c) for c in convs]
        if convs[0].inputs[0] is not convs[1].inputs[0] or not _alike(*attrs):
            continue
        ctx.ensure_opset(MS, 1)
        ctx.ensure_function("ConvConcat", lambda: _conv_concat_function(ctx))
        fused = ir.Node(
            "ConvConcat",
            [convs[0].inputs[0], *convs[0].inputs[1:3], *convs[1].inputs[1:3]],
            1,
            _fused_attrs(attrs),
            domain=ONYX_DOMAIN,
            name=ctx.fresh_name((cat.name or "concat") + "_convs"),
        )
        ctx.replace_nodes(cat, fused, convs)
        ctx.count("ConvConcatFusion")
        changed = True
    return changed


def _fusable_conv(ctx: PassContext, v: ir.Value, cat: ir.Node) -> ir.Node | None:
    """The FusedConv producing ``v`` where ConvConcat can take it, else None."""
    conv = v.producer
    if conv is None or conv.op_type != "FusedConv" or conv.domain != MS:
        return None
    if len(conv.inputs) != 3 or ctx.single_use(v) is not cat or len(conv.outputs) != 1:
        return None
    x, w, b = conv.inputs
    if x is None or not _is_float32(x) or len(static_shape(x) or ()) != 4:
        return None
    wc, bc = ctx.const(w), ctx.const(b)
    if (
        wc is None
        or bc is None
        or wc.dtype != "float32"
        or wc.ndim != 4
        or bc.shape != wc.shape[:1]
    ):
        return None
    if conv.attr("group", 1) != 1 or conv.attr("auto_pad", "NOTSET") != "NOTSET":
        return None
    if wc.shape[1] != static_shape(x)[1]:
        return None
    ks = conv.attr("kernel_shape")
    if ks is not None and list(ks) != list(wc.shape[2:]):
        return None
    return conv


def _conv_attrs(conv: ir.Node) -> dict:
    """A FusedConv's attributes as ConvConcat writes them (defaults made explicit)."""
    w_shape = static_shape(conv.inputs[1])
    params = conv.attr("activation_params")
    return {
        "strides": list(conv.attr("strides") or [1, 1]),
        "dilations": list(conv.attr("dilations") or [1, 1]),
        "activation": conv.attr("activation", ""),
        "activation_params": None if params is None else [float(p) for p in params],
        "kernel_shape": [int(k) for k in w_shape[2:]],
        "pads": list(conv.attr("pads") or [0, 0, 0, 0]),
    }


def _alike(a: dict, b: dict) -> bool:
    """Whether the two convs share what ConvConcat takes once, and have the same output size."""
    if any(a[k] != b[k] for k in _SHARED) or not a["activation"]:
        return False
    return _out_size(a) == _out_size(b)


def _out_size(a: dict) -> tuple:
    """(an output size up to the input's: its differences from the input's height and width)"""
    return tuple(
        a["pads"][i] + a["pads"][i + 2] - a["dilations"][i] * (a["kernel_shape"][i] - 1)
        for i in range(2)
    )


def _fused_attrs(attrs: list[dict]) -> list[ir.Attr]:
    out = [ir.Attr(k, _ATTR_TYPES[k], attrs[0][k]) for k in _SHARED if attrs[0][k] is not None]
    for i, a in enumerate(attrs):
        out += [ir.Attr(f"{k}{i}", _ATTR_TYPES[k], a[k]) for k in _OWN]
    return out


def _conv_concat_function(ctx: PassContext) -> ir.Function:
    """The model-local function ConvConcat(X, W0, B0, W1, B1) = Concat(FusedConv(X, W0, B0),
    FusedConv(X, W1, B1), axis=1), each conv taking the call's shared attributes and its own
    kernel_shape and pads."""
    x = ir.Value("X")
    ins, convs = [x], []
    for i in range(2):
        w, b = ir.Value(f"W{i}"), ir.Value(f"B{i}")
        refs = [ir.Attr(k, _ATTR_TYPES[k], ref_attr_name=k) for k in _SHARED]
        refs += [ir.Attr(k, _ATTR_TYPES[k], ref_attr_name=f"{k}{i}") for k in _OWN]
        convs.append(ir.Node("FusedConv", [x, w, b], [f"y{i}"], refs, domain=MS))
        ins += [w, b]
    cat = ir.Node(
        "Concat", [c.outputs[0] for c in convs], ["Y"], [ir.Attr("axis", ir.AttrType.INT, 1)]
    )
    body = ir.Graph(ins, [cat.outputs[0]], [*convs, cat], name="ConvConcat")
    names = (*_SHARED, *(f"{k}{i}" for i in range(2) for k in _OWN))
    f = ir.Function(
        ONYX_DOMAIN, "ConvConcat", body, attributes=names,
        opset_imports={"": ctx.opset(), MS: 1},
    )  # fmt: skip
    f.doc_string = (
        "Y = Concat(FusedConv(X, W0, B0), FusedConv(X, W1, B1), axis=1) (onyx: each conv "
        "writes its channels of Y)"
    )
    return f
