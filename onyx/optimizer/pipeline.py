"""The optimizer's passes in the order they run: the one list to read (and to edit).

Each pass is a function ``fn(ctx) -> bool`` marked with :func:`core.graph_pass` (its name and
level) in its family's module, listed here by "module:function" with the same name and level
(its module is imported when the pass first runs). ``optimize`` runs the basic passes in rounds until nothing
changes, then the fusions in rounds, the basic passes after each (see ``__init__.py``).
"""

from __future__ import annotations

from itertools import chain

from .. import ir
from ..runtime.registry import ONYX_DOMAIN
from .core import (
    ALL,
    BASIC,
    EXTENDED,
    LOCAL_FUSION,
    MS,
    STANDARD,
    DeferredPass,
    PassContext,
    static_shape,
)

#: Pass name -> the op types it needs present to change anything: each group must meet the
#: graph's op types (any domain: a superset is safe). Most models hold none of a fusion's
#: anchors, and a pass skipped this way costs one set test instead of a walk of the graph.
#: A pass not listed always runs.
TRIGGERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "TreeLeafFunctionFusion": (("TreeEnsembleRegressor",),),
    "TreeSumFusion": (("Sum",),),
    "QDQDataMovement": (("DequantizeLinear",),),
    "EliminateIdentity": (("Identity",),),
    "EliminateDropout": (("Dropout",),),
    "NoopElimination": (
        (
            *("Cast", "CastLike", "Transpose", "Reshape", "Squeeze", "Unsqueeze"),
            *("Flatten", "Expand", "Concat", "Sum", "Max", "Min", "Mean"),
        ),
    ),
    "QDQSelectorActionTransformer": (("DequantizeLinear",),),
    "ReluQuantFusion": (("Relu",), ("QuantizeLinear",)),
    "MatMulIntegerToFloatFusion": (("MatMulInteger",),),
    "ConvIntegerToFloatFusion": (("ConvInteger",), ("Cast",)),
    "DynamicQuantizeMatMulReluFusion": (("DynamicQuantizeMatMul",), ("Relu",)),
    "FlattenedMatMulFusion": (("Reshape",),),
    "ConvBNFusion": (("Conv",), ("BatchNormalization",)),
    "ConvAddFusion": (("Conv",), ("Add",)),
    "ConvMulFusion": (("Conv",), ("Mul",)),
    "BatchNormScaleFusion": (("BatchNormalization",), ("Mul", "Add")),
    "ConvActivationFusion": (("Conv",),),
    "ConvHardSwishFusion": (("Conv",), ("HardSwish",)),
    "BatchNormReluFusion": (("BatchNormalization",), ("Relu",)),
    "MatMulAddFusion": (("MatMul",), ("Add",)),
    "GemmActivationFusion": (("Gemm",), ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid")),
    "MatMulBiasFusion": (("MatMul",), ("Add",)),
    "GeluFusion": (("Erf",),),
    "FastGeluFusion": (("Tanh", "Gelu"),),
    "BiasGeluFusion": (("Gelu", "FastGelu"), ("Add",)),
    "LayerNormFusion": (("ReduceMean",),),
    "RMSNormFusion": (("ReduceMean",), ("Sqrt",)),
    "RotateHalfFusion": (("Neg",), ("Concat",), ("Split",)),
    "SiluFusion": (("Sigmoid",), ("Mul",)),
    "HardSigmoidMulFusion": (("HardSigmoid",), ("Mul",)),
    "ConvConcatFusion": (("Conv", "FusedConv"), ("Concat",)),
    "ChannelShuffleConvFusion": (("Reshape",), ("Transpose",), ("Conv", "FusedConv")),
    "EmbedLayerNormFusion": (("LayerNormalization",), ("Gather",), ("Add",)),
    "SkipLayerNormFusion": (
        ("LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization"),
        ("Add",),
    ),
    "MatMulScaleFusion": (("MatMul", "FusedMatMul"),),
    "SelfAttentionFusion": (("Softmax",), ("MatMul",)),
    "AttentionFusion": (("Softmax",), ("MatMul",)),  # (its softmax feeds a MatMul)
    "TimeMajorAttentionFusion": (("HeadsAttention",), ("Gather",)),
    "PackedAttentionFusion": (
        ("Attention", "HeadsAttention", "CausalHeadsAttention"),
        ("Split",),
    ),
    "TransposeOptimizer": (("Transpose",),),
    "ReshapeOwnShapeFusion": (("Reshape",), ("Shape",)),
    "FlattenedTransposeFusion": (("Reshape",), ("Transpose",), ("Concat",)),
    "UnsqueezeTransposeSqueezeFusion": (("Unsqueeze",), ("Squeeze",)),
    "RnnZeroInitialState": (("RNN", "GRU", "LSTM"),),  # (rnn.STATE_INPUTS' ops)
    "RnnLastStepFromState": (("RNN", "GRU", "LSTM"), ("Gather",)),  # (rnn.LAST_STEP_OPS)
    "RnnBatchFirstInput": (("LSTM",), ("Transpose",), ("Squeeze",)),
    "BinsOneHotBatching": (("Concat",),),
    "LinearChainFusion": (("LinearClassifier",),),
    "SpectralMagnitudeFusion": (("Sqrt",), ("Slice",)),
    "ConvMaxPoolFusion": (("MaxPool",), ("Conv", "FusedConv")),
    "QDQPadRequantize": (("Pad",), ("DequantizeLinear",)),
    "QLinearConvLookupFusion": (("QLinearConv",), ("TableLookup",)),
    "NhwcTransformer": (("QLinearConv", "QLinearConvLookup"),),
    "ChannelsLastTransformer": (("Conv", "FusedConv", "ConvHardSwish"),),
}

#: Passes whose changes give no other pass anything to do: the passes idle before such a change
#: stay idle after it, and it starts no new round of the basic passes by itself. (Removing
#: initializers that nothing reads: every pass looks at what nodes read. It changed the graph
#: in most rounds, each then one more round of every basic pass; tests/test_creation_speed.py
#: checks the graphs are those of running every pass every round.)
CONFINED = frozenset({"UnusedInitializerElimination"})

#: Pass name -> the change tags (a pass's name, or the tag it gave its change:
#: PassContext.change_tag) of changes that give it nothing new to do: a pass that had nothing
#: left to do stays idle through them (__init__._still_idle). Each entry is a claim about
#: what the pass reads, held to by tests/test_optimizer_quiet.py:
#: - DeadCodeElimination removes nodes no one reads: the other nodes, their inputs and their
#:   types stay (not EliminateDropout's: a Dropout's mask read by a dead node only is free;
#:   nor ConstantFolding's: a DequantizeLinear read by no QDQ unit is folded).
#: - CommonSubexpressionElimination's CONSTANTS_MERGED: readers of a constant read another of
#:   the same content and declared type, also a constant; no node changed.
#: - LOCAL_FUSION: a fusion's run whose every replacement was local (core.local_fusion: a
#:   node of no standard domain in a pattern's place, reading all it read and a computed
#:   value, no twin, no initializer added, no type changed): what each of these passes
#:   reads of the other nodes is as it was, and the new node is no op they take.
#: - The recurrent fusions (rnn.py), for shape folding and no-op elimination: dropping an
#:   initial state changes no op of theirs nor a type; Y's last step taken from Y_h puts a
#:   Squeeze of an untyped output (typed as the Gather's where that was a graph output) in a
#:   Gather's place that read no Shape: a reader of it now knows less, never more; a batch-first
#:   LSTM retypes Y_h, which Squeezes alone read (their outputs keep their types).
_DCE, _CONSTANTS = "DeadCodeElimination", "CommonSubexpressionElimination:constants"
_RNN = ("RnnZeroInitialState", "RnnLastStepFromState", "RnnBatchFirstInput")
QUIET: dict[str, frozenset[str]] = {
    "ConstantFolding": frozenset({_CONSTANTS, LOCAL_FUSION}),
    "ShapeFolding": frozenset({_DCE, _CONSTANTS, LOCAL_FUSION, *_RNN}),
    "EliminateIdentity": frozenset({_DCE, _CONSTANTS, LOCAL_FUSION}),
    "EliminateDropout": frozenset({_CONSTANTS, LOCAL_FUSION}),
    "NoopElimination": frozenset({_DCE, _CONSTANTS, LOCAL_FUSION, *_RNN}),
    # (a batch-first LSTM reads the Transpose's input, and the pass takes the Transpose out
    # when nothing else reads it: no other node loses its last reader)
    "DeadCodeElimination": frozenset({_CONSTANTS, LOCAL_FUSION, "RnnBatchFirstInput"}),
    "UnusedInitializerElimination": frozenset({LOCAL_FUSION}),
    "CommonSubexpressionElimination": frozenset({_DCE, _CONSTANTS, LOCAL_FUSION}),
    # (it reads the RNN nodes' initial states and their producers alone; none of these
    # changes one: dead nodes are read by none, a local fusion's pattern ends in none of the
    # producers it looks for, its own change drops states, RnnLastStepFromState reads Y_h,
    # RnnBatchFirstInput takes LSTMs without states)
    "RnnZeroInitialState": frozenset(
        {_DCE, _CONSTANTS, LOCAL_FUSION, "RnnZeroInitialState", "RnnLastStepFromState"}
        | {"RnnBatchFirstInput"}
    ),
}

#: Pass name -> {change tag: an op type}: the change gives the pass nothing new to do while
#: the graph holds no node of that op. ConstantFolding reads a node's readers only for a
#: DequantizeLinear (one a QDQ unit reads stays): dead nodes gone change nothing else it reads;
#: and a value's type only for a Constant (its tensor must be of its output's declared type):
#: the types inferred ("infer", ShapeFolding's first run, after its own first run) change
#: nothing else it reads (kernels bind to a node and run on arrays). A batch-first LSTM
#: (RnnBatchFirstInput, a session's model: every constant node folds) reads x for
#: Transpose(x): x is no constant (the Transpose of one would have folded), so the LSTM is
#: no more foldable than it was; its Squeezes read Y_h, which it makes, with a new axes
#: constant; Y_h's new type is no Constant's; x's readers change (a DequantizeLinear's too).
QUIET_WITHOUT: dict[str, dict[str, str]] = {
    "ConstantFolding": {
        _DCE: "DequantizeLinear",
        "infer": "Constant",
        "RnnBatchFirstInput": "DequantizeLinear",
    },
}

#: Passes whose own change gives them nothing new to do once the main graph's nodes are in
#: order (one walk then meets each node after its inputs' producers, whose changes it already
#: made): pass name -> whether that waits for a DeadCodeElimination run after the change
#: (the pass leaves the nodes it bypassed in place, dead, and would take them again). Not the
#: bypassing passes (NoopElimination, EliminateIdentity): a bypassed graph output renames and
#: retypes the value it now is, which a node met before may read.
SELF_QUIET: dict[str, bool] = {
    "ConstantFolding": False,  # (it removes what it folds)
    "ShapeFolding": True,  # (never a graph output's producer: no renaming)
    "DeadCodeElimination": False,  # (backwards: a node's readers go before it)
    "CommonSubexpressionElimination": True,  # (not for a twin still read: its own tag)
}


# -- gates: looks further than the op types, made before a pass's module is imported -------------
# Each answers False only where its pass surely changes nothing (and leaves nothing noted), so
# that a model none of them fits never imports those modules (a few hundred microseconds of a
# cold start each); tests/test_optimizer_gates.py holds each to its pass.

F16 = ir.DataType.FLOAT16


def may_hold_float16(model: ir.Model, op_types: frozenset[str] | None = None) -> bool:
    """A cheap look before inferring types: float16 enters a graph only through its inputs,
    initializers, a Cast or a constant (the pass leaves functions and subgraphs alone).
    ``op_types``: the main graph's (PassContext.op_types), if known: without a Cast or a
    constant node, its nodes are not walked."""
    g = model.graph
    # (asked of every session's model: loops without a call per value or node)
    tensor = ir.TensorType
    for v in chain(g.inputs, g.outputs, g.initializers.values(), g.value_info):
        t = v.type if v is not None else None
        if isinstance(t, tensor) and t.elem_type == F16:
            return True
    if op_types is not None and op_types.isdisjoint(_MAKES_FLOAT16):
        return False
    for n in g:
        op = n.op_type
        if op == "Cast":
            if n.attr("to") == _F16_CODE:
                return True
        elif op == "Constant" or op == "ConstantOfShape":
            if getattr(n.attr("value"), "dtype", None) == F16:
                return True
    return False


_F16_CODE = int(F16)
_MAKES_FLOAT16 = frozenset(("Cast", "Constant", "ConstantOfShape"))


def _is16(v: ir.Value | None) -> bool:
    return v is not None and isinstance(v.type, ir.TensorType) and v.type.elem_type == F16


def _float16_gate(ctx: PassContext) -> bool:
    """InsertCastTransformer (float16.py) looks once, at a session's model: its first look."""
    if not ctx.for_session or ctx.memo.get("float16_lowered"):
        return False
    if may_hold_float16(ctx.model, ctx.op_types()):
        return True
    ctx.memo["float16_lowered"] = True  # (what the pass notes when it finds no float16)
    return False


_BYTE_TYPES = frozenset((ir.DataType.INT8, ir.DataType.UINT8))


def _may_hold_bytes(ctx: PassContext) -> bool:
    """LookupTableFusion (lookup.py) starts its chains at the 8-bit values nodes read, a type
    unknown to inference included (a reader's zero point then tells): a graph whose values read
    all have known wider types has none."""
    g = ctx.graph
    for v in chain(g.inputs, (v for n in g for v in n.outputs)):
        t = v.type
        if isinstance(t, ir.TensorType) and t.elem_type is not None:
            if t.elem_type not in _BYTE_TYPES:
                continue
        if v.has_uses():
            return True
    return False


def pooled_stem(conv: ir.Node, pool: ir.Node, w_shape: tuple) -> bool:
    """Whether conv is a network's stem that the native kernel pools as it computes it
    (native.StemPool, kernels/audio.py): a 2-D FusedConv + Relu of one group and static
    weights with few values per output (native.SMALL_CONV_K) and at least 8 outputs, not
    1x1, followed by a MaxPool other than 2x2 (kernels/small_cnn.py's)."""
    from ..runtime.native._core import SMALL_CONV_K

    if conv.op_type != "FusedConv" or len(w_shape) != 4:
        return False
    if not all(isinstance(d, int) for d in w_shape):
        return False
    a = conv.attributes
    if a.get("activation") is None or a["activation"].value != "Relu":
        return False
    if (a["group"].value if "group" in a else 1) != 1:
        return False
    kernel = pool.attributes.get("kernel_shape")
    if kernel is None or len(kernel.value) != 2 or list(kernel.value) == [2, 2]:
        return False
    M, C, kh, kw = w_shape
    return C * kh * kw <= SMALL_CONV_K and M >= 8 and (kh, kw) != (1, 1)


def _pools_a_1d_conv(ctx: PassContext) -> bool:
    """ConvMaxPoolFusion (audio.py) takes a MaxPool of a conv whose weights are of rank 3, or
    of a stem (pooled_stem)."""
    for pool in ctx.graph:
        x = pool.inputs[0] if pool.op_type == "MaxPool" and pool.inputs else None
        conv = x.producer if x is not None else None
        if conv is not None and len(conv.inputs) > 1 and conv.inputs[1] is not None:
            shape = static_shape(conv.inputs[1]) or ()
            if len(shape) == 3 or pooled_stem(conv, pool, shape):
                return True
    return False


_CHANNELS_LAST_CONVS = frozenset(
    (*((d, "Conv") for d in STANDARD), (MS, "FusedConv"), (ONYX_DOMAIN, "ConvHardSwish"))
)


def _has_grouped_conv(ctx: PassContext) -> bool:
    """ChannelsLastTransformer (layout.py) takes only chains that hold a depthwise conv, whose
    group is its channels' count: a graph of convs of group 1 has none."""
    return any(
        (n.domain, n.op_type) in _CHANNELS_LAST_CONVS and n.attr("group", 1) != 1 for n in ctx.graph
    )


#: Pass name -> its gate (see above); a pass not listed has none.
GATES = {
    "InsertCastTransformer": _float16_gate,
    "LookupTableFusion": _may_hold_bytes,
    "ConvMaxPoolFusion": _pools_a_1d_conv,
    "ChannelsLastTransformer": _has_grouped_conv,
}


def _scheduled(where: str, name: str, level: int) -> DeferredPass:
    """The pass ``name`` (of ``level``), the function ``where`` ("module:function" in this
    package, marked with that name and level: tests/test_optimizer.py checks), imported when
    it first runs: a model holding none of a fusion's trigger ops, or failing its gate, never
    imports its module."""
    triggers = tuple(map(frozenset, TRIGGERS.get(name, ())))
    return DeferredPass(name, level, where, triggers, GATES.get(name))


#: Basic passes: standard ops in, standard ops out.
BASIC_PASSES: tuple[DeferredPass, ...] = tuple(
    _scheduled(*row)
    for row in (
        # first: 2,700 nodes of an IsolationForest become 11
        ("trees:tree_leaf_function_fusion", "TreeLeafFunctionFusion", BASIC),
        ("trees:tree_sum_fusion", "TreeSumFusion", BASIC),
        ("fold:constant_folding", "ConstantFolding", BASIC),
        ("fold:shape_folding", "ShapeFolding", BASIC),
        ("qdq_movement:qdq_data_movement", "QDQDataMovement", BASIC),
        ("cleanup:eliminate_identity", "EliminateIdentity", BASIC),
        ("cleanup:eliminate_dropout", "EliminateDropout", BASIC),
        ("cleanup:eliminate_noops", "NoopElimination", BASIC),
        ("cleanup:dead_code", "DeadCodeElimination", BASIC),
        ("cleanup:unused_initializers", "UnusedInitializerElimination", BASIC),
        ("cleanup:common_subexpressions", "CommonSubexpressionElimination", BASIC),
        # a session's model only; once, after the first folding
        ("float16:float16_in_float32", "InsertCastTransformer", BASIC),
    )
)

#: Fusions (extended level), in order of precedence: an earlier one takes a pattern first.
FUSIONS: tuple[DeferredPass, ...] = tuple(
    _scheduled(*row)
    for row in (
        # first: a FusedConv would hide a QDQ node unit from it
        ("qdq:qdq_fusion", "QDQSelectorActionTransformer", EXTENDED),
        # (after it: a QDQ unit's Relu is its own; before BatchNormReluFusion takes the Relu)
        ("qdq:relu_quantize", "ReluQuantFusion", EXTENDED),
        ("dynamic_quant:matmul_integer_to_float", "MatMulIntegerToFloatFusion", EXTENDED),
        ("dynamic_quant:conv_integer_to_float", "ConvIntegerToFloatFusion", EXTENDED),
        ("dynamic_quant:dynamic_quantize_matmul_relu", "DynamicQuantizeMatMulReluFusion", EXTENDED),
        ("conv:conv_bn", "ConvBNFusion", EXTENDED),
        ("conv:conv_add", "ConvAddFusion", EXTENDED),
        ("conv:conv_mul", "ConvMulFusion", EXTENDED),
        ("conv:batch_norm_scale", "BatchNormScaleFusion", EXTENDED),
        ("conv:conv_activation", "ConvActivationFusion", EXTENDED),
        ("conv:conv_hard_swish", "ConvHardSwishFusion", EXTENDED),
        # (after the conv fusions: a BatchNormalization no conv took)
        ("cnn:batch_norm_relu", "BatchNormReluFusion", EXTENDED),
        ("gemm:matmul_add", "MatMulAddFusion", EXTENDED),
        ("gemm:gemm_activation", "GemmActivationFusion", EXTENDED),
        ("transformer:gelu_fusion", "GeluFusion", EXTENDED),
        ("transformer:fast_gelu_fusion", "FastGeluFusion", EXTENDED),
        ("transformer:bias_gelu_fusion", "BiasGeluFusion", EXTENDED),
        ("transformer:layer_norm_fusion", "LayerNormFusion", EXTENDED),
        ("transformer:rms_norm_fusion", "RMSNormFusion", EXTENDED),
        ("transformer:rotate_half_fusion", "RotateHalfFusion", EXTENDED),
        ("transformer:silu_fusion", "SiluFusion", EXTENDED),
        ("cnn:hard_sigmoid_mul", "HardSigmoidMulFusion", EXTENDED),
        # (first: its sum is no residual's)
        ("embed_layer_norm:embed_layer_norm_fusion", "EmbedLayerNormFusion", EXTENDED),
        ("skip_layer_norm:skip_layer_norm_fusion", "SkipLayerNormFusion", EXTENDED),
        ("transformer:matmul_scale", "MatMulScaleFusion", EXTENDED),
        # (before it: a whole block, projections included)
        ("self_attention:self_attention_fusion", "SelfAttentionFusion", EXTENDED),
        ("movement:flattened_transpose", "FlattenedTransposeFusion", EXTENDED),
        ("transformer:attention_fusion", "AttentionFusion", EXTENDED),
        ("transformer:packed_attention_fusion", "PackedAttentionFusion", EXTENDED),
        ("transformer:time_major_attention_fusion", "TimeMajorAttentionFusion", EXTENDED),
        ("transpose:transpose_cancellation", "TransposeOptimizer", EXTENDED),
        ("movement:reshape_own_shape", "ReshapeOwnShapeFusion", EXTENDED),
        ("movement:unsqueeze_transpose_squeeze", "UnsqueezeTransposeSqueezeFusion", EXTENDED),
        # (after the GELU and attention fusions, which read MatMul + Add)
        ("gemm:matmul_bias", "MatMulBiasFusion", EXTENDED),
        # (after it and the dynamic quantization fusions: the products it unflattens)
        ("flat_matmul:flattened_matmul", "FlattenedMatMulFusion", EXTENDED),
        ("rnn:rnn_zero_initial_state", "RnnZeroInitialState", EXTENDED),
        ("rnn:rnn_last_step_from_state", "RnnLastStepFromState", EXTENDED),
        # (after it: its Squeeze of Y_h is what this one reads)
        ("rnn:rnn_batch_first_input", "RnnBatchFirstInput", EXTENDED),
        ("bins:bins_one_hot_batching", "BinsOneHotBatching", EXTENDED),
        ("linear_chain:linear_chain_fusion", "LinearChainFusion", EXTENDED),
        ("audio:spectral_magnitude_fusion", "SpectralMagnitudeFusion", EXTENDED),
        ("audio:conv_max_pool_fusion", "ConvMaxPoolFusion", EXTENDED),
        # (before it: its DQ -> Q becomes a table)
        ("qdq:pad_requantize", "QDQPadRequantize", EXTENDED),
        # (after the conv fusions: it takes the convs they made)
        ("layout:channels_last", "ChannelsLastTransformer", EXTENDED),
        # (after it: the FusedConvs it leaves NCHW; SqueezeNet's fire modules)
        ("cnn:conv_concat", "ConvConcatFusion", EXTENDED),
        # (after the conv fusions: the depthwise Conv / FusedConv a shuffle feeds)
        ("shuffle:channel_shuffle_conv", "ChannelShuffleConvFusion", EXTENDED),
        # last: it tabulates what the other fusions made
        ("lookup:lookup_table_fusion", "LookupTableFusion", EXTENDED),
        # (after it: a conv's activation as LookupTableFusion's table)
        ("qdq:qlinear_conv_lookup", "QLinearConvLookupFusion", EXTENDED),
        # layout (level ALL, once after the fusions): chains of quantized convs channels-last
        ("nhwc:nhwc_transformer", "NhwcTransformer", ALL),
    )
)

PIPELINE: tuple[DeferredPass, ...] = BASIC_PASSES + FUSIONS
