"""The checker: accepts the onnx test models, rejects a corpus of mutated models.

The corpus is made here: a valid base model, and one mutation per rule that breaks exactly that
rule. onnx.checker.check_model(full_check=True) is the oracle: it must reject every mutant,
and onyx must reject it too, naming the rule.
"""

from __future__ import annotations

import copy
import os
import types as _types
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
from onyx import ir
from onyx.checker import problems
from onyx.errors import OnyxError, ValidationError
from onyx.ir import Attr, AttrType

# -- onnx proto -> ir (until onyx.serde reads every model; also keeps broken models readable) ---


def _dim(d):
    return d.dim_value if d.HasField("dim_value") else (d.dim_param or None)


def conv_type(tp: onnx.TypeProto):
    which = tp.WhichOneof("value")
    den = tp.denotation or None
    if which in ("tensor_type", "sparse_tensor_type"):
        tt = getattr(tp, which)
        shape = tuple(_dim(d) for d in tt.shape.dim) if tt.HasField("shape") else None
        cls = ir.TensorType if which == "tensor_type" else ir.SparseTensorType
        return cls(tt.elem_type, shape, denotation=den)
    if which in ("sequence_type", "optional_type"):
        e = getattr(tp, which).elem_type
        cls = ir.SequenceType if which == "sequence_type" else ir.OptionalType
        return cls(conv_type(e) if e.WhichOneof("value") else None, denotation=den)
    if which == "map_type":
        return ir.MapType(tp.map_type.key_type, conv_type(tp.map_type.value_type), denotation=den)
    if which == "opaque_type":
        return ir.OpaqueType(tp.opaque_type.domain, tp.opaque_type.name)
    return None


def conv_tensor(t: onnx.TensorProto) -> ir.Tensor:
    if t.data_location == TensorProto.EXTERNAL:
        out = ir.Tensor(name=t.name, dtype=t.data_type)
        out.shape = tuple(t.dims)
        out.external = {e.key: e.value for e in t.external_data}
        return out
    if t.data_type == 0:
        out = ir.Tensor(name=t.name, dtype=0)
        out.shape = tuple(t.dims)
        return out
    if t.HasField("raw_data") and t.data_type != TensorProto.STRING:
        return ir.Tensor.from_raw(t.raw_data, t.data_type, tuple(t.dims), name=t.name)
    try:
        return ir.Tensor(numpy_helper.to_array(t), name=t.name, dtype=t.data_type)
    except Exception:  # typed data that does not fit the dims: keep it visibly inconsistent
        return ir.Tensor.from_raw(b"", t.data_type, tuple(t.dims), name=t.name)


def conv_sparse(sp: onnx.SparseTensorProto):
    return _types.SimpleNamespace(
        values=conv_tensor(sp.values),
        indices=conv_tensor(sp.indices) if sp.HasField("indices") else None,
        dims=tuple(sp.dims),
        name=sp.values.name,
    )


def conv_attr(a: onnx.AttributeProto, scope) -> Attr:
    T = onnx.AttributeProto
    if a.ref_attr_name:
        return Attr(a.name, AttrType(a.type), None, ref_attr_name=a.ref_attr_name)
    get = {
        T.FLOAT: lambda: a.f,
        T.INT: lambda: a.i,
        T.STRING: lambda: a.s.decode("utf-8", "replace"),
        T.TENSOR: lambda: conv_tensor(a.t),
        T.GRAPH: lambda: conv_graph(a.g, scope),
        T.SPARSE_TENSOR: lambda: conv_sparse(a.sparse_tensor),
        T.TYPE_PROTO: lambda: conv_type(a.tp),
        T.FLOATS: lambda: list(a.floats),
        T.INTS: lambda: list(a.ints),
        T.STRINGS: lambda: [s.decode("utf-8", "replace") for s in a.strings],
        T.TENSORS: lambda: [conv_tensor(x) for x in a.tensors],
        T.GRAPHS: lambda: [conv_graph(g, scope) for g in a.graphs],
        T.SPARSE_TENSORS: lambda: [conv_sparse(x) for x in a.sparse_tensors],
        T.TYPE_PROTOS: lambda: [conv_type(x) for x in a.type_protos],
    }.get(a.type, lambda: None)
    return Attr(a.name, AttrType(a.type), get())


def conv_graph(g: onnx.GraphProto, outer: dict | None = None) -> ir.Graph:
    outer = outer or {}
    typed = {v.name: v for v in list(g.value_info) + list(g.output) if v.HasField("type")}
    local: dict[str, ir.Value] = {}
    graph = ir.Graph(name=g.name)
    for v in g.input:
        local[v.name] = ir.Value(v.name, conv_type(v.type) if v.HasField("type") else None)
        graph.inputs.append(local[v.name])
    for t in g.initializer:
        if t.name not in local:
            local[t.name] = ir.Value(t.name, ir.TensorType(t.data_type, tuple(t.dims)))
        local[t.name].const_value = conv_tensor(t)
        graph.initializers[t.name] = local[t.name]
    graph.sparse_initializers = [conv_sparse(s) for s in g.sparse_initializer]
    # output Values first, so that forward references (order violations) resolve
    produced: dict[str, ir.Value] = {}
    all_outs = []
    for n in g.node:
        outs = [ir.Value(o, conv_type(typed[o].type) if o in typed else None) for o in n.output]
        for v in outs:
            if v.name:
                produced.setdefault(v.name, v)
        all_outs.append(outs)
    scope = {**outer, **produced, **local}
    for n, outs in zip(g.node, all_outs):
        ins = [scope.setdefault(i, ir.Value(i)) if i else None for i in n.input]
        attrs = [conv_attr(a, scope) for a in n.attribute]
        graph.append(ir.Node(n.op_type, ins, outs, attrs, domain=n.domain, name=n.name))
    for v in g.output:
        val = scope.get(v.name) or ir.Value(v.name)
        if v.HasField("type"):
            val.type = conv_type(v.type)
        graph.outputs.append(val)
    for v in g.value_info:
        val = scope.get(v.name) or ir.Value(v.name)
        if val.type is None and v.HasField("type"):
            val.type = conv_type(v.type)
        graph.value_info.append(val)
    return graph


def from_onnx(m: onnx.ModelProto, base_dir: str | None = None) -> ir.Model:
    funcs = []
    for f in m.functions:
        g = helper.make_graph(
            f.node,
            f.name,
            [onnx.ValueInfoProto(name=n) for n in f.input],
            [onnx.ValueInfoProto(name=n) for n in f.output],
        )
        funcs.append(
            ir.Function(
                f.domain,
                f.name,
                conv_graph(g),
                list(f.attribute),
                [conv_attr(a, {}) for a in f.attribute_proto],
                {o.domain: o.version for o in f.opset_import},
            )
        )
    model = ir.Model(conv_graph(m.graph), None, m.ir_version, m.producer_name, "", funcs)
    model.opset_imports = {o.domain: o.version for o in m.opset_import}
    model.base_dir = base_dir
    model.metadata_props = {p.key: p.value for p in m.metadata_props}
    return model


def onyx_model(m: onnx.ModelProto) -> ir.Model:
    """Read with onyx.serde when it is there (an OnyxError from it is a rejection)."""
    try:
        from onyx.serde import loads
    except ImportError:
        return from_onnx(m)
    return loads(m.SerializeToString())


# -- the corpus ---------------------------------------------------------------------------------


def base_model() -> onnx.ModelProto:
    """Conv -> Relu -> If(subgraphs reading an outer value) -> local function -> Cast."""
    f32 = TensorProto.FLOAT
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "W")
    b = numpy_helper.from_array(np.zeros(4, np.float32), "B")
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["r"], ["t_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", f32, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["r"], ["e_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", f32, None)],
    )
    nodes = [
        helper.make_node("Conv", ["X", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("If", ["C"], ["i"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Double", ["i"], ["d"], name="call", domain="custom"),
        helper.make_node("Cast", ["d"], ["Y"], name="cast", to=TensorProto.DOUBLE),
    ]
    graph = helper.make_graph(
        nodes,
        "main",
        [
            helper.make_tensor_value_info("X", f32, ["N", 3, 8, 8]),
            helper.make_tensor_value_info("C", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, ["N", 4, 8, 8])],
        [w, b],
    )
    func = helper.make_function(
        "custom",
        "Double",
        ["x"],
        ["y"],
        [helper.make_node("Add", ["x", "x"], ["y"])],
        [helper.make_opsetid("", 17)],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
        ir_version=8,
        functions=[func],
    )


def _node(m, name):
    return next(n for n in m.graph.node if n.name == name)


def _sparse_bad(m):
    m.graph.sparse_initializer.append(
        helper.make_sparse_tensor(
            numpy_helper.from_array(np.ones(2, np.float32), "S"),
            numpy_helper.from_array(np.array([1, 99], np.int64)),
            [4],
        )
    )


def _set(obj, **kw):
    for k, v in kw.items():
        setattr(obj, k, v)


def _swap_first_nodes(m):
    nodes = list(m.graph.node)
    nodes[0], nodes[1] = nodes[1], nodes[0]
    del m.graph.node[:]
    m.graph.node.extend(nodes)


def _bad_attr_type(m):
    conv = _node(m, "conv")
    attr = next(a for a in conv.attribute if a.name == "pads")
    conv.attribute.remove(attr)
    conv.attribute.append(helper.make_attribute("pads", 1))


def _int_input(m):
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.INT32


def _short_raw(m):
    m.graph.initializer[1].raw_data = b"\x00" * 8  # 2 floats for dims [4]


def _drop_required_attr(m):
    del _node(m, "cast").attribute[:]


def _ref_attr_in_graph(m):
    a = onnx.AttributeProto(name="alpha", type=onnx.AttributeProto.FLOAT, ref_attr_name="a")
    _node(m, "relu").op_type = "LeakyRelu"
    _node(m, "relu").attribute.append(a)


def _external_outside(m):
    t = m.graph.initializer[1]
    t.ClearField("raw_data")
    del t.float_data[:]
    t.data_location = TensorProto.EXTERNAL
    t.external_data.append(onnx.StringStringEntryProto(key="location", value="../outside.bin"))


def _func_undefined(m):
    m.functions[0].node[0].input[1] = "nowhere"


def _float8_old_ir(m):
    m.graph.initializer.append(
        helper.make_tensor("F8", TensorProto.FLOAT8E4M3FN, [1], [1.0]),
    )


MUTATIONS = {
    # name: (expected onyx rule, mutation)
    "ir_version_unset": ("ir-version", lambda m: _set(m, ir_version=0)),
    "ir_version_too_new": ("ir-version", lambda m: _set(m, ir_version=99)),
    "no_opset_import": ("opset-import", lambda m: m.ClearField("opset_import")),
    "opset_too_new": ("opset-import", lambda m: _set(m.opset_import[0], version=999)),
    "graph_unnamed": ("graph-name", lambda m: _set(m.graph, name="")),
    "ssa_duplicate_output": ("ssa", lambda m: _node(m, "relu").output.__setitem__(0, "c")),
    "ssa_output_is_input": ("ssa", lambda m: _node(m, "relu").output.__setitem__(0, "X")),
    "duplicate_graph_input": (
        "ssa",
        lambda m: m.graph.input.append(copy.deepcopy(m.graph.input[0])),
    ),
    "topological_order": ("topological-order", _swap_first_nodes),
    "undefined_input": ("undefined-input", lambda m: _node(m, "relu").input.__setitem__(0, "zz")),
    "undefined_outer_in_subgraph": (
        "undefined-input",
        lambda m: _node(m, "if").attribute[0].g.node[0].input.__setitem__(0, "nope"),
    ),
    "graph_output_not_produced": ("graph-output", lambda m: _set(m.graph.output[0], name="ghost")),
    "too_many_inputs": ("input-count", lambda m: _node(m, "conv").input.append("B")),
    "too_many_outputs": ("output-count", lambda m: _node(m, "relu").output.append("r2")),
    "unknown_attribute": (
        "attribute-name",
        lambda m: _node(m, "relu").attribute.append(helper.make_attribute("alpha", 1.0)),
    ),
    "attribute_wrong_type": ("attribute-type", _bad_attr_type),
    "required_attribute_missing": ("attribute-required", _drop_required_attr),
    "type_constraint": ("type-constraint", _int_input),
    "initializer_size": ("tensor-data-size", _short_raw),
    "sparse_index_out_of_range": ("sparse-tensor", _sparse_bad),
    "unknown_op": ("unknown-op", lambda m: _set(_node(m, "relu"), op_type="Relux")),
    "deprecated_op": ("deprecated-op", lambda m: _set(_node(m, "relu"), op_type="Upsample")),
    "graph_input_without_type": ("value-type", lambda m: m.graph.input[0].ClearField("type")),
    "empty_op_type": ("node", lambda m: _set(_node(m, "relu"), op_type="")),
    "ref_attr_outside_function": ("attribute-ref", _ref_attr_in_graph),
    "domain_not_imported": ("opset-import", lambda m: m.opset_import.pop()),
    "initializer_without_type": (
        "tensor-type",
        lambda m: _set(m.graph.initializer[0], data_type=0),
    ),
    "external_data_outside_folder": ("external-data", _external_outside),
    "function_body_undefined_input": ("undefined-input", _func_undefined),
    "ir_feature_float8": ("ir-version-feature", _float8_old_ir),
    "ir_feature_functions": ("ir-version-feature", lambda m: _set(m, ir_version=7)),
    "missing_required_input": (
        "missing-input",
        lambda m: _node(m, "conv").input.__setitem__(1, ""),
    ),
}


# Rules of the issue where onyx is stricter than onnx.checker (onnx accepts these mutants).
STRICTER = {
    "ir_feature_float8",
    "ir_feature_functions",
    "opset_too_new",
    "ref_attr_outside_function",
}


def mutant(name: str) -> onnx.ModelProto:
    m = base_model()
    MUTATIONS[name][1](m)
    return m


def test_base_model_is_valid():
    m = base_model()
    onnx.checker.check_model(m, full_check=True)
    onyx.check(onyx_model(m))


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutant_rejected(name):
    m = mutant(name)
    if name not in STRICTER:
        with pytest.raises(Exception):  # the oracle rejects it  # noqa: B017
            onnx.checker.check_model(m, full_check=True)
    try:
        found = problems(onyx_model(m), full=True)
    except OnyxError:
        return  # unreadable is a rejection too
    assert found, f"onyx accepted the mutant {name}"
    assert MUTATIONS[name][0] in {p.rule for p in found}, [str(p) for p in found]


def test_removed_attribute_value_found_on_every_node():
    """Nodes alike to the schema rules are checked once; a removed attribute value (which the
    rules' key leaves out) must still be found on each node that has it."""
    x = ir.Value("x", ir.TensorType(ir.DataType.FLOAT, (1, 1, 2, 2)))
    scales = ir.Value(
        "s", ir.TensorType(ir.DataType.FLOAT, (4,)), ir.Tensor(np.ones(4, np.float32))
    )
    scales.const_value.name = "s"
    modes = ["half_pixel", "tf_half_pixel_for_nn", "tf_half_pixel_for_nn"]
    nodes = [
        ir.Node(
            "Resize",
            [x, None, scales],
            [f"y{i}"],
            {"coordinate_transformation_mode": mode},
            name=f"r{i}",
        )
        for i, mode in enumerate(modes)
    ]
    for n in nodes:
        n.outputs[0].type = ir.TensorType(ir.DataType.FLOAT, (1, 1, 2, 2))
    graph = ir.Graph([x], [n.outputs[0] for n in nodes], nodes, [scales], name="g")
    found = problems(ir.Model(graph, opset_imports={"": 13}, ir_version=8))
    flagged = [p.node for p in found if p.rule == "removed-attribute-value"]
    assert flagged == ["'r1' (Resize)", "'r2' (Resize)"], [str(p) for p in found]


def test_every_problem_listed():
    m = base_model()
    _node(m, "relu").input[0] = "zz"
    _node(m, "cast").attribute.pop()
    m.graph.name = ""
    with pytest.raises(ValidationError) as info:
        onyx.check(onyx_model(m))
    rules = {p.rule for p in info.value.problems}
    assert {"undefined-input", "attribute-required", "graph-name"} <= rules
    assert all(p.graph is not None for p in info.value.problems)
    text = str(info.value)
    assert "relu" in text and "cast" in text


def _suite(kinds=("node", "simple", "real", "pytorch-converted", "pytorch-operator")):
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in kinds:
            for case in load_model_tests(kind=kind):
                if case.model is not None:
                    yield case.name, case.model
                elif case.model_dir and os.path.exists(os.path.join(case.model_dir, "model.onnx")):
                    yield case.name, onnx.load(os.path.join(case.model_dir, "model.onnx"))


def test_accepts_onnx_test_models():
    rejected = {}
    count = 0
    for name, m in _suite():
        count += 1
        found = problems(onyx_model(m), full=True)
        if found:
            rejected[name] = [str(p) for p in found[:3]]
    assert count > 1000
    assert not rejected, rejected


def test_accepts_sklearn_export():
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x = np.random.default_rng(0).normal(size=(30, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    pipe = make_pipeline(StandardScaler(), LogisticRegression()).fit(x, y)
    m = skl2onnx.to_onnx(pipe, x[:1], options={"zipmap": True})
    onnx.checker.check_model(m, full_check=True)
    onyx.check(onyx_model(m), full=True)


def test_check_path_and_bytes(tmp_path):
    pytest.importorskip("onyx.serde")
    if not hasattr(onyx.serde, "loads"):
        pytest.skip("onyx.serde not ready")
    p = tmp_path / "m.onnx"
    onnx.save(base_model(), p)
    onyx.check(str(p))
    onyx.check(p.read_bytes())


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutant_rejected_by_checker_alone(name):
    """Read without serde's own validation: the checker itself names the broken rule."""
    found = problems(from_onnx(mutant(name)), full=True)
    assert MUTATIONS[name][0] in {p.rule for p in found}, [str(p) for p in found]


# -- the command line ---------------------------------------------------------------------------


def test_cli_check_and_inspect(tmp_path, capsys):
    from onyx.tools.cli import main

    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    onnx.save(base_model(), good)
    m = base_model()
    _node(m, "relu").input[0] = "zz"
    _node(m, "cast").attribute.pop()
    onnx.save(m, bad)
    assert main(["check", str(good)]) == 0
    assert main(["check", "--full", str(good)]) == 0
    capsys.readouterr()
    assert main(["check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "2 problem(s)" in out and "'zz'" in out and "'to'" in out
    assert main(["inspect", str(good)]) == 0
    out = capsys.readouterr().out
    for needle in ("IR version:  8", "ai.onnx 17", "X: tensor(float)[N,3,8,8]", "Conv", "112"):
        assert needle in out, needle


def test_external_data_checked_and_listed(tmp_path, capsys):
    from onyx.tools.cli import main

    m = base_model()
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "W"))
    path = tmp_path / "ext.onnx"
    onnx.save(m, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    onnx.checker.check_model(str(path), full_check=True)
    assert main(["check", str(path)]) == 0
    assert main(["inspect", str(path)]) == 0
    assert "weights.bin" in capsys.readouterr().out
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(Exception):  # noqa: B017
        onnx.checker.check_model(str(path), full_check=True)
    assert main(["check", str(path)]) == 1


def test_type_string_memo_is_bounded_where_it_grows(monkeypatch):
    """The checker's process-wide type-string memo starts afresh at its limit when an entry
    is added, not only when a checker starts: one check of a model with more distinct types
    than the limit (or a long-lived process's many checks) had grown it past the limit."""
    from onyx import checker

    monkeypatch.setattr(checker, "_TYPE_STRINGS_LIMIT", 8)
    monkeypatch.setattr(checker, "_TYPE_STRINGS", {})
    nodes = [helper.make_node("Relu", [f"x{i}"], [f"y{i}"]) for i in range(40)]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [i + 1]) for i in range(40)],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [i + 1]) for i in range(40)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onyx.check(onyx.loads(model.SerializeToString()))
    assert 0 < len(checker._TYPE_STRINGS) <= 8  # noqa: SLF001
