"""The optimizer's passes in the order they run: the one list to read (and to edit).

Each pass is a function ``fn(ctx) -> bool`` marked with :func:`core.graph_pass` (its name and
level) in its family's module. ``optimize`` runs the basic passes in rounds until nothing
changes, then the fusions in rounds, the basic passes after each (see ``__init__.py``).
"""

from __future__ import annotations

from dataclasses import replace

from . import (
    bins,
    cleanup,
    conv,
    dynamic_quant,
    embed_layer_norm,
    float16,
    fold,
    gemm,
    lookup,
    movement,
    qdq,
    rnn,
    self_attention,
    skip_layer_norm,
    transformer,
    transpose,
    trees,
)
from .core import Pass, pass_of

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
    "MatMulIntegerToFloatFusion": (("MatMulInteger",),),
    "ConvBNFusion": (("Conv",), ("BatchNormalization",)),
    "ConvAddFusion": (("Conv",), ("Add",)),
    "ConvMulFusion": (("Conv",), ("Mul",)),
    "BatchNormScaleFusion": (("BatchNormalization",), ("Mul", "Add")),
    "ConvActivationFusion": (("Conv",),),
    "ConvHardSwishFusion": (("Conv",), ("HardSwish",)),
    "MatMulAddFusion": (("MatMul",), ("Add",)),
    "GemmActivationFusion": (("Gemm",),),
    "MatMulBiasFusion": (("MatMul",), ("Add",)),
    "GeluFusion": (("Erf",),),
    "FastGeluFusion": (("Tanh", "Gelu"),),
    "BiasGeluFusion": (("Gelu", "FastGelu"), ("Add",)),
    "LayerNormFusion": (("ReduceMean",),),
    "EmbedLayerNormFusion": (("LayerNormalization",), ("Gather",), ("Add",)),
    "SkipLayerNormFusion": (("LayerNormalization",), ("Add",)),
    "MatMulScaleFusion": (("MatMul", "FusedMatMul"),),
    "SelfAttentionFusion": (("Softmax",), ("MatMul",)),
    "AttentionFusion": (("Softmax",),),
    "TransposeOptimizer": (("Transpose",),),
    "ReshapeOwnShapeFusion": (("Reshape",), ("Shape",)),
    "UnsqueezeTransposeSqueezeFusion": (("Unsqueeze",), ("Squeeze",)),
    "RnnZeroInitialState": (tuple(rnn.STATE_INPUTS),),
    "BinsOneHotBatching": (("Concat",),),
    "QDQPadRequantize": (("Pad",), ("DequantizeLinear",)),
    "QLinearConvLookupFusion": (("QLinearConv",), ("TableLookup",)),
}


def _scheduled(fn) -> Pass:
    p = pass_of(fn)
    groups = TRIGGERS.get(p.name, ())
    return replace(p, triggers=tuple(frozenset(ops) for ops in groups))


#: Basic passes: standard ops in, standard ops out.
BASIC_PASSES: tuple[Pass, ...] = tuple(
    _scheduled(fn)
    for fn in (
        trees.tree_leaf_function_fusion,  # first: 2,700 nodes of an IsolationForest become 110
        trees.tree_sum_fusion,
        fold.constant_folding,
        fold.shape_folding,
        fold.qdq_data_movement,
        cleanup.eliminate_identity,
        cleanup.eliminate_dropout,
        cleanup.eliminate_noops,
        cleanup.dead_code,
        cleanup.unused_initializers,
        cleanup.common_subexpressions,
        float16.float16_in_float32,  # a session's model only; once, after the first folding
    )
)

#: Fusions (extended level), in order of precedence: an earlier one takes a pattern first.
FUSIONS: tuple[Pass, ...] = tuple(
    _scheduled(fn)
    for fn in (
        qdq.qdq_fusion,  # first: a FusedConv would hide a QDQ node unit from it
        dynamic_quant.matmul_integer_to_float,
        conv.conv_bn,
        conv.conv_add,
        conv.conv_mul,
        conv.batch_norm_scale,
        conv.conv_activation,
        conv.conv_hard_swish,
        gemm.matmul_add,
        gemm.gemm_activation,
        transformer.gelu_fusion,
        transformer.fast_gelu_fusion,
        transformer.bias_gelu_fusion,
        transformer.layer_norm_fusion,
        embed_layer_norm.embed_layer_norm_fusion,  # (first: its sum is no residual's)
        skip_layer_norm.skip_layer_norm_fusion,
        transformer.matmul_scale,
        self_attention.self_attention_fusion,  # (before it: a whole block, projections included)
        transformer.attention_fusion,
        transpose.transpose_cancellation,
        movement.reshape_own_shape,
        movement.unsqueeze_transpose_squeeze,
        gemm.matmul_bias,  # (after the GELU and attention fusions, which read MatMul + Add)
        rnn.rnn_zero_initial_state,
        bins.bins_one_hot_batching,
        qdq.pad_requantize,  # (before it: its DQ -> Q becomes a table)
        lookup.lookup_table_fusion,  # last: it tabulates what the other fusions made
        qdq.qlinear_conv_lookup,  # (after it: a conv's activation as LookupTableFusion's table)
    )
)

PIPELINE: tuple[Pass, ...] = BASIC_PASSES + FUSIONS
