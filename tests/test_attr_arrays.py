"""Long FLOATS and STRINGS attributes read from a file stay arrays in the IR (ir.Attr.of_array;
float32, and object arrays of bytes): their list is made only when ``value`` is read, saving
writes the same bytes, and the kernels that declare them (registry.array_attributes) get
arrays of the dtype their lists became."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onyx
from onyx import ir, serde
from onyx.runtime.bind import bind
from onyx.serde import repeated

ML = "ai.onnx.ml"
N_VECTORS, N_FEATURES = 200, 3  # 600 support vector floats: over repeated.MIN_ELEMENTS


def _model(node, n_out: int, out_types) -> bytes:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, N_FEATURES])],
        [helper.make_tensor_value_info(f"y{i}", t, None) for i, t in zip(range(n_out), out_types)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)]
    )
    model.ir_version = 8
    return model.SerializeToString()


def _svm() -> bytes:
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal(N_VECTORS * N_FEATURES).astype(np.float32)
    vectors[5] = -0.0
    node = helper.make_node(
        "SVMClassifier",
        ["x"],
        ["y0", "y1"],
        domain=ML,
        classlabels_ints=[0, 1],
        coefficients=rng.standard_normal(N_VECTORS).astype(np.float32).tolist(),
        support_vectors=vectors.tolist(),
        vectors_per_class=[N_VECTORS // 2, N_VECTORS // 2],
        rho=[0.25],
        kernel_type="RBF",
        kernel_params=[0.5, 0.0, 3.0],
    )
    return _model(node, 2, [TensorProto.INT64, TensorProto.FLOAT])


def _stumps(op: str) -> bytes:
    """300 one-split trees: 900 nodes_values, 600 leaf weights (both long)."""
    trees = 300
    rng = np.random.default_rng(2)
    nodes = dict(
        nodes_treeids=np.repeat(np.arange(trees), 3).tolist(),
        nodes_nodeids=[0, 1, 2] * trees,
        nodes_featureids=[int(f) for t in range(trees) for f in (t % N_FEATURES, 0, 0)],
        nodes_values=[v for t in range(trees) for v in (float(np.float32(t / 97 - 1.5)), 0, 0)],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"] * trees,
        nodes_truenodeids=[1, 0, 0] * trees,
        nodes_falsenodeids=[2, 0, 0] * trees,
        nodes_hitrates=[1.0] * (3 * trees),
    )
    weights = rng.standard_normal(2 * trees).astype(np.float32).tolist()
    if op == "TreeEnsembleRegressor":
        node = helper.make_node(
            op, ["x"], ["y0"], domain=ML, n_targets=1, target_treeids=np.repeat(
                np.arange(trees), 2).tolist(), target_nodeids=[1, 2] * trees,
            target_ids=[0] * (2 * trees), target_weights=weights, base_values=[0.5], **nodes,
        )  # fmt: skip
        return _model(node, 1, [TensorProto.FLOAT])
    node = helper.make_node(
        op, ["x"], ["y0", "y1"], domain=ML, classlabels_int64s=[0, 1, 2],
        class_treeids=np.repeat(np.arange(trees), 2).tolist(), class_nodeids=[1, 2] * trees,
        class_ids=[t % 3 for t in range(2 * trees)], class_weights=weights,
        post_transform="SOFTMAX", **nodes,
    )  # fmt: skip
    return _model(node, 2, [TensorProto.INT64, TensorProto.FLOAT])


def _node(model: ir.Model) -> ir.Node:
    (node,) = list(model.graph)
    return node


def test_a_long_floats_attribute_stays_an_array_until_read():
    raw = _svm()
    attrs = _node(serde.loads(raw)).attributes
    sv = attrs["support_vectors"]
    assert isinstance(sv.array, np.ndarray) and sv.array.dtype == np.float32
    assert not sv.array.flags.writeable
    assert attrs["coefficients"].array is None  # (short: a list, as before)
    want = [float(x) for x in helper.get_attribute_value(_proto_attr(raw, "support_vectors"))]
    got = sv.value  # the list, made now: the same Python floats, -0.0's sign kept
    assert type(got) is list and all(type(x) is float for x in got)
    assert np.array_equal(np.array(got), np.array(want)) and np.signbit(got[5])
    assert sv.array is None  # (the list is the value now: whoever edits it is heard)


def test_long_strings_stay_bytes_until_read():
    raw = _stumps("TreeEnsembleRegressor")
    modes = _node(serde.loads(raw)).attributes["nodes_modes"]
    assert modes.array.dtype == object and modes.array[1] == b"LEAF"
    assert modes.value[:3] == ["BRANCH_LEQ", "LEAF", "LEAF"] and modes.array is None
    bad = ir.Attr.of_array("m", ir.AttrType.STRINGS, np.array([b"ok", b"\xff"] * 300, object))
    assert bad.value[:2] == ["ok", b"\xff"]  # (not UTF-8: kept as bytes, as the reader does)


def test_setting_value_drops_the_array():
    attr = ir.Attr.of_array("w", ir.AttrType.FLOATS, np.zeros(600, np.float32))
    attr.value = [1.0, 2.0]
    assert attr.array is None and attr.value == [1.0, 2.0]


def _proto_attr(raw: bytes, name: str):
    from onnx import ModelProto

    (a,) = [a for a in ModelProto.FromString(raw).graph.node[0].attribute if a.name == name]
    return a


@pytest.mark.parametrize("make", [_svm, lambda: _stumps("TreeEnsembleClassifier")])
def test_round_trip_bytes_unchanged(make):
    raw = make()
    model = serde.loads(raw)
    saved = serde.dumps(model)
    assert any(a.array is not None for a in _node(model).attributes.values())  # (never listed)
    for a in _node(model).attributes.values():
        a.value  # noqa: B018  (the lists made: the bytes they save are the same)
    assert serde.dumps(model) == saved
    assert serde.dumps(serde.loads(saved)) == saved
    assert saved == serde.dumps(serde.loads(raw))


@pytest.mark.parametrize(
    "make, names",
    [
        (_svm, {"support_vectors": np.float64}),
        (lambda: _stumps("TreeEnsembleClassifier"),
         {"nodes_values": np.float64, "class_weights": np.float32,
         "nodes_hitrates": np.float32, "nodes_modes": object}),
        (lambda: _stumps("TreeEnsembleRegressor"),
         {"nodes_values": np.float64, "target_weights": np.float32}),
    ],
)  # fmt: skip
def test_kernels_take_the_arrays_and_compute_the_same(make, names):
    raw = make()
    model = serde.loads(raw)
    node = _node(model)
    step = bind(node, dict(model.opset_imports))
    for name, dtype in names.items():
        got = step.attrs[name]
        assert isinstance(got, np.ndarray) and got.dtype == dtype and not got.flags.writeable
        want = node.attributes[name].value
        if dtype is object:  # (the modes' bytes, as written)
            want = [m.encode() for m in want]
        assert np.array_equal(got, np.asarray(want, dtype))
    x = np.random.default_rng(3).standard_normal((16, N_FEATURES)).astype(np.float32)
    from_file = onyx.InferenceSession(raw)
    (planned,) = [s.node for s in from_file.plan.default_schedule]
    # the session's creation made no list of them
    assert all(planned.attributes[n].array is not None for n in names)
    listed = serde.loads(raw)
    for a in _node(listed).attributes.values():
        a.value  # noqa: B018  (every attribute a list: the kernels' list path)
    from_lists = onyx.InferenceSession(listed)
    for got, want in zip(from_file.run(None, {"x": x}), from_lists.run(None, {"x": x})):
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_memo_min_elements_is_over_the_memo_keys_lists():
    from onyx.inference import memo

    assert repeated.MIN_ELEMENTS > memo.MAX_LIST  # (memo._key declines an array attribute)


def test_a_plain_attr_reads_its_fields_the_fast_way():
    """A class with __getattr__ reads every field through the generic path (no specialized
    attribute reads): only of_array's subclass has one, and it equals a plain Attr."""
    assert not hasattr(ir.Attr, "__getattr__")
    arr = ir.Attr.of_array("w", ir.AttrType.INTS, np.arange(600))
    plain = ir.Attr("w", ir.AttrType.INTS, list(range(600)))
    assert arr == plain and plain == arr and isinstance(arr, ir.Attr)
