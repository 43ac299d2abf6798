"""ai.onnx.ml kernels against onnxruntime, on small hand-built models covering the attributes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import run_onnx
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

F, I64, S = TensorProto.FLOAT, TensorProto.INT64, TensorProto.STRING
RNG = np.random.default_rng(0)


def model(op_type, inputs, outputs, ml_opset=3, domain="ai.onnx.ml", **attrs):
    """A one-node model; inputs/outputs are (name, elem_type, shape) triples."""
    node = helper.make_node(
        op_type, [i[0] for i in inputs], [o[0] for o in outputs], domain=domain, **attrs
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(*o) for o in outputs],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(domain, ml_opset)]
    m = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    return m


def run_both(m, feeds):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)
    actual = run_onnx(m, feeds)
    return expected, actual


def check(m, feeds, rtol=1e-5, atol=1e-6):
    expected, actual = run_both(m, feeds)
    assert len(actual) >= len(expected)
    for i, (e, a) in enumerate(zip(expected, actual)):
        a = np.asarray(a)
        assert a.shape == e.shape, f"output {i}: shape {a.shape} != {e.shape}"
        if e.dtype == object:
            assert a.tolist() == e.tolist(), f"output {i}"
        else:
            assert a.dtype == e.dtype, f"output {i}: dtype {a.dtype} != {e.dtype}"
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"output {i}")
    return expected, actual


# ----------------------------------------------------------------------------------------------
# Tree ensembles: a random forest of small trees, encoded for every op and version


def random_trees(n_trees=4, depth=3, n_features=3, seed=0, modes=("BRANCH_LEQ",)):
    """Complete binary trees as nodes_* lists (node ids restart at 0 in each tree)."""
    rng = np.random.default_rng(seed)
    nodes = {k: [] for k in ("treeids", "nodeids", "featureids", "values", "modes")}
    nodes.update(truenodeids=[], falsenodeids=[], tracks=[])
    leaves = []  # (tree, node)
    for t in range(n_trees):
        n_inner = 2**depth - 1
        for i in range(2 ** (depth + 1) - 1):
            nodes["treeids"].append(t)
            nodes["nodeids"].append(i)
            if i < n_inner:
                nodes["featureids"].append(int(rng.integers(n_features)))
                nodes["values"].append(float(np.round(rng.normal(), 1)))
                nodes["modes"].append(str(rng.choice(modes)))
                nodes["truenodeids"].append(2 * i + 1)
                nodes["falsenodeids"].append(2 * i + 2)
                nodes["tracks"].append(int(rng.integers(2)))
            else:
                nodes["featureids"].append(0)
                nodes["values"].append(0.0)
                nodes["modes"].append("LEAF")
                nodes["truenodeids"].append(0)
                nodes["falsenodeids"].append(0)
                nodes["tracks"].append(0)
                leaves.append((t, i))
    return nodes, leaves


def tree_attrs(nodes, tracks=True):
    attrs = dict(
        nodes_treeids=nodes["treeids"],
        nodes_nodeids=nodes["nodeids"],
        nodes_featureids=nodes["featureids"],
        nodes_values=nodes["values"],
        nodes_modes=nodes["modes"],
        nodes_truenodeids=nodes["truenodeids"],
        nodes_falsenodeids=nodes["falsenodeids"],
    )
    if tracks:
        attrs["nodes_missing_value_tracks_true"] = nodes["tracks"]
    return attrs


def features(n=40, n_features=3, nan=True):
    x = np.round(RNG.normal(size=(n, n_features)), 1).astype(np.float32)
    if nan:
        x[::7, 1] = np.nan
    return x


ALL_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


@pytest.mark.parametrize("modes", [("BRANCH_LEQ",), ALL_MODES[:4], ALL_MODES])
@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("n_targets", [1, 3])
def test_tree_regressor(modes, aggregate, n_targets):
    nodes, leaves = random_trees(modes=modes)
    rng = np.random.default_rng(1)
    targets = [(t, n, k) for t, n in leaves for k in range(n_targets) if rng.random() < 0.8]
    attrs = tree_attrs(nodes)
    attrs.update(
        n_targets=n_targets,
        aggregate_function=aggregate,
        target_treeids=[t for t, _, _ in targets],
        target_nodeids=[n for _, n, _ in targets],
        target_ids=[k for _, _, k in targets],
        target_weights=[float(np.round(rng.normal(), 2)) for _ in targets],
        base_values=[0.5 * k for k in range(n_targets)],
    )
    m = model("TreeEnsembleRegressor", [("X", F, None)], [("Y", F, None)], **attrs)
    check(m, {"X": features()})


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("n_targets", [1, 3])
def test_tree_regressor_post_transform(transform, n_targets):
    nodes, leaves = random_trees()
    targets = [(t, n, k) for t, n in leaves for k in range(n_targets)]
    attrs = tree_attrs(nodes)
    attrs.update(
        n_targets=n_targets,
        post_transform=transform,
        target_treeids=[t for t, _, _ in targets],
        target_nodeids=[n for _, n, _ in targets],
        target_ids=[k for _, _, k in targets],
        target_weights=list(np.round(RNG.uniform(0, 0.2, len(targets)), 3).astype(float)),
    )
    m = model("TreeEnsembleRegressor", [("X", F, None)], [("Y", F, None)], **attrs)
    check(m, {"X": features(nan=False)}, rtol=1e-4, atol=PROBIT_ATOL.get(transform, 1e-6))


def test_tree_regressor_double_thresholds_v3():
    nodes, leaves = random_trees()
    attrs = tree_attrs(nodes)
    del attrs["nodes_values"]
    attrs.update(
        nodes_values_as_tensor=numpy_helper.from_array(np.array(nodes["values"], np.float64)),
        n_targets=1,
        target_treeids=[t for t, _ in leaves],
        target_nodeids=[n for _, n in leaves],
        target_ids=[0] * len(leaves),
        target_weights_as_tensor=numpy_helper.from_array(np.linspace(-1, 1, len(leaves))),
        base_values_as_tensor=numpy_helper.from_array(np.array([0.25])),
    )
    m = model("TreeEnsembleRegressor", [("X", TensorProto.DOUBLE, None)], [("Y", F, None)], **attrs)
    check(m, {"X": features().astype(np.float64)})


def classifier_model(n_classes, class_sets, weights, transform, base, labels="int"):
    nodes, leaves = random_trees()
    votes = [(t, n, c) for t, n in leaves for c in class_sets]
    attrs = tree_attrs(nodes)
    attrs.update(
        post_transform=transform,
        class_treeids=[t for t, _, _ in votes],
        class_nodeids=[n for _, n, _ in votes],
        class_ids=[c for _, _, c in votes],
        class_weights=list(weights(len(votes)).astype(float)),
    )
    if base is not None:
        attrs["base_values"] = base
    if labels == "int":
        attrs["classlabels_int64s"] = list(range(10, 10 + n_classes))
        out = ("Y", I64, None)
    else:
        attrs["classlabels_strings"] = [f"c{i}" for i in range(n_classes)]
        out = ("Y", S, None)
    return model("TreeEnsembleClassifier", [("X", F, None)], [out, ("Z", F, None)], **attrs)


# onnxruntime's float32 erfinv approximation is noisy near p = 0.5 (cancellation).
PROBIT_ATOL = {"PROBIT": 2e-3}
POSITIVE = lambda n: np.round(RNG.uniform(0, 0.3, n), 3)  # noqa: E731
MIXED = lambda n: np.round(RNG.normal(0, 0.5, n), 3)  # noqa: E731


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize(
    "case",
    [
        (3, [0, 1, 2], POSITIVE, None),
        (3, [0, 1, 2], MIXED, [0.1, 0.2, 0.3]),
        (3, [0, 2], MIXED, None),
        (2, [0, 1], POSITIVE, None),
        (2, [0, 1], MIXED, [0.1, -0.2]),
        (2, [1], POSITIVE, None),
        (2, [1], MIXED, None),
        (2, [0], POSITIVE, None),
        (2, [0], MIXED, None),
        (2, [0], MIXED, [0.3]),
        (2, [1], MIXED, [0.3, 0.3]),
    ],
)
@pytest.mark.parametrize("labels", ["int", "str"])
def test_tree_classifier(transform, case, labels):
    n_classes, class_set, weights, base = case
    if transform == "PROBIT" and n_classes == 2 and len(class_set) == 1:
        pytest.skip("onnxruntime leaves the second score column uninitialized here")
    if n_classes == 2 and len(class_set) == 1 and base is not None and len(base) == 2:
        pytest.skip("onnxruntime drops the votes of class 1 here; we add base values as usual")
    m = classifier_model(n_classes, class_set, weights, transform, base, labels)
    check(m, {"X": features(nan=False)}, rtol=1e-4, atol=PROBIT_ATOL.get(transform, 1e-5))


def test_tree_ensemble_v5_all_modes():
    # Two trees; the second one is a single leaf (a node whose branches reach the same leaf).
    def t(a, dtype=np.float32):
        return numpy_helper.from_array(np.asarray(a, dtype))

    attrs = dict(
        n_targets=2,
        aggregate_function=1,
        post_transform=0,
        tree_roots=[0, 5],
        nodes_modes=t([0, 6, 4, 5, 2, 0], np.uint8),
        nodes_featureids=[0, 1, 2, 0, 1, 0],
        nodes_splits=t([0.5, np.nan, 1.0, -0.5, 0.0, 0.0]),
        nodes_truenodeids=[1, 0, 1, 2, 3, 6],
        nodes_trueleafs=[0, 1, 1, 1, 1, 1],
        nodes_falsenodeids=[2, 3, 4, 4, 5, 6],
        nodes_falseleafs=[0, 0, 0, 1, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0, 1, 0, 0],
        membership_values=t([1.0, 2.0, np.nan]),
        leaf_targetids=[0, 1, 0, 1, 0, 1, 0],
        leaf_weights=t([1, 2, 3, 4, 5, 6, 0.5]),
    )
    m = model("TreeEnsemble", [("X", F, None)], [("Y", F, None)], ml_opset=5, **attrs)
    x = np.array(
        [[0, 1, 1], [0, 2, 0], [0, 3, 1], [1, 1, 0], [1, 0, 2], [np.nan, 1, 1], [1, np.nan, 3]],
        np.float32,
    )
    check(m, {"X": x})


# ----------------------------------------------------------------------------------------------
# Linear models and SVMs


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("n_classes,n_weights", [(3, 3), (2, 2), (2, 1)])
@pytest.mark.parametrize("labels", ["int", "str"])
def test_linear_classifier(transform, n_classes, n_weights, labels):
    if transform == "PROBIT" and n_weights == 1:
        pytest.skip("onnxruntime writes the probits of all rows into the first rows")
    attrs = dict(
        coefficients=list(RNG.normal(size=n_weights * 4).astype(float)),
        intercepts=list(RNG.normal(size=n_weights).astype(float)),
        post_transform=transform,
    )
    if labels == "int":
        attrs["classlabels_ints"] = list(range(5, 5 + n_classes))
    else:
        attrs["classlabels_strings"] = [f"k{i}" for i in range(n_classes)]
    out = ("Y", I64 if labels == "int" else S, None)
    m = model("LinearClassifier", [("X", F, None)], [out, ("Z", F, None)], ml_opset=1, **attrs)
    x = RNG.normal(size=(20, 4)).astype(np.float32)
    check(m, {"X": x}, rtol=1e-4, atol=PROBIT_ATOL.get(transform, 1e-5))


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("targets", [1, 2])
def test_linear_regressor(transform, targets):
    attrs = dict(
        coefficients=list(RNG.normal(size=targets * 4).astype(float)),
        intercepts=list(RNG.normal(size=targets).astype(float)),
        targets=targets,
        post_transform=transform,
    )
    m = model("LinearRegressor", [("X", F, None)], [("Y", F, None)], ml_opset=1, **attrs)
    check(m, {"X": RNG.normal(size=(20, 4)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


KERNEL_PARAMS = {"LINEAR": [0.0, 0, 0], "POLY": [0.3, 1.0, 2], "RBF": [0.4, 0, 0]}
KERNEL_PARAMS["SIGMOID"] = [0.2, 0.1, 0]


@pytest.mark.parametrize("kernel", list(KERNEL_PARAMS))
@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("proba", [False, True])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC"])
def test_svm_classifier(kernel, n_classes, proba, transform):
    per_class = [3, 2, 4][:n_classes]
    n_sv = sum(per_class)
    n_pairs = n_classes * (n_classes - 1) // 2
    attrs = dict(
        kernel_type=kernel,
        kernel_params=KERNEL_PARAMS[kernel],
        vectors_per_class=per_class,
        support_vectors=list(RNG.normal(size=n_sv * 3).astype(float)),
        coefficients=list(RNG.normal(size=(n_classes - 1) * n_sv).astype(float)),
        rho=list(RNG.normal(size=n_pairs).astype(float)),
        classlabels_ints=list(range(n_classes)),
        post_transform=transform,
    )
    if proba:
        attrs["prob_a"] = list(RNG.uniform(-3, -1, n_pairs).astype(float))
        attrs["prob_b"] = list(RNG.normal(0, 0.3, n_pairs).astype(float))
    m = model("SVMClassifier", [("X", F, None)], [("Y", I64, None), ("Z", F, None)], 1, **attrs)
    check(m, {"X": RNG.normal(size=(30, 3)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", list(KERNEL_PARAMS))
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(kernel, one_class):
    attrs = dict(
        kernel_type=kernel,
        kernel_params=KERNEL_PARAMS[kernel],
        n_supports=4,
        support_vectors=list(RNG.normal(size=12).astype(float)),
        coefficients=list(RNG.normal(size=4).astype(float)),
        rho=[0.1],
        one_class=one_class,
    )
    m = model("SVMRegressor", [("X", F, None)], [("Y", F, None)], ml_opset=1, **attrs)
    check(m, {"X": RNG.normal(size=(30, 3)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


def test_svm_regressor_linear_mode():
    attrs = dict(coefficients=[0.5, -1.0, 2.0], rho=[0.3], kernel_type="LINEAR")
    attrs["kernel_params"] = [0.0, 0.0, 0.0]
    m = model("SVMRegressor", [("X", F, None)], [("Y", F, None)], ml_opset=1, **attrs)
    check(m, {"X": RNG.normal(size=(10, 3)).astype(np.float32)})


# ----------------------------------------------------------------------------------------------
# Preprocessing


def one(op_type, x, out_type=F, ml_opset=1, in_type=None, **attrs):
    in_type = in_type or helper.np_dtype_to_tensor_dtype(x.dtype)
    m = model(op_type, [("X", in_type, None)], [("Y", out_type, None)], ml_opset, **attrs)
    return check(m, {"X": x})


X4 = np.array([[1.0, -2.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0], [-1.0, -3.0, -0.5, -2.0]], np.float32)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(norm):
    one("Normalizer", X4, norm=norm)


def test_scaler_binarizer_imputer():
    one("Scaler", X4, offset=[1.0, 0, 0, 2], scale=[0.5, 1, 2, 3])
    one("Scaler", X4.astype(np.float64), offset=[1.0], scale=[2.0])
    one("Binarizer", X4, out_type=F, threshold=0.5)
    x = X4.copy()
    x[0, 1] = np.nan
    one("Imputer", x, imputed_value_floats=[9.0, 8.0, 7.0, 6.0], replaced_value_float=np.nan)
    one("Imputer", X4, imputed_value_floats=[5.0], replaced_value_float=0.0)
    xi = np.array([[1, -1, 3], [-1, 2, -1]], np.int64)
    one("Imputer", xi, out_type=I64, imputed_value_int64s=[7], replaced_value_int64=-1)


def test_one_hot_and_category_mapper():
    s = np.array([["a", "b"], ["z", "c"]], dtype=object)
    one("OneHotEncoder", s, in_type=S, cats_strings=["a", "b", "c"])
    one("OneHotEncoder", np.array([1, 3, 5], np.int64), cats_int64s=[5, 1, 2])
    one("OneHotEncoder", np.array([[1.0, 3.7]], np.float64), cats_int64s=[3, 1])
    cats = dict(cats_strings=["x", "y", "z"], cats_int64s=[7, 8, 9])
    one("CategoryMapper", np.array(["y", "q", "x"], dtype=object), I64, in_type=S, **cats)
    one("CategoryMapper", np.array([[9, 1]], np.int64), S, default_string="?", **cats)


def test_label_encoder_versions():
    s = np.array(["b", "a", "q"], dtype=object)
    one("LabelEncoder", s, I64, in_type=S, classes_strings=["a", "b"], default_int64=-5)
    one("LabelEncoder", np.array([1, 0, 4], np.int64), S, classes_strings=["a", "b"])
    one(
        "LabelEncoder",
        np.array([1.5, np.nan, 3.0], np.float32),
        S,
        ml_opset=4,  # v2 says NaN keys match too; onnxruntime matches them only from v4 on
        keys_floats=[1.5, np.nan],
        values_strings=["x", "nan"],
    )
    one(
        "LabelEncoder",
        np.array([3, 4, 3], np.int64),
        F,
        ml_opset=2,
        keys_int64s=[3, 3],
        values_floats=[1.0, 2.0],
        default_float=0.5,
    )


def test_array_feature_extractor_and_feature_vectorizer():
    m = model(
        "ArrayFeatureExtractor", [("X", F, None), ("I", I64, None)], [("Y", F, None)], ml_opset=1
    )
    check(m, {"X": X4, "I": np.array([3, 0], np.int64)})
    check(m, {"X": X4[0], "I": np.array([1], np.int64)})
    m = model(
        "FeatureVectorizer",
        [("A", I64, None), ("B", I64, None)],
        [("Y", F, None)],
        ml_opset=1,
        inputdimensions=[4, 2],
    )
    a = np.arange(15, dtype=np.int64).reshape(3, 5)  # wider than declared: truncated
    check(m, {"A": a, "B": np.array([[1], [3], [5]], np.int64)})  # narrower: zero-padded


def test_zipmap():
    m = model("ZipMap", [("X", F, None)], [("Z", onnx.TensorProto.FLOAT, None)], ml_opset=1)
    # ZipMap's output type is a sequence of maps: build that graph by hand.
    seq = helper.make_sequence_type_proto(
        helper.make_map_type_proto(S, helper.make_tensor_type_proto(F, None))
    )
    m.graph.output[0].CopyFrom(helper.make_value_info("Z", seq))
    m.graph.node[0].attribute.append(helper.make_attribute("classlabels_strings", ["a", "b"]))
    x = np.array([[0.25, 0.75], [1, 0]], np.float32)
    expected, actual = run_both(m, {"X": x})
    assert actual[0] == expected[0]


@pytest.mark.parametrize(
    "attrs",
    [
        dict(mark=0, mincharnum=1, pad_value="#", tokenexp="[a-zA-Z0-9_]+"),
        dict(mark=1, mincharnum=2, pad_value="#", separators=[" ", ","]),
        dict(mark=0, mincharnum=1, pad_value="#", separators=[""]),
    ],
)
@pytest.mark.parametrize("shape", [(3,), (1, 3)])
def test_tokenizer(attrs, shape):
    m = model("Tokenizer", [("X", S, None)], [("Y", S, None)], 1, "com.microsoft", **attrs)
    x = np.array(["the cat, sat", "a b", "hello world on"], dtype=object).reshape(shape)
    check(m, {"X": x})


def test_dict_vectorizer_and_cast_map():
    from onyx.runtime.kernels.ml.preprocess import cast_map, dict_vectorizer

    # The spec's example: vocabulary [a, c, b, z], {a: 4, c: 8} -> [4, 8, 0, 0].
    y = dict_vectorizer({"a": 4, "c": 8}, string_vocabulary=["a", "c", "b", "z"])
    np.testing.assert_array_equal(y, [[4, 8, 0, 0]])
    rows = dict_vectorizer([{1: 0.5}, {3: 2.0}], int64_vocabulary=[3, 1])
    np.testing.assert_array_equal(rows, np.array([[0, 0.5], [2.0, 0]]))
    m = {3: 1.5, 0: 2.0}
    np.testing.assert_array_equal(cast_map(m), np.array([[2.0, 1.5]], np.float32))
    sparse = cast_map(m, map_form="SPARSE", max_map=5, cast_to="TO_INT64")
    np.testing.assert_array_equal(sparse, [[2, 0, 0, 1, 0]])
    assert cast_map(m, cast_to="TO_STRING").tolist() == [["2.000000", "1.500000"]]


def test_lookup_tables_are_kept_per_node_and_input_kind(monkeypatch):
    """LabelEncoder / OneHotEncoder sort their keys once per node (and kind of input), not
    per call; another node's keys or a string input get a table of their own."""
    from onyx.runtime.kernels.ml import preprocess

    built = []
    real = preprocess._LookupTable  # noqa: SLF001 (counting the tables built)
    monkeypatch.setattr(
        preprocess, "_LookupTable", lambda *a: built.append(a) or real(*a), raising=True
    )
    keys, values = [3, 1, 2], [30, 10, 20]
    for _ in range(3):
        out = preprocess.label_encoder_4(
            np.array([1, 2, 5]), keys_int64s=keys, values_int64s=values
        )
        np.testing.assert_array_equal(out, [10, 20, -1])
    assert len(built) == 1
    other = preprocess.label_encoder_4(np.array([1]), keys_int64s=[1], values_int64s=[7])
    np.testing.assert_array_equal(other, [7])
    assert len(built) == 2
    cats = [4, 5]
    for _ in range(2):
        hot = preprocess.one_hot_encoder(np.array([[5.0]]), cats_int64s=cats)
        np.testing.assert_array_equal(hot, [[[0.0, 1.0]]])
    hot = preprocess.one_hot_encoder(np.array([["5"]], dtype=object), cats_int64s=cats)
    np.testing.assert_array_equal(hot, [[[0.0, 1.0]]])
    assert len(built) == 4


def test_array_feature_extractor_checks_kept_indices_on_every_call():
    """The indices' bounds are kept per (read-only) index array, and still checked against
    each call's X."""
    from onyx.runtime.kernels.ml.preprocess import array_feature_extractor

    y = np.array([[2]], np.int64)
    y.flags.writeable = False
    np.testing.assert_array_equal(array_feature_extractor(np.arange(3.0)[None], y), [[2.0]])
    for _ in range(2):
        with pytest.raises(IndexError, match="out of range"):
            array_feature_extractor(np.arange(2.0)[None], y)
