"""The optimizer's passes in the order they run: the one list to read (and to edit).

Each pass is a function ``fn(ctx) -> bool`` marked with :func:`core.graph_pass` (its name and
level) in its family's module, listed here by "module:function" with the same name and level
(its module is imported when the pass first runs). ``optimize`` runs the basic passes in rounds until nothing
changes, then the fusions in rounds, the basic passes after each (see ``__init__.py``).
"""

from __future__ import annotations

from .core import ALL, BASIC, EXTENDED, DeferredPass

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
    "GemmActivationFusion": (("Gemm",),),
    "MatMulBiasFusion": (("MatMul",), ("Add",)),
    "GeluFusion": (("Erf",),),
    "FastGeluFusion": (("Tanh", "Gelu"),),
    "BiasGeluFusion": (("Gelu", "FastGelu"), ("Add",)),
    "LayerNormFusion": (("ReduceMean",),),
    "RMSNormFusion": (("ReduceMean",), ("Sqrt",)),
    "RotateHalfFusion": (("Neg",), ("Concat",), ("Split",)),
    "SiluFusion": (("Sigmoid",), ("Mul",)),
    "HardSigmoidMulFusion": (("HardSigmoid",), ("Mul",)),
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


def _scheduled(where: str, name: str, level: int) -> DeferredPass:
    """The pass ``name`` (of ``level``), the function ``where`` ("module:function" in this
    package, marked with that name and level: tests/test_optimizer.py checks), imported when
    it first runs: a model holding none of a fusion's trigger ops never imports its module."""
    groups = TRIGGERS.get(name, ())
    return DeferredPass(name, level, where, tuple(frozenset(ops) for ops in groups))


#: Basic passes: standard ops in, standard ops out.
BASIC_PASSES: tuple[DeferredPass, ...] = tuple(
    _scheduled(*row)
    for row in (
        # first: 2,700 nodes of an IsolationForest become 11
        ("trees:tree_leaf_function_fusion", "TreeLeafFunctionFusion", BASIC),
        ("trees:tree_sum_fusion", "TreeSumFusion", BASIC),
        ("fold:constant_folding", "ConstantFolding", BASIC),
        ("fold:shape_folding", "ShapeFolding", BASIC),
        ("fold:qdq_data_movement", "QDQDataMovement", BASIC),
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
        # last: it tabulates what the other fusions made
        ("lookup:lookup_table_fusion", "LookupTableFusion", EXTENDED),
        # (after it: a conv's activation as LookupTableFusion's table)
        ("qdq:qlinear_conv_lookup", "QLinearConvLookupFusion", EXTENDED),
        # layout (level ALL, once after the fusions): chains of quantized convs channels-last
        ("nhwc:nhwc_transformer", "NhwcTransformer", ALL),
    )
)

PIPELINE: tuple[DeferredPass, ...] = BASIC_PASSES + FUSIONS
