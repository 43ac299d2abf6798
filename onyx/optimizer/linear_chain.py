"""scikit-learn's linear pipelines as one step: skl2onnx writes StandardScaler -> PCA ->
LogisticRegression as Scaler -> Sub(mean) -> MatMul(components) -> LinearClassifier ->
Normalizer (L1), five session steps whose per-step cost is most of a one-row run. The chain
(a Scaler, the PCA's Sub and MatMul, and the Normalizer where present) becomes one ai.onyx
node, its kernel (ml/linear.py) the same float32 operations in the same order, one native
call a run; its model-local function body is the chain in the ops skl2onnx wrote.

The fused node always holds a Scaler (offset 0, scale 1 where the chain had none: x - 0 and
x * 1 are x, NaN and -0 included) and, with a MatMul, a Sub (of zeros where the chain had
none); the MatMul and the Normalizer give the four op names of VARIANTS."""

from __future__ import annotations

import numpy as np

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from .core import EXTENDED, PassContext, graph_pass, producer, static_shape

ML = "ai.onnx.ml"

#: (with a MatMul, with a Normalizer) -> the fused op (ml/linear.py registers each)
VARIANTS = {
    (False, False): "LinearChain",
    (False, True): "LinearChainNorm",
    (True, False): "LinearChainProj",
    (True, True): "LinearChainProjNorm",
}
#: LinearClassifier's attributes, carried by the fused node under their names
CLASSIFIER_ATTRS = (
    "coefficients", "intercepts", "classlabels_ints", "classlabels_strings", "post_transform",
    "multi_class",
)  # fmt: skip


def _ml(v: ir.Value | None, op_type: str) -> ir.Node | None:
    p = v.producer if v is not None else None
    return p if p is not None and p.op_type == op_type and p.domain == ML else None


def _only_reader(ctx: PassContext, v: ir.Value, node: ir.Node) -> bool:
    return ctx.single_use(v) is node


def _chain(ctx: PassContext, classifier: ir.Node) -> dict | None:
    """The chain around one LinearClassifier (its parts, inputs and constants), or None."""
    if len(classifier.outputs) != 2:
        return None
    v = classifier.inputs[0]
    matmul = producer(v, "MatMul")
    sub = proj = mean = None
    if matmul is not None and _only_reader(ctx, v, classifier):
        proj = ctx.const(matmul.inputs[1])
        if proj is None or proj.dtype != np.float32 or proj.ndim != 2:
            return None
        v = matmul.inputs[0]
        sub = producer(v, "Sub")
        if sub is not None and _only_reader(ctx, v, matmul):
            mean = ctx.const(sub.inputs[1])
            if (
                mean is None
                or mean.dtype != np.float32
                or mean.shape
                not in (
                    (proj.shape[0],),
                    (1, proj.shape[0]),
                )
            ):
                return None
            v = sub.inputs[0]
        else:
            sub = None
    else:
        matmul = None
    scaler = _ml(v, "Scaler")
    if scaler is not None and (matmul is not None or sub is not None):
        if not _only_reader(ctx, v, sub or matmul):
            scaler = None
    elif scaler is not None and not _only_reader(ctx, v, classifier):
        scaler = None
    if scaler is not None:
        v = scaler.inputs[0]
    probabilities = classifier.outputs[1]
    normalizer = ctx.single_use(probabilities) if probabilities.name else None
    if normalizer is not None and (normalizer.op_type, normalizer.domain) != ("Normalizer", ML):
        normalizer = None
    shape = static_shape(v)
    if v.dtype != ir.DataType.FLOAT or shape is None or len(shape) != 2:
        return None
    if not isinstance(shape[1], int) or (proj is not None and proj.shape[0] != shape[1]):
        return None
    parts = [n for n in (scaler, sub, matmul, normalizer) if n is not None]
    if not parts:
        return None  # (one node: nothing to fuse)
    return dict(x=v, scaler=scaler, sub=sub, matmul=matmul, normalizer=normalizer,
                mean=mean, proj=proj)  # fmt: skip


@graph_pass("LinearChainFusion", EXTENDED)
def linear_chain_fusion(ctx: PassContext) -> bool:
    changed = False
    for node in ctx.nodes_of("LinearClassifier"):
        if node.op_type != "LinearClassifier" or node.domain != ML or node.graph is not ctx.graph:
            continue
        chain = _chain(ctx, node)
        if chain is not None:
            _fuse(ctx, node, chain)
            ctx.count("LinearChainFusion")
            changed = True
    return changed


def _fuse(ctx: PassContext, classifier: ir.Node, chain: dict) -> None:
    projected, normalized = chain["matmul"] is not None, chain["normalizer"] is not None
    op_type = VARIANTS[projected, normalized]
    inputs = [chain["x"]]
    if projected:
        mean = chain["sub"].inputs[1] if chain["sub"] is not None else None
        if mean is None:
            mean = ctx.add_const(np.zeros(chain["proj"].shape[0], np.float32), "chain_mean")
        inputs += [mean, chain["matmul"].inputs[1]]
    scaler = chain["scaler"]
    attrs = [
        ir.Attr(name, ir.AttrType.FLOATS, list(values))
        for name, values in (
            ("offset", scaler.attr("offset", [0.0]) if scaler is not None else [0.0]),
            ("scale", scaler.attr("scale", [1.0]) if scaler is not None else [1.0]),
        )
    ]
    attrs += [a for name, a in classifier.attributes.items() if name in CLASSIFIER_ATTRS]
    if normalized:
        norm = chain["normalizer"].attr("norm", "MAX")
        attrs.append(ir.Attr("norm", ir.AttrType.STRING, norm))
    fused = ir.Node(op_type, inputs, 2, attrs, domain=ONYX_DOMAIN,
                    name=ctx.fresh_name(f"chain_{classifier.name or op_type}"))  # fmt: skip
    label, probabilities = fused.outputs
    label.name, probabilities.name = ctx.fresh_name("chain_label"), ctx.fresh_name("chain_scores")
    first = next(n for n in (scaler, chain["sub"], chain["matmul"], classifier) if n is not None)
    ctx.graph.insert_before(first, fused)
    scores = chain["normalizer"].outputs[0] if normalized else classifier.outputs[1]
    for old, new in ((classifier.outputs[0], label), (scores, probabilities)):
        old_type = old.type
        if not ctx.replace_value(old, new):  # (cannot be: the new values are no graph's)
            raise AssertionError("LinearChainFusion: an output could not be replaced")
        new.type = old_type
    for n in (chain["normalizer"], classifier, chain["matmul"], chain["sub"], scaler):
        if n is not None:
            ctx.graph.remove(n, safe=False)
    ctx.ensure_function(op_type, lambda: _function(ctx, op_type, projected, normalized))


def _function(ctx: PassContext, op_type: str, projected: bool, normalized: bool) -> ir.Function:
    """The model-local function of one variant: the chain in the ops skl2onnx wrote."""
    x, mean, proj = ir.Value("X"), ir.Value("mean"), ir.Value("proj")
    nodes = []

    from ..defs import get_schema  # (the schema tables: only where a chain was fused)

    def node(op, inputs, names, domain="", outputs=1):
        types = get_schema(op, None, domain).attributes if names else {}
        attrs = [ir.Attr(n, types[n].type, ref_attr_name=n) for n in names]
        made = ir.Node(op, inputs, [f"{op}_{len(nodes)}_{i}" for i in range(outputs)], attrs,
                       domain=domain)  # fmt: skip
        nodes.append(made)
        return made.outputs

    (y,) = node("Scaler", [x], ("offset", "scale"), ML)
    if projected:
        (y,) = node("MatMul", [node("Sub", [y, mean], ())[0], proj], ())
    label, scores = node("LinearClassifier", [y], CLASSIFIER_ATTRS, ML, outputs=2)
    if normalized:
        (scores,) = node("Normalizer", [scores], ("norm",), ML)
    graph = ir.Graph([x, mean, proj] if projected else [x], [label, scores], nodes, name=op_type)
    names = ["offset", "scale", *CLASSIFIER_ATTRS] + (["norm"] if normalized else [])
    f = ir.Function(ONYX_DOMAIN, op_type, graph, attributes=names,
                    opset_imports={"": ctx.opset(), ML: ctx.opset(ML) or 1})  # fmt: skip
    f.doc_string = "a scikit-learn linear pipeline's chain (onyx runs it as one kernel)"
    return f
