"""Fusions for classic CNNs (onnx's light models, issue 23): a BatchNormalization that no conv
precedes, then Relu, into ai.onyx BatchNormRelu (one pass over the maps).

DenseNet normalizes each Concat of its feature maps before the next conv (pre-activation):
ConvBNFusion has no conv to fold that BatchNormalization into, so the pair ran as two passes
(and a temporary) over ever wider maps.
"""

from __future__ import annotations

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from .core import (
    EXTENDED,
    PassContext,
    graph_pass,
    inference_batch_norm,
    is_op,
    other_input,
    producer,
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
    for relu in ctx.graph:
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
    for hs in ctx.graph:
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
