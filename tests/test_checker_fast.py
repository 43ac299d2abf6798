"""The checker's fast path (onyx/checker_fast.py) against the full checker, its oracle.

``certify`` may only say "valid" of a model the full checker finds nothing wrong with (and
reads without an error); when it cannot prove that, ``onyx.check`` runs the full checker,
whose report is the same as before. Checked on onnx's node suite, tests/models, a model made
to be certified broken one rule at a time, and seeded random mutants of all of them.
"""

from __future__ import annotations

import copy
import glob
import os
import random
import sys
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx
import onyx.checker
import onyx.checker_fast
from onyx.checker import problems
from onyx.errors import ValidationError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz"))
import harness  # noqa: E402

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")


def certify(data) -> bool:
    return onyx.checker_fast.certify(data, onyx.checker._Checker)  # noqa: SLF001


def full_verdict(data, monkeypatch):
    """The full checker's answer for ``data``: its problems, or the exception it raised."""
    with monkeypatch.context() as m:
        m.setattr(onyx.checker, "_certified", lambda *a: False)
        try:
            return problems(data)
        except Exception as e:  # (an unreadable model may raise: the fast path must not pass it)
            return e


def assert_sound(data: bytes, monkeypatch, what: str = "") -> bool:
    """certify(data) implies that the full checker accepts it; returns certify's answer."""
    proven = certify(data)
    if proven:
        verdict = full_verdict(data, monkeypatch)
        assert verdict == [], f"{what}: certified, but the full checker says {verdict}"
    return proven


# -- a model made for the fast path: every common feature, no subgraph or function --------------


def base_model() -> onnx.ModelProto:
    f32 = TensorProto.FLOAT
    inits = [
        numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "W"),
        numpy_helper.from_array(np.zeros(4, np.float32), "B"),
        helper.make_tensor("shape", TensorProto.INT64, [2], [0, -1]),  # a typed field
    ]
    nodes = [
        helper.make_node("Conv", ["X", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["s"], name="reshape"),
        helper.make_node("Cast", ["s"], ["Y"], name="cast", to=TensorProto.DOUBLE),
        helper.make_node("Dropout", ["r"], ["d", ""], name="dropout"),  # an omitted output
    ]
    graph = helper.make_graph(
        nodes,
        "main",
        [helper.make_tensor_value_info("X", f32, ["N", 3, 8, 8])],
        [
            helper.make_tensor_value_info("Y", TensorProto.DOUBLE, ["N", None]),
            helper.make_tensor_value_info("d", f32, ["N", 4, 8, 8]),
        ],
        inits,
        value_info=[
            helper.make_tensor_value_info("c", f32, ["N", 4, 8, 8]),
            helper.make_tensor_value_info("W", f32, [4, 3, 3, 3]),  # an initializer declared
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _node(m, name):
    return next(n for n in m.graph.node if n.name == name)


def _attr(node, name):
    return next(a for a in node.attribute if a.name == name)


def _set(obj, **kw):
    for k, v in kw.items():
        setattr(obj, k, v)


def _replace_attr(node, attr):
    keep = [a for a in node.attribute if a.name != attr.name]
    del node.attribute[:]
    node.attribute.extend(keep + [attr])


def _swap(m, i, j):
    nodes = list(m.graph.node)
    nodes[i], nodes[j] = nodes[j], nodes[i]
    del m.graph.node[:]
    m.graph.node.extend(nodes)


def _external(m):
    t = m.graph.initializer[1]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.append(onnx.StringStringEntryProto(key="location", value="../w.bin"))


def _sparse(m):
    m.graph.sparse_initializer.append(
        helper.make_sparse_tensor(
            numpy_helper.from_array(np.ones(2, np.float32), "S"),
            numpy_helper.from_array(np.array([1, 99], np.int64)),
            [4],
        )
    )


def _int32_initializer(m):
    t = numpy_helper.from_array(np.arange(6, dtype=np.int32).reshape(2, 3), "K")
    m.graph.initializer.append(t)


#: Mutations the full checker rejects: the fast path must not certify any of them.
BREAKING = {
    "undefined_input": lambda m: _node(m, "relu").input.__setitem__(0, "zz"),
    "input_defined_later": lambda m: _node(m, "relu").input.__setitem__(0, "s"),
    "order_swapped": lambda m: _swap(m, 0, 1),
    "output_defined_twice": lambda m: _node(m, "relu").output.__setitem__(0, "c"),
    "output_is_input": lambda m: _node(m, "relu").output.__setitem__(0, "X"),
    "output_is_initializer": lambda m: _node(m, "relu").output.__setitem__(0, "B"),
    "duplicate_graph_input": lambda m: m.graph.input.append(copy.deepcopy(m.graph.input[0])),
    "graph_unnamed": lambda m: _set(m.graph, name=""),
    "empty_op_type": lambda m: _set(_node(m, "relu"), op_type=""),
    "unknown_op": lambda m: _set(_node(m, "relu"), op_type="Relux"),
    "deprecated_op": lambda m: _set(_node(m, "relu"), op_type="Upsample"),
    "domain_not_imported": lambda m: _set(_node(m, "relu"), domain="custom.x"),
    "attribute_wrong_type": lambda m: _replace_attr(
        _node(m, "conv"), helper.make_attribute("pads", 1)
    ),
    "attribute_unknown": lambda m: _node(m, "relu").attribute.append(
        helper.make_attribute("alpha", 1.0)
    ),
    "attribute_required_missing": lambda m: _node(m, "cast").ClearField("attribute"),
    "attribute_ref_outside_function": lambda m: _node(m, "cast").attribute.append(
        onnx.AttributeProto(name="saturate", type=onnx.AttributeProto.INT, ref_attr_name="a")
    ),
    "attribute_bad_enum": lambda m: _node(m, "conv").attribute.append(
        helper.make_attribute("auto_pad", "SIDEWAYS")
    ),
    "attribute_bad_dtype": lambda m: _set(_attr(_node(m, "cast"), "to"), i=77),
    "attribute_out_of_range": lambda m: _node(m, "conv").attribute.append(
        helper.make_attribute("strides", [0, 1])
    ),
    "attribute_graph_empty_name": lambda m: _node(m, "cast").attribute.append(
        onnx.AttributeProto(type=onnx.AttributeProto.INT, i=1)
    ),
    "too_many_inputs": lambda m: _node(m, "conv").input.append("B"),
    "too_many_outputs": lambda m: _node(m, "relu").output.append("r2"),
    "required_input_omitted": lambda m: _node(m, "conv").input.__setitem__(1, ""),
    "no_inputs_or_outputs": lambda m: m.graph.node.append(helper.make_node("Relu", [], [])),
    "type_constraint": lambda m: _set(m.graph.input[0].type.tensor_type, elem_type=6),
    "type_mismatch": lambda m: _set(m.graph.value_info[0].type.tensor_type, elem_type=11),
    "initializer_short_raw": lambda m: _set(m.graph.initializer[1], raw_data=b"\0" * 8),
    "initializer_no_type": lambda m: _set(m.graph.initializer[0], data_type=0),
    "initializer_unknown_type": lambda m: _set(m.graph.initializer[1], data_type=99),
    "initializer_negative_dims": lambda m: m.graph.initializer[1].dims.__setitem__(0, -4),
    "initializer_typed_short": lambda m: m.graph.initializer[2].int64_data.pop(),
    "initializer_float8_old_ir": lambda m: m.graph.initializer.append(
        helper.make_tensor("F8", TensorProto.FLOAT8E4M3FN, [1], [1.0])
    ),
    "initializer_external_missing": _external,
    "sparse_initializer": _sparse,
    "initializer_not_input_ir3": lambda m: _set(m, ir_version=3),
    "ir_version_unset": lambda m: _set(m, ir_version=0),
    "ir_version_too_new": lambda m: _set(m, ir_version=99),
    "no_opset_import": lambda m: m.ClearField("opset_import"),
    "opset_too_new": lambda m: _set(m.opset_import[0], version=999),
    "graph_output_not_produced": lambda m: _set(m.graph.output[0], name="ghost"),
    "graph_output_empty_name": lambda m: _set(m.graph.output[0], name=""),
    "graph_output_without_type": lambda m: m.graph.output[0].ClearField("type"),
    "graph_input_without_type": lambda m: m.graph.input[0].ClearField("type"),
    "graph_input_no_elem_type": lambda m: _set(m.graph.input[0].type.tensor_type, elem_type=0),
    "value_info_without_type": lambda m: m.graph.value_info[0].ClearField("type"),
    "value_info_empty_name": lambda m: _set(m.graph.value_info[0], name=""),
    "value_info_negative_dim": lambda m: _set(
        m.graph.value_info[0].type.tensor_type.shape.dim[1], dim_value=-2
    ),
    "value_info_huge_dim": lambda m: _set(
        m.graph.value_info[0].type.tensor_type.shape.dim[1], dim_value=2**62 + 1
    ),
    "value_info_optional_old_ir": lambda m: (
        _set(m, ir_version=7),
        m.graph.value_info.append(
            helper.make_value_info(
                "r", helper.make_optional_type_proto(helper.make_tensor_type_proto(1, None))
            )
        ),
    ),
    "resize_removed_mode": lambda m: (
        _set(_node(m, "relu"), op_type="Resize"),
        _node(m, "relu").attribute.append(
            helper.make_attribute("coordinate_transformation_mode", "tf_half_pixel_for_nn")
        ),
    ),
}

#: Mutations that keep the model valid, which the fast path should still prove valid.
KEEPING = {
    "doc_strings": lambda m: (
        _set(m, doc_string="model"),
        _set(m.graph, doc_string="graph"),
        _set(_node(m, "relu"), doc_string="node"),
        _set(m.graph.initializer[0], doc_string="tensor"),
    ),
    "metadata": lambda m: helper.set_model_props(m, {"author": "me"}),
    "unnamed_nodes": lambda m: [n.ClearField("name") for n in m.graph.node],
    "ai_onnx_domain": lambda m: _set(_node(m, "relu"), domain="ai.onnx"),
    "value_info_for_input": lambda m: m.graph.value_info.append(copy.deepcopy(m.graph.input[0])),
    "stale_value_info": lambda m: m.graph.value_info.append(
        helper.make_tensor_value_info("gone", TensorProto.FLOAT, [1])
    ),
    "initializer_is_input": lambda m: m.graph.input.append(
        helper.make_tensor_value_info("B", TensorProto.FLOAT, [4])
    ),
    "initializer_int32_typed": _int32_initializer,
    "optional_input_omitted": lambda m: _node(m, "conv").input.pop(),
    "output_passes_input": lambda m: m.graph.output.append(copy.deepcopy(m.graph.input[0])),
    "custom_domain_op": lambda m: (
        m.opset_import.append(helper.make_opsetid("custom.x", 1)),
        m.graph.node.append(helper.make_node("Anything", ["r"], ["z"], domain="custom.x")),
    ),
    "equal_attributes_on_two_nodes": lambda m: m.graph.node.append(
        helper.make_node("Cast", ["r"], ["r64"], to=TensorProto.DOUBLE)
    ),
}


def mutated(*mutations) -> bytes:
    m = base_model()
    for mutation in mutations:
        mutation(m)
    return m.SerializeToString()


def test_the_base_model_is_certified(monkeypatch):
    data = base_model().SerializeToString()
    assert full_verdict(data, monkeypatch) == []
    assert certify(data)


@pytest.mark.parametrize("name", sorted(BREAKING))
def test_a_broken_model_goes_to_the_full_checker(name, monkeypatch):
    data = mutated(BREAKING[name])
    verdict = full_verdict(data, monkeypatch)
    assert verdict != [], f"the mutant {name} is valid: not a breaking mutation"
    assert not certify(data)
    if isinstance(verdict, list):  # the report is the full checker's, unchanged
        with pytest.raises(ValidationError) as info:
            onyx.check(data)
        assert info.value.problems == verdict


@pytest.mark.parametrize("name", sorted(KEEPING))
def test_a_valid_variant_is_certified(name, monkeypatch):
    data = mutated(KEEPING[name])
    assert full_verdict(data, monkeypatch) == [], name
    assert certify(data), name


def test_mutations_combined_are_never_certified_wrongly(monkeypatch):
    everything = list(BREAKING.values()) + list(KEEPING.values())
    rng = random.Random(19)
    for _ in range(300):
        picked = rng.sample(everything, rng.randint(1, 3))
        try:
            data = mutated(*picked)
        except (IndexError, StopIteration, ValueError):
            continue  # one mutation took away what another edits
        assert_sound(data, monkeypatch, str(picked))


def test_check_of_a_path_builds_no_ir_for_a_valid_model(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    path.write_bytes(base_model().SerializeToString())

    def no_load(*_args):
        raise AssertionError("the IR was built")

    monkeypatch.setattr(onyx.checker, "_load", no_load)
    onyx.check(str(path))
    onyx.check(path)
    onyx.check(path.read_bytes())
    with pytest.raises(AssertionError, match="the IR was built"):
        onyx.check(mutated(BREAKING["undefined_input"]))


def test_the_check_command_takes_the_fast_path(tmp_path, monkeypatch, capsys):
    from onyx.tools.cli import main

    path = tmp_path / "m.onnx"
    path.write_bytes(base_model().SerializeToString())

    def no_load(*_args):
        raise AssertionError("the IR was built")

    monkeypatch.setattr(onyx.checker, "_load", no_load)
    assert main(["check", str(path)]) == 0
    assert "valid" in capsys.readouterr().out


def test_a_path_that_is_not_a_file_still_raises(tmp_path):
    with pytest.raises(OSError):
        onyx.check(str(tmp_path / "missing.onnx"))


# -- real models and random mutants --------------------------------------------------------------


def _node_suite() -> list[tuple[str, bytes]]:
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    return [(c.name, c.model.SerializeToString()) for c in cases if c.model is not None]


@pytest.fixture(scope="module")
def seeds():
    paths = sorted(glob.glob(os.path.join(MODELS, "*.onnx")))
    models = [(os.path.basename(p), open(p, "rb").read()) for p in paths if "external" not in p]
    suite = _node_suite()
    assert len(suite) > 1000
    return suite + models


def test_onnx_node_suite_and_test_models_are_certified(seeds, monkeypatch):
    proven = sum(assert_sound(data, monkeypatch, name) for name, data in seeds)
    # all but the models with subgraphs (If, Loop, Scan), which go to the full checker
    assert proven >= 0.95 * len(seeds), (proven, len(seeds))


def test_big_graphs_read_their_weights_by_span(seeds, monkeypatch):
    """Graphs over the split size have their big initializers' raw bytes taken out by span,
    not copied (as the loader does): the same answers on small thresholds."""
    monkeypatch.setattr(onyx.checker_fast, "SPLIT_MIN", 0)
    monkeypatch.setattr(onyx.checker_fast, "BIG_TENSOR", 16)
    rng = random.Random(5)
    models = [d for n, d in seeds if n.endswith(".onnx")]
    assert all(certify(d) for d in models)
    for data in models:
        for mutation in ("wrong_dims", "wrong_dtype", "external_trick", "flip_bits"):
            assert_sound(harness.mutate(harness.Seed("", data), mutation, rng), monkeypatch)
    short = onnx.ModelProto.FromString(models[0])
    big = max(short.graph.initializer, key=lambda t: len(t.raw_data))
    big.raw_data = big.raw_data[:-4]
    assert not certify(short.SerializeToString())


def test_random_mutants_are_never_certified_wrongly(seeds, monkeypatch):
    rng = random.Random(2026)
    mutations = [*harness.BYTE_MUTATIONS, *harness.PROTO_MUTATIONS]
    proven = 0
    for _ in range(1500):
        name, data = rng.choice(seeds)
        mutation = rng.choice(mutations)
        case = rng.randrange(2**31)
        mutant = harness.mutate(harness.Seed(name, data), mutation, random.Random(case))
        proven += assert_sound(mutant, monkeypatch, f"{name} {mutation} {case}")
    assert proven > 100  # (some mutants stay valid, and are proven so)


def _names(g) -> list[str]:
    found = [v.name for v in g.input] + [t.name for t in g.initializer]
    return found + [name for n in g.node for name in n.output] + ["", "nowhere"]


def _some_node(m, rng):
    return rng.choice(m.graph.node)


#: Edits of any graph (each may break it or not), for models the fast path proves valid.
STRUCTURAL = [
    lambda m, rng: _some_node(m, rng).input.append(rng.choice(_names(m.graph))),
    lambda m, rng: _set_item(_some_node(m, rng).input, rng.choice(_names(m.graph)), rng),
    lambda m, rng: _set_item(_some_node(m, rng).output, rng.choice(_names(m.graph)), rng),
    lambda m, rng: m.graph.node.pop(rng.randrange(len(m.graph.node))),
    lambda m, rng: m.graph.node.append(copy.deepcopy(_some_node(m, rng))),
    lambda m, rng: _set(_some_node(m, rng), op_type=rng.choice(["Relu", "Add", "Cast", "Foo"])),
    lambda m, rng: _set(_some_node(m, rng), domain=rng.choice(["ai.onnx", "com.microsoft", "x"])),
    lambda m, rng: _some_node(m, rng).ClearField("attribute"),
    lambda m, rng: _some_node(m, rng).attribute.append(
        helper.make_attribute(
            rng.choice(["axis", "to", "alpha", "mode"]), rng.choice([1, 1.5, "x"])
        )
    ),
    lambda m, rng: m.graph.value_info.append(
        helper.make_tensor_value_info(rng.choice(_names(m.graph)), rng.randint(0, 25), [1])
    ),
    lambda m, rng: _set(rng.choice(m.graph.output), name=rng.choice(_names(m.graph))),
    lambda m, rng: _set(rng.choice(m.graph.input), name=rng.choice(_names(m.graph))),
    lambda m, rng: _set(rng.choice(m.graph.initializer), data_type=rng.randint(0, 25)),
    lambda m, rng: _set(rng.choice(m.graph.initializer), name=rng.choice(_names(m.graph))),
    lambda m, rng: _set(m, ir_version=rng.randint(0, 12)),
    lambda m, rng: _set(m.opset_import[0], version=rng.randint(1, 25)),
]


def _set_item(field, value, rng):
    field[rng.randrange(len(field))] = value


def test_structural_edits_are_never_certified_wrongly(seeds, monkeypatch):
    rng = random.Random(11)
    proven = [d for _, d in seeds if certify(d)]
    certified = 0
    for _ in range(800):
        m = onnx.ModelProto.FromString(rng.choice(proven))
        for edit in rng.sample(STRUCTURAL, rng.randint(1, 3)):
            try:
                edit(m, rng)
            except (IndexError, ValueError):
                pass  # nothing of that kind to edit
        certified += assert_sound(m.SerializeToString(), monkeypatch)
    assert certified > 50
