"""Attention, recurrent nets, losses, strings, training, ML and other one-off rules."""

from __future__ import annotations

import numpy as np

from ..ir import DataType, SequenceType, TensorType
from .engine import NodeContext, rule


@rule("CumProd", "RotaryEmbedding", "PRelu", "TensorScatter")
def same_as_first(ctx: NodeContext) -> None:
    ctx.same(0, 0)


@rule("Binarizer", domain="ai.onnx.ml")
def ml_same(ctx: NodeContext) -> None:
    ctx.same(0, 0)


@rule("Normalizer", "Scaler", domain="ai.onnx.ml")
def ml_float_same_shape(ctx: NodeContext) -> None:
    ctx.set(0, DataType.FLOAT, ctx.shape(0))


@rule("Imputer", domain="ai.onnx.ml")
def imputer(ctx: NodeContext) -> None:
    ctx.same(0, 0)  # (Y is T, X's type: int64 and int32 tensors are imputed too)


@rule("BitCast")
def bit_cast(ctx: NodeContext) -> None:
    ctx.set(0, DataType(ctx.attr("to")), ctx.shape(0))


@rule("Attention")
def attention(ctx: NodeContext) -> None:
    q, k, v = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    dtype = ctx.dtype(0)
    if q is None:
        ctx.set(0, dtype, None)
        return
    past = ctx.shape(4)
    if len(q) == 4:
        vh = v[3] if v is not None and len(v) == 4 else None
        ctx.set(0, dtype, (q[0], q[1], q[2], vh))
        kv_heads = k[1] if k is not None and len(k) == 4 else ctx.attr("kv_num_heads")
        kv_seq = k[2] if k is not None and len(k) == 4 else None
        q_heads = q[1]
    else:
        q_heads = ctx.attr("q_num_heads")
        kv_heads = ctx.attr("kv_num_heads")
        vdim = v[2] if v is not None and len(v) == 3 else None
        out = vdim // kv_heads * q_heads if isinstance(vdim, int) and kv_heads and q_heads else None
        ctx.set(0, dtype, (q[0], q[1], out))
        kv_seq = k[1] if k is not None else None
    total = kv_seq
    if past is not None and ctx.has(4):
        total = past[2] + kv_seq if isinstance(past[2], int) and isinstance(kv_seq, int) else None
    if len(ctx.node.outputs) > 1 and ctx.has(4):
        kh = k[3] if k is not None and len(k) == 4 else (past[3] if past else None)
        ctx.set(1, ctx.dtype(1), (q[0], kv_heads, total, kh))
    if len(ctx.node.outputs) > 2 and ctx.has(5):
        pv = ctx.shape(5)
        vh = v[3] if v is not None and len(v) == 4 else (pv[3] if pv else None)
        ctx.set(2, ctx.dtype(2), (q[0], kv_heads, total, vh))
    if len(ctx.node.outputs) > 3:
        ctx.set(3, dtype, (q[0], q_heads, q[2] if len(q) == 4 else q[1], total))


@rule("RNN", "GRU", "LSTM")
def recurrent(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    dtype = ctx.dtype(0)
    hidden = ctx.attr("hidden_size")
    dirs = 2 if ctx.attr("direction", "forward") == "bidirectional" else 1
    layout = ctx.attr("layout", 0)
    if x is None:
        seq = batch = None
    else:
        seq, batch = (x[1], x[0]) if layout else (x[0], x[1])
    y = (batch, seq, dirs, hidden) if layout else (seq, dirs, batch, hidden)
    h = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    ctx.set(0, dtype, y)
    for i in range(1, len(ctx.node.outputs)):
        ctx.set(i, dtype, h)


@rule("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss")
def loss(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    dtype = ctx.dtype(0)
    if ctx.attr("reduction", "mean") == "none":
        ctx.set(0, dtype, None if x is None else (x[0], *x[2:]))
    else:
        ctx.set(0, dtype, ())
    if len(ctx.node.outputs) > 1:
        ctx.set(1, dtype, x)


@rule("GridSample")
def grid_sample(ctx: NodeContext) -> None:
    x, grid = ctx.shape(0), ctx.shape(1)
    if x is None or grid is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    ctx.set(0, ctx.dtype(0), (x[0], x[1], *grid[1:-1]))


@rule("AffineGrid")
def affine_grid(ctx: NodeContext) -> None:
    size = ctx.data(1)
    if size is None:
        n = ctx.shape(1)
        r = n[0] if n and isinstance(n[0], int) else None
        ctx.set(0, ctx.dtype(0), None if r is None else (*[None] * (r - 1), r - 2))
        return
    n, _c, *sp = size.dims
    ctx.set(0, ctx.dtype(0), (n, *sp, len(sp)))


@rule("Col2Im")
def col2im(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    image = ctx.value(1)
    block = ctx.value(2)
    n_sp = ctx.shape(1)[0] if ctx.shape(1) else None
    if x is None or not isinstance(n_sp, int):
        ctx.set(0, ctx.dtype(0), None)
        return
    c = x[1] // int(np.prod(block)) if block is not None and isinstance(x[1], int) else None
    dims = [int(d) for d in image] if image is not None else [None] * n_sp
    ctx.set(0, ctx.dtype(0), (x[0], c, *dims))


@rule("NonMaxSuppression")
def nms(ctx: NodeContext) -> None:
    ctx.set(0, DataType.INT64, (None, 3))


@rule("Det")
def det(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    ctx.set(0, ctx.dtype(0), None if x is None else x[:-2])


@rule("StringNormalizer")
def string_normalizer(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    if x is None:
        ctx.set(0, DataType.STRING, None)
    else:
        ctx.set(0, DataType.STRING, [*x[:-1], None])


@rule("StringSplit")
def string_split(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    ctx.set(0, DataType.STRING, None if x is None else (*x, None))
    ctx.set(1, DataType.INT64, x)


@rule("StringConcat")
def string_concat(ctx: NodeContext) -> None:
    from .elementwise import broadcast

    ctx.set(0, DataType.STRING, broadcast([ctx.shape(0), ctx.shape(1)], ctx))


@rule("RegexFullMatch")
def regex_full_match(ctx: NodeContext) -> None:
    ctx.set(0, DataType.BOOL, ctx.shape(0))


@rule("ImageDecoder")
def image_decoder(ctx: NodeContext) -> None:
    ctx.set(0, DataType.UINT8, (None, None, None))


@rule("TfIdfVectorizer")
def tfidf(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    n = max(ctx.attr("ngram_indexes") or [-1]) + 1
    ctx.set(0, DataType.FLOAT, None if x is None else (*x[:-1], n))


@rule("Adagrad", "Momentum", "Adam", domain="ai.onnx.preview.training")
def optimizer(ctx: NodeContext) -> None:
    # inputs: R, T, then groups of tensors (X..., G..., [V..., H...]); outputs mirror X, V, H
    n_out = len(ctx.node.outputs)
    groups = {"Adagrad": 3, "Momentum": 3, "Adam": 4}[ctx.node.op_type]
    n = (ctx.n_inputs - 2) // groups
    for i in range(n_out):
        g, j = divmod(i, n) if n else (0, 0)
        src = 2 + j + (0 if g == 0 else (g + 1) * n)
        ctx.same(i, src)


@rule("CausalConvWithState")
def causal_conv(ctx: NodeContext) -> None:
    ctx.same(0, 0)
    if len(ctx.node.outputs) > 1:
        x, w = ctx.shape(0), ctx.shape(1)
        k = w[-1] if w is not None else None
        ctx.set(
            1,
            ctx.dtype(0),
            None if x is None else (x[0], x[1], k - 1 if isinstance(k, int) else None),
        )


@rule("LinearAttention")
def linear_attention(ctx: NodeContext) -> None:
    q, v = ctx.shape(0), ctx.shape(2)
    if q is None or v is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    if len(q) == 4:
        ctx.set(0, ctx.dtype(0), (q[0], q[1], q[2], v[3]))
        ctx.set(1, ctx.dtype(0), (q[0], q[1], q[3], v[3]))
    else:
        qh, kvh = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
        vd = v[2] // kvh * qh if isinstance(v[2], int) and qh and kvh else None
        ctx.set(0, ctx.dtype(0), (q[0], q[1], vd))
        k = ctx.shape(1)
        dk = k[2] // kvh if k is not None and isinstance(k[2], int) and kvh else None
        dv = v[2] // kvh if isinstance(v[2], int) and kvh else None
        ctx.set(1, ctx.dtype(0), (q[0], kvh, dk, dv))


@rule("LabelEncoder", domain="ai.onnx.ml")
def label_encoder(ctx: NodeContext) -> None:
    a = ctx.node.attributes
    if "values_tensor" in a:
        dtype = a["values_tensor"].value.dtype
    elif "values_strings" in a:
        dtype = DataType.STRING
    elif "values_int64s" in a:
        dtype = DataType.INT64
    elif "classes_strings" in a:  # LabelEncoder-1: strings <-> their index in the classes
        dtype = DataType.INT64 if ctx.dtype(0) == DataType.STRING else DataType.STRING
    else:
        dtype = DataType.FLOAT
    ctx.set(0, dtype, ctx.shape(0))


@rule("TreeEnsemble", domain="ai.onnx.ml")
def tree_ensemble(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    ctx.set(0, ctx.dtype(0), (x[0] if x else None, ctx.attr("n_targets")))


@rule("TreeEnsembleRegressor", domain="ai.onnx.ml")
def tree_regressor(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    ctx.set(0, DataType.FLOAT, (x[0] if x else None, ctx.attr("n_targets", 1)))


@rule("ArrayFeatureExtractor", domain="ai.onnx.ml")
def array_feature_extractor(ctx: NodeContext) -> None:
    x, idx = ctx.shape(0), ctx.shape(1)
    if x is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    n = int(np.prod(idx)) if idx is not None and all(isinstance(d, int) for d in idx) else None
    ctx.set(0, ctx.dtype(0), (*x[:-1], n) if len(x) > 1 else (1, n))


@rule("ZipMap", domain="ai.onnx.ml")
def zip_map(ctx: NodeContext) -> None:
    from ..ir import MapType

    key = DataType.STRING if ctx.attr("classlabels_strings") else DataType.INT64
    ctx.set_type(0, SequenceType(MapType(key, TensorType(DataType.FLOAT, ()))))


@rule("SequenceMap")
def sequence_map(ctx: NodeContext) -> None:
    body = ctx.attr("body")
    inputs = []
    for i in range(ctx.n_inputs):
        t = ctx.type(i)
        inputs.append(t.elem if isinstance(t, SequenceType) else t)
    outs = ctx.engine.infer_subgraph(ctx, body, inputs)
    for i, t in enumerate(outs):
        if t is not None:
            ctx.set_type(
                i, SequenceType(TensorType(t.elem_type) if isinstance(t, TensorType) else t)
            )


@rule("FlexAttention", domain="ai.onnx.preview")
def flex_attention(ctx: NodeContext) -> None:
    q, v = ctx.shape(0), ctx.shape(2)
    if q is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    ctx.set(0, ctx.dtype(0), (*q[:-1], v[-1] if v is not None else None))


# -- ai.onnx.ml classifiers and regressors --------------------------------------------------------


def _batch(ctx: NodeContext):
    x = ctx.shape(0)
    return (x[0] if x else None) if x is None or len(x) > 1 else 1


@rule("LinearClassifier", "SVMClassifier", "TreeEnsembleClassifier", domain="ai.onnx.ml")
def ml_classifier(ctx: NodeContext) -> None:
    ints = ctx.attr("classlabels_ints") or ctx.attr("classlabels_int64s")
    strings = ctx.attr("classlabels_strings")
    labels = ints or strings or []
    n = _batch(ctx)
    ctx.set(0, DataType.STRING if strings else DataType.INT64, (n,))
    classes = len(labels) or None
    if ctx.node.op_type == "LinearClassifier" and classes is None:
        icpt = ctx.attr("intercepts")
        classes = len(icpt) if icpt else None
    ctx.set(1, DataType.FLOAT, (n, classes))


@rule("LinearRegressor", "SVMRegressor", domain="ai.onnx.ml")
def ml_regressor(ctx: NodeContext) -> None:
    targets = ctx.attr("targets", 1) if ctx.node.op_type == "LinearRegressor" else 1
    ctx.set(0, DataType.FLOAT, (_batch(ctx), targets))


@rule("OneHotEncoder", domain="ai.onnx.ml")
def ml_one_hot(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    cats = ctx.attr("cats_int64s") or ctx.attr("cats_strings") or []
    ctx.set(0, DataType.FLOAT, None if x is None else (*x, len(cats) or None))


@rule("CategoryMapper", domain="ai.onnx.ml")
def ml_category_mapper(ctx: NodeContext) -> None:
    out = DataType.INT64 if ctx.dtype(0) == DataType.STRING else DataType.STRING
    ctx.set(0, out, ctx.shape(0))


@rule("FeatureVectorizer", domain="ai.onnx.ml")
def ml_feature_vectorizer(ctx: NodeContext) -> None:
    dims = ctx.attr("inputdimensions") or []
    ctx.set(0, DataType.FLOAT, (_batch(ctx), sum(dims) if dims else None))


@rule("DictVectorizer", domain="ai.onnx.ml")
def ml_dict_vectorizer(ctx: NodeContext) -> None:
    vocab = ctx.attr("int64_vocabulary") or ctx.attr("string_vocabulary") or []
    t = ctx.type(0)
    value = getattr(t, "value", None)
    dtype = value.elem_type if isinstance(value, TensorType) else None
    ctx.set(0, dtype, (None, len(vocab) or None))
