"""The shape-rule memo (onyx/inference/memo.py): nodes alike in what their rule reads share its
result, within a model and across models; nodes that differ in any of it do not, a rule that
names a fresh dim is not remembered, and the memo is bounded."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onyx
from onyx.inference import engine, infer_shapes, memo

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()) -> onyx.ir.Model:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    return onyx.load(m.SerializeToString())


def _types(model) -> dict[str, tuple]:
    """Output name -> its inferred dims."""
    infer_shapes(model)
    return {v.name: v.type.shape.dims for n in model.graph for v in n.outputs}


def _transposes(shape, perms) -> onyx.ir.Model:
    nodes = [
        helper.make_node("Transpose", ["x"], [f"t{i}"], perm=list(p)) for i, p in enumerate(perms)
    ]
    outs = [helper.make_tensor_value_info(f"t{i}", F, None) for i in range(len(perms))]
    return _model(nodes, [helper.make_tensor_value_info("x", F, shape)], outs)


@pytest.fixture
def empty_memo():
    memo.clear()
    yield memo.MEMO
    memo.clear()


def test_equal_nodes_share_one_entry_and_get_the_same_types(empty_memo):
    types = _types(_transposes([2, 3, 4], [(2, 0, 1), (2, 0, 1), (1, 0, 2)]))
    assert types == {"t0": (4, 2, 3), "t1": (4, 2, 3), "t2": (3, 2, 4)}
    assert len(empty_memo) == 2  # (the second Transpose by (2, 0, 1) was a hit)


def test_a_node_alike_but_for_its_input_shape_or_attributes_is_inferred_afresh(empty_memo):
    _types(_transposes([2, 3, 4], [(2, 0, 1)]))
    assert _types(_transposes([5, 6, 7], [(2, 0, 1)])) == {"t0": (7, 5, 6)}
    assert _types(_transposes(["N", 3, 4], [(2, 0, 1)])) == {"t0": (4, "N", 3)}
    assert _types(_transposes([2, 3, 4], [(0, 2, 1)])) == {"t0": (2, 4, 3)}


def test_equal_results_with_and_without_the_memo(empty_memo, monkeypatch):
    """A Reshape to a constant target (propagated data in the key) after a Shape chain."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Reshape", ["x", "target2"], ["r2"]),
        helper.make_node("Reshape", ["r2", "target"], ["r3"]),
    ]
    inits = [
        helper.make_tensor("target", TensorProto.INT64, [2], np.array([6, -1])),
        helper.make_tensor("target2", TensorProto.INT64, [2], np.array([-1, 6])),
    ]
    x = helper.make_tensor_value_info("x", F, [3, 4])
    outs = [helper.make_tensor_value_info(n, F, None) for n in ("r", "r2", "r3")]

    def build():
        return _model(nodes, [x], outs, inits)

    first, again = _types(build()), _types(build())  # (the second all hits)
    assert first == again
    assert first["r"] == (6, 2) and first["r2"] == (2, 6) and first["r3"] == (6, 2)
    monkeypatch.setattr(memo, "find", lambda *a: (None, None))
    assert _types(build()) == first


def test_fresh_dims_are_never_remembered(empty_memo):
    """NonZero's count is unknown: each node names its own dim, hit or not."""
    nodes = [helper.make_node("NonZero", ["x"], [f"z{i}"]) for i in range(2)]
    outs = [helper.make_tensor_value_info(f"z{i}", TensorProto.INT64, None) for i in range(2)]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [3, 4])], outs)
    infer_shapes(m)
    dims = [v.type.shape.dims for n in m.graph for v in n.outputs]
    assert dims[0][0] == dims[1][0] == 2
    assert dims[0][1] != dims[1][1]


def test_the_memo_starts_afresh_when_full(empty_memo, monkeypatch):
    monkeypatch.setattr(memo, "MAX_ENTRIES", 2)
    types = _types(_transposes([2, 3, 4], [(2, 0, 1), (1, 0, 2), (0, 2, 1)]))
    assert types["t2"] == (2, 4, 3)
    assert len(empty_memo) == 1  # (cleared at the third)


def test_a_rule_that_names_a_fresh_dim_is_not_remembered(empty_memo, monkeypatch):
    """(The rules leave unknown dims None, named at the end; a rule naming one itself would
    make two nodes share it, were it remembered.)"""

    def fresh_rows(ctx):
        ctx.set(0, ctx.dtype(0), (ctx.fresh(), *ctx.shape(0)[1:]))

    monkeypatch.setitem(engine.RULES, ("", "Abs"), fresh_rows)
    nodes = [helper.make_node("Abs", ["x"], [f"a{i}"]) for i in range(2)]
    outs = [helper.make_tensor_value_info(f"a{i}", F, None) for i in range(2)]
    types = _types(_model(nodes, [helper.make_tensor_value_info("x", F, [3, 4])], outs))
    assert types["a0"][0] != types["a1"][0] and types["a0"][1] == 4
    assert not empty_memo


def test_constants_are_told_apart_by_their_values(empty_memo, monkeypatch):
    monkeypatch.setattr(engine, "CHEAP_RULES", set())  # (a Constant through the memo, keyed)

    def reshaped(*targets):
        nodes = []
        for i, t in enumerate(targets):
            value = helper.make_tensor(f"v{i}", TensorProto.INT64, [2], np.array(t))
            nodes.append(helper.make_node("Constant", [], [f"t{i}"], value=value))
            nodes.append(helper.make_node("Reshape", ["x", f"t{i}"], [f"r{i}"]))
        outs = [helper.make_tensor_value_info(f"r{i}", F, None) for i in range(len(targets))]
        types = _types(_model(nodes, [helper.make_tensor_value_info("x", F, [3, 4])], outs))
        return [types[f"r{i}"] for i in range(len(targets))]

    assert reshaped([6, -1], [-1, 6], [6, -1]) == [(6, 2), (2, 6), (6, 2)]
    assert reshaped([-1, 6]) == [(2, 6)]


def _propagated(model) -> dict[str, object]:
    """Output name -> the data inference propagated to it."""
    e = engine.Engine(model, strict=False, data_prop=True)
    env = e.new_env()
    e.seed(model.graph, env)
    e.infer_graph(model.graph, env, model.opset_imports)
    return {v.name: env["data"].get(id(v)) for n in model.graph for v in n.outputs}


@pytest.mark.parametrize("attr", ["value_float", "value_floats"])
def test_float_attributes_are_told_apart_by_the_sign_of_zero(empty_memo, attr, monkeypatch):
    """0.0 == -0.0 in Python: a key holding the floats themselves took one Constant for the
    other, and the second got the first's data."""
    monkeypatch.setattr(engine, "CHEAP_RULES", set())  # (a Constant through the memo, keyed)

    def constants(*zeros):
        nodes = [
            helper.make_node(
                "Constant", [], [f"c{i}"], **{attr: z if attr == "value_float" else [z]}
            )
            for i, z in enumerate(zeros)
        ]
        outs = [helper.make_tensor_value_info(f"c{i}", F, None) for i in range(len(zeros))]
        return _model(nodes, [], outs)

    data = _propagated(constants(-0.0, 0.0))
    assert [bool(np.signbit(data[c]).all()) for c in ("c0", "c1")] == [True, False]


def test_an_attribute_of_an_unhashable_value_is_inferred_without_the_memo(empty_memo):
    """(An attribute built through the API may hold any value: it has no key, and the rule
    runs as without the memo.)"""
    from onyx.ir import Attr, AttrType

    m = _transposes([2, 3, 4], [(2, 0, 1)])
    node = m.graph.nodes[0]
    node.attributes["junk"] = Attr("junk", AttrType.INT, np.array([1]))
    assert _types(m) == {"t0": (4, 2, 3)}
    assert not empty_memo


def test_a_types_key_is_read_once_and_is_the_key_of_its_fields(empty_memo):
    """Key parts of input types are kept per type object (the types a memo hit hands out
    come back at every creation): the kept part is the one the type's fields make, a type
    of other fields gets its own, and a model inferred with the kept parts matches one
    inferred without."""
    model = _transposes(["N", 3, 5], [(0, 2, 1), (2, 1, 0), (0, 2, 1)])
    memo.TYPE_KEYS.clear()
    first = _types(model)
    assert memo.TYPE_KEYS, "the input types' keys are kept"
    for t, n in memo.TYPE_KEYS.values():
        shape = t.shape
        dims = None if shape is None else (shape.dims, shape.denotations)
        assert memo.TYPE_IDS[(int(t.elem_type), dims, t.denotation)] == n
    other = onyx.ir.TensorType(onyx.ir.DataType.FLOAT, ("N", 5, 3))
    assert memo.type_id(other) != memo.type_id(onyx.ir.TensorType(1, ("N", 3, 5)))
    assert memo.type_id(onyx.ir.TensorType(1, ("N", 5, 3))) == memo.type_id(other)
    memo.clear()
    memo.TYPE_KEYS.clear()
    assert _types(_transposes(["N", 3, 5], [(0, 2, 1), (2, 1, 0), (0, 2, 1)])) == first


def test_initializers_of_one_type_share_one_type_object():
    """Inference seeds an initializer's type from a table of immutable TensorTypes (a model
    repeats a few, and a shared type's memo key is read once): equal to a fresh one."""
    w = helper.make_tensor("w", F, [2, 3], np.zeros(6, np.float32))
    v = helper.make_tensor("v", F, [2, 3], np.ones(6, np.float32))
    nodes = [helper.make_node("Add", ["w", "v"], ["y"])]
    out = [helper.make_tensor_value_info("y", F, None)]
    model = _model(nodes, [], out, [w, v])
    eng = engine.Engine(model, False, True)
    env = eng.new_env()
    eng.seed(model.graph, env)
    tw, tv = (env["types"][id(model.graph.initializers[n])] for n in ("w", "v"))
    assert tw is tv and tw == onyx.ir.TensorType(onyx.ir.DataType.FLOAT, (2, 3))


def _held_bytes(entries) -> int:
    """The bytes of strings and data the memo's keys and values hold (the test's own count)."""

    def size(x) -> int:
        if isinstance(x, (str, bytes)):
            return len(x)
        if isinstance(x, np.ndarray):
            return x.nbytes
        if isinstance(x, (tuple, list)):
            return sum(map(size, x))
        if isinstance(x, dict):
            return sum(map(size, x.values()))
        return 0

    return sum(size(k) + size(v[:2]) for k, v in entries.items())


def test_the_memo_is_bounded_by_bytes_not_only_entries(empty_memo, monkeypatch):
    """A count of entries let one entry hold a megabyte string attribute (or a large
    propagated constant) and the memo gigabytes: entries past MAX_ENTRY_BYTES are not kept
    and the entries together stay within MAX_BYTES."""
    monkeypatch.setattr(engine, "CHEAP_RULES", set())  # (Relu through the memo)
    big = 1 << 20
    nodes = [
        helper.make_node("Relu", ["x"], [f"r{i}"], note=f"{i:08d}" + "x" * big) for i in range(40)
    ]
    outs = [helper.make_tensor_value_info(f"r{i}", F, None) for i in range(40)]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [2, 3])], outs)
    assert all(dims == (2, 3) for dims in _types(model).values())
    assert _held_bytes(empty_memo) <= memo.MAX_BYTES
    assert not empty_memo  # (each entry alone over MAX_ENTRY_BYTES)


def test_the_memo_starts_afresh_when_its_bytes_are_spent(empty_memo, monkeypatch):
    """Constants of 4096 int64 values (32 KB, under the per-entry bound) added to x: each
    Add's entry holds its constant; past MAX_BYTES the memo starts afresh."""
    monkeypatch.setattr(memo, "MAX_BYTES", 200_000)
    from onnx import numpy_helper

    n = 20
    inits = [numpy_helper.from_array(np.full(4096, i, np.int64), f"c{i}") for i in range(n)]
    nodes = [helper.make_node("Add", ["x", f"c{i}"], [f"a{i}"]) for i in range(n)]
    outs = [helper.make_tensor_value_info(f"a{i}", TensorProto.INT64, None) for i in range(n)]
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [4096])
    model = _model(nodes, [x], outs, inits)
    assert all(dims == (4096,) for dims in _types(model).values())
    assert 0 < len(empty_memo) < n
    assert _held_bytes(empty_memo) <= 200_000


def _convs(weights) -> onyx.ir.Model:
    """Convs of x by constant weights (small enough for inference to propagate their data)."""
    from onnx import numpy_helper

    inits = [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)]
    nodes = [helper.make_node("Conv", ["x", f"w{i}"], [f"y{i}"]) for i in range(len(weights))]
    outs = [helper.make_tensor_value_info(f"y{i}", F, None) for i in range(len(weights))]
    x = helper.make_tensor_value_info("x", F, [1, 3, 8, 8])
    return _model(nodes, [x], outs, inits)


def test_a_rule_that_reads_no_data_is_remembered_whatever_the_data(empty_memo):
    """Conv's rule reads its weights' shape, not their values: convs alike but for their
    weights' values share one entry (they had one each: the weights' bytes were in the key)."""
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((4, 3, 3, 3)).astype(np.float32) for _ in range(3)]
    types = _types(_convs(weights))
    assert types == {f"y{i}": (1, 4, 6, 6) for i in range(3)}
    assert len(empty_memo) == 1
    (key,) = empty_memo
    assert key[0] == memo.WITHOUT_DATA  # (kept under the key without the inputs' data)


def test_a_rule_that_reads_data_is_keyed_by_it(empty_memo, monkeypatch):
    """Whether a rule read its inputs' data is what it did, not what its op is: a rule that
    asks (and finds none, or some) is kept under the key with the data, so a node with other
    data runs it again."""
    seen = []

    def reads(ctx):
        seen.append(ctx.value(1))
        ctx.same(0, 0)

    monkeypatch.setitem(engine.RULES, ("", "Conv"), reads)
    weights = [np.full((4, 3, 3, 3), v, np.float32) for v in (1.0, 2.0, 1.0)]
    _types(_convs(weights))
    assert len(seen) == 2  # (the third conv's weights are the first's: a hit)
    assert len(empty_memo) == 2 and all(k[0] != memo.WITHOUT_DATA for k in empty_memo)


def test_no_key_with_data_is_made_for_an_op_never_kept_with_data(empty_memo, monkeypatch):
    """A cold process's creation finds nothing in the memo: a node of an op whose entries were
    all kept without data (a conv) makes no key of its weights' bytes to look for one."""
    made = []
    with_data = vars(memo)["_with_data"]
    monkeypatch.setattr(memo, "_with_data", lambda *a: made.append(a) or with_data(*a))
    rng = np.random.default_rng(1)
    _types(_convs([rng.standard_normal((4, 3, 3, 3)).astype(np.float32) for _ in range(2)]))
    assert made == [] and len(empty_memo) == 1


def _op_of(key: tuple) -> str:
    """The op type of a memo key (without the inputs' data, or with them)."""
    op = key[1] if key[0] == memo.WITHOUT_DATA else key[0]
    (name,) = [k[1] for k, (n, _, _) in memo.OP_IDS.items() if n == op]
    return name


def _cheap_chain() -> onyx.ir.Model:
    """Constant -> Reshape target, x -> Relu -> Sqrt -> Reshape: rules cheaper than a key."""
    value = helper.make_tensor("v", TensorProto.INT64, [2], np.array([6, -1]))
    nodes = [
        helper.make_node("Constant", [], ["t"], value=value),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Sqrt", ["r"], ["s"]),
        helper.make_node("Reshape", ["s", "t"], ["y"]),
    ]
    outs = [helper.make_tensor_value_info("t", TensorProto.INT64, None)]
    outs += [helper.make_tensor_value_info(n, F, None) for n in ("r", "s", "y")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 4, 3])], outs)


def test_rules_cheaper_than_their_key_skip_the_memo_and_give_the_same_types(
    empty_memo, monkeypatch
):
    """A Constant's key held its value's bytes, a Relu's cost more than its rule: their nodes
    are inferred by their rule (no entry), and every type is what the memo gave them."""
    types = _types(_cheap_chain())
    assert types == {"t": (2,), "r": ("N", 4, 3), "s": ("N", 4, 3), "y": (6, "2*N")}
    assert {_op_of(k) for k in empty_memo} == {"Reshape"}  # (one entry: the Reshape's)
    assert _types(_cheap_chain()) == types  # (the Reshape a hit)
    memo.clear()
    monkeypatch.setattr(engine, "CHEAP_RULES", set())  # every node through the memo
    assert _types(_cheap_chain()) == types and _types(_cheap_chain()) == types
    assert {_op_of(k) for k in empty_memo} == {"Constant", "Relu", "Sqrt", "Reshape"}


def test_a_hit_makes_no_context_and_hands_out_copies_of_its_data(empty_memo, monkeypatch):
    """A hit records the entry's types and data without a NodeContext (a rule's view, made
    for nothing) nor copies of its dicts; the data it records are copies: a later change to
    them leaves the entry as it was."""

    def build():
        nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Relu", ["x"], ["r"])]
        outs = [helper.make_tensor_value_info(n, F, None) for n in ("s", "r")]
        return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 4])], outs)

    assert _propagated(build())["s"].dims == ["N", 4]  # (the Shape's entry made)
    made = []
    context = engine.NodeContext
    monkeypatch.setattr(engine, "NodeContext", lambda *a: made.append(a[1].op_type) or context(*a))
    data = _propagated(build())
    assert made == ["Relu"]  # (the Shape a hit: no context)
    data["s"].dims.append("changed")
    assert _propagated(build())["s"].dims == ["N", 4]


def test_a_keys_op_and_input_types_are_interned_ints(empty_memo):
    """A key names its op and its inputs' types by small ints (memo.op_id, type_id), hashed
    and compared at once: nested tuples of dims were hashed at every node, and compared item
    by item at every hit. Types of the same fields share an id (a hit across creations)."""
    model = _transposes(["N", 3, 5], [(0, 2, 1), (2, 1, 0), (0, 2, 1)])
    first = _types(model)
    assert empty_memo
    for key in empty_memo:
        blind = key[0] == memo.WITHOUT_DATA
        op, types = (key[1], key[3]) if blind else (key[0], [e and e[0] for e in key[2]])
        assert type(op) is int and all(t is None or type(t) is int for t in types)
    entries = dict(empty_memo)
    assert _types(_transposes(["N", 3, 5], [(0, 2, 1), (2, 1, 0), (0, 2, 1)])) == first
    assert empty_memo == entries  # (the second model's nodes all hits)


def test_a_node_kept_without_data_makes_no_key_with_data_for_a_hit(empty_memo, monkeypatch):
    """An op some of whose nodes' rules read data (here: a conv of pads [1,1,1,1]) has
    entries with data, but a node whose entry is kept without it (the other convs) is a hit
    on the key without the data: the key with the weights' bytes is not made for it."""

    def reads_when_padded(ctx):
        if ctx.attr("pads"):
            ctx.value(1)
        ctx.same(0, 0)

    monkeypatch.setitem(engine.RULES, ("", "Conv"), reads_when_padded)
    rng = np.random.default_rng(2)
    weights = [rng.standard_normal((4, 3, 3, 3)).astype(np.float32) for _ in range(2)]

    def model():
        m = _convs(weights)
        next(iter(m.graph)).attributes["pads"] = onyx.ir.Attr(
            "pads", onyx.ir.AttrType.INTS, [1] * 4
        )
        return m

    first = _types(model())
    assert len(empty_memo) == 2  # (the padded conv's entry with data, the other's without)
    made = []
    with_data = vars(memo)["_with_data"]
    monkeypatch.setattr(memo, "_with_data", lambda *a: made.append(a) or with_data(*a))
    assert _types(model()) == first
    assert len(made) == 1 and len(empty_memo) == 2  # (the padded conv's key only)
