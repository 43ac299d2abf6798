"""A session computes a model's float16 parts in float32, as onnxruntime's CPU provider does.

onnxruntime's CPU provider has float16 kernels for few compute ops; its InsertCastTransformer
(always on, at every optimization level) wraps every other node that reads float16 in Casts to
float32 and back, then RemoveDuplicateCastTransformer drops each float32 -> float16 -> float32
pair between two such nodes (both are one "float" type group to it). So a run of float16 nodes
computes in float32 without rounding in between, a model's own Cast(to=float16) feeding such a
node rounds nothing, and values are rounded to float16 only where they leave the run: a graph
output, or a node that keeps a float16 kernel (data movement: Reshape, Transpose, Gather, ...;
those are exact in either precision, so only the rounding before them matters).

This pass does the same on onyx's IR, for a session's model only (a written model keeps its
float16 weights): every node of the table below that reads or writes float16 is rebuilt to
compute in float32 (float16 initializers converted once, here), data movement included (but
a Gather or Slice from a float16 constant, an embedding table, which keeps its size); a
float16 value is rounded (Cast to float16) only where it leaves the region: a graph output or a
node outside the table (a subgraph, a custom or contrib op, a generator with a dtype). Such a
region then runs on the float32 kernels and their native fast paths. Where onnxruntime rounds
more (before the data-movement nodes it keeps in float16, inside a region), onyx is the more
exact: the outputs agree within float16's precision (docs/compatibility.md).
"""

from __future__ import annotations

import numpy as np

from .. import ir
from ..ir.dtypes import DataType
from .core import BASIC, STANDARD, PassContext, graph_pass
from .pipeline import _is16, may_hold_float16

F16, F32 = DataType.FLOAT16, DataType.FLOAT

#: Standard ops whose float outputs take their float inputs' type, so a float16 node computes
#: the same in float32 with only its float16 inputs changed (no attribute names a type).
FLOAT_FOLLOWING = frozenset(
    # elementwise
    "Abs Acos Acosh Add Asin Asinh Atan Atanh Ceil Celu Clip Cos Cosh Div Elu Equal Erf Exp "
    "Floor Gelu Greater GreaterOrEqual HardSigmoid HardSwish IsInf IsNaN LeakyRelu Less "
    "LessOrEqual Log Max Mean Min Mish Mod Mul Neg PRelu Pow Reciprocal Relu Round Selu Shrink "
    "Sigmoid Sign Sin Sinh Softplus Softsign Sqrt Sub Sum Tan Tanh ThresholdedRelu Where "
    # linear algebra, convolution, pooling, normalization
    "Conv ConvTranspose Einsum Gemm MatMul AveragePool GlobalAveragePool GlobalLpPool "
    "GlobalMaxPool LpPool MaxPool BatchNormalization GroupNormalization InstanceNormalization "
    "LayerNormalization LpNormalization MeanVarianceNormalization RMSNormalization "
    "Softmax LogSoftmax Hardmax CumSum "
    # reductions, selection
    "ArgMax ArgMin ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean "
    "ReduceMin ReduceProd ReduceSum ReduceSumSquare TopK NonZero "
    # data movement (exact in either precision)
    "Concat DepthToSpace Dropout Expand Flatten Gather GatherElements GatherND Identity Pad "
    "Reshape Resize ScatterElements ScatterND Shape Size Slice SpaceToDepth Split Squeeze "
    "Tile Transpose Trilu Unsqueeze CastLike".split()
)


#: Ops that pick a few values out of their first input: from a float16 constant (an embedding
#: table) they stay float16, as in onnxruntime, so that only the values picked are converted
#: (run after run) and the table keeps its size.
PICKS = frozenset(("Gather", "GatherElements", "GatherND", "Slice"))


def _lowered(ctx: PassContext, node: ir.Node) -> bool:
    """Whether ``node`` computes in float32 when it reads or writes float16."""
    if node.domain not in STANDARD or node.has_subgraphs():
        return False
    if node.op_type in PICKS and _is16(node.inputs[0]) and ctx.const(node.inputs[0]) is not None:
        return False
    if node.attributes_have_refs():
        return False
    if node.op_type == "Cast":  # (from integers too: onnxruntime drops that rounding as well)
        # but not a Cast of float16 made by the model's own Cast: onnxruntime runs both (they
        # have float16 kernels: only the Casts it inserts around other nodes cancel), and the
        # first one's rounding shows (Cast(to=float16) -> Cast(to=float) of 1e30 is inf)
        source = node.inputs[0].producer if node.inputs and node.inputs[0] is not None else None
        return not (_is16(node.inputs[0]) and source is not None and source.op_type == "Cast")
    if node.op_type not in FLOAT_FOLLOWING:
        return False
    # untyped values (inference gave up) could be float16 at run time: left as they are
    return all(
        v.type is not None for v in (*node.inputs, *node.outputs) if v is not None and v.name
    )


#: Below this many elements a float16 constant is converted by astype (the table's lookup
#: pays off on weights, not on scalars).
TABLE_MIN = 4096
_TABLE: list[np.ndarray] = []  # (the float32 of every float16 bit pattern, made at first use)


def widened(data: np.ndarray) -> np.ndarray:
    """A float16 array's float32 values, bit for bit astype's: looked up by bit pattern in a
    table of all 65536 (256 KiB) for a weight, which takes half astype's time (a session
    converts its float16 model's weights at every creation)."""
    if data.size < TABLE_MIN:
        return data.astype(np.float32)
    if not _TABLE:
        bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
        _TABLE.append(bits.view(np.float16).astype(np.float32))
    return _TABLE[0].take(np.ascontiguousarray(data).view(np.uint16))


class _Lowering:
    """The rewrite of one graph: float32 twins of its float16 values, made on demand."""

    def __init__(self, ctx: PassContext):
        self.ctx = ctx
        self.twin: dict[int, ir.Value] = {}  # id(float16 value) -> its float32 value

    def f32(self, v: ir.Value, before: ir.Node) -> ir.Value:
        """The float32 twin of float16 ``v``: a converted constant or an exact Cast."""
        t = self.twin.get(id(v))
        if t is not None:
            return t
        data = self.ctx.const(v) if v.name else None
        if data is not None:
            t = self.ctx.add_const(widened(data), v.name + "_f32")
        else:
            t = self._new_value(v)
            cast = ir.Node("Cast", [v], [t], {"to": int(F32)}, name=self._name(v, "to_f32"))
            self.ctx.graph.insert_before(before, cast)
        self.twin[id(v)] = t
        return t

    def _name(self, v: ir.Value, what: str) -> str:
        return self.ctx.fresh_name(f"{v.name or 'value'}_{what}")

    def _new_value(self, v: ir.Value) -> ir.Value:
        return ir.Value(self._name(v, "f32"), ir.TensorType(F32, v.shape))

    def lower(self, node: ir.Node) -> ir.Node:
        """Put a float32 copy of ``node`` in its place; float16 outputs get float32 twins (the
        float16 values themselves stay for :meth:`round_exits`)."""
        inputs = [self.f32(v, node) if _is16(v) else v for v in node.inputs]
        outputs = []
        for v in node.outputs:
            if _is16(v):
                if self.ctx.is_output(v):
                    t = self._new_value(v)
                else:  # the twin takes the name: fetched by it, a value is the float32 one
                    t = ir.Value(v.name, ir.TensorType(F32, v.shape))
                    v.name = self._name(v, "f16")
                self.twin[id(v)] = t
                outputs.append(t)
            else:
                outputs.append(v)
        attrs = list(node.attributes.values())
        if node.op_type == "Cast" and node.attr("to") == int(F16):
            # a float16 Cast feeding the region rounds nothing (onnxruntime drops the pair)
            attrs = [ir.Attr("to", ir.AttrType.INT, int(F32))]
        new = ir.Node(node.op_type, inputs, outputs, attrs, node.domain, node.name)
        self.ctx.graph.insert_before(node, new)
        self.ctx.graph.remove(node, safe=False)
        return new

    def round_exits(self, lowered: list[tuple[ir.Node, list[ir.Value]]]) -> None:
        """A float16 value still read (by a node outside the region) or a graph output is
        made from its float32 twin by a Cast to float16: onnxruntime's rounding point."""
        for new, old_outputs in lowered:
            for v in old_outputs:
                if not _is16(v) or not (v.has_uses() or self.ctx.is_output(v)):
                    continue
                cast = ir.Node(
                    "Cast", [self.twin[id(v)]], [v], {"to": int(F16)}, name=self._name(v, "to_f16")
                )
                self.ctx.graph.insert_after(new, cast)


@graph_pass("InsertCastTransformer", BASIC)
def float16_in_float32(ctx: PassContext) -> bool:
    """Float16 regions of a session's model compute in float32 (see the module docstring)."""
    if not ctx.for_session or ctx.memo.get("float16_lowered"):
        return False
    ctx.memo["float16_lowered"] = True
    if not may_hold_float16(ctx.model):  # (pipeline.py's gate looked already: a float16 model)
        return False
    if not ctx.inferred:
        ctx.infer()
    todo = [
        n
        for n in ctx.graph
        if _lowered(ctx, n)
        and (any(_is16(v) for v in n.inputs) or any(_is16(v) for v in n.outputs))
    ]
    if not todo:
        return False
    rewrite = _Lowering(ctx)
    done = [(rewrite.lower(n), list(n.outputs)) for n in todo]
    rewrite.round_exits(done)
    ctx.count("InsertCastTransformer", len(todo))
    return True
