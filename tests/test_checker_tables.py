"""The checker's per-process tables (onyx/checker.py): an attribute value whose verdict is a
function of its op, name, type and value, and a declared type under an IR version, are
checked once and kept when they pass; whatever fails is checked (and reported) every time,
and a rule that reads the node (a conv's group) is never taken from a table."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import onyx
from onyx import checker
from onyx.checker import problems

F = TensorProto.FLOAT
_CHECKER = vars(checker)["_Checker"]


def _conv(kernel=(3, 3), group=1, channels=4, ir_version=10, elem=F) -> onyx.ir.Model:
    w = helper.make_tensor_value_info("w", F, [8, channels // group, *kernel])
    x = helper.make_tensor_value_info("x", elem, [1, channels, 9, 9])
    y = helper.make_tensor_value_info("y", F, None)
    node = helper.make_node(
        "Conv", ["x", "w"], ["y"], kernel_shape=list(kernel), strides=[1, 1], group=group
    )
    g = helper.make_graph([node], "g", [x, w], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = ir_version
    return onyx.load(m.SerializeToString())


@pytest.fixture
def calls(monkeypatch):
    """The attribute names whose rules are run (check_attribute, check_group), from fresh
    tables."""
    monkeypatch.setattr(checker, "_ATTRS_PASSED", set(), raising=False)
    monkeypatch.setattr(checker, "_TYPES_PASSED", {}, raising=False)
    seen = []
    rule = _CHECKER.check_attribute

    def counted(self, a, *rest):
        seen.append(a.name)
        return rule(self, a, *rest)

    monkeypatch.setattr(_CHECKER, "check_attribute", counted)
    group = getattr(_CHECKER, "check_group", None)  # (a conv's group: its rules alone)
    if group is not None:
        monkeypatch.setattr(
            _CHECKER, "check_group", lambda self, *a: seen.append("group") or group(self, *a)
        )
    return seen


def test_an_attribute_value_that_passed_is_not_checked_again(calls):
    assert problems(_conv()) == []
    assert sorted(calls) == ["group", "kernel_shape", "strides"]
    calls.clear()
    assert problems(_conv()) == []  # (a model created again)
    assert calls == ["group"]  # (its rule reads the node's shapes: never tabled)


def test_a_failing_value_is_reported_every_time_and_a_new_one_checked(calls):
    assert problems(_conv()) == []
    for _ in range(2):
        found = problems(_conv(kernel=(0, 3)))
        assert [p.rule for p in found] == ["attribute-value"]
        assert "kernel_shape" in found[0].message
    calls.clear()
    assert problems(_conv(kernel=(5, 5))) == []
    assert "kernel_shape" in calls  # (another value: checked)


def test_a_group_that_does_not_split_the_channels_is_reported_after_a_good_one(calls):
    assert problems(_conv(group=2)) == []
    found = problems(_conv(group=3, channels=4))
    assert "attribute-value" in {p.rule for p in found}


def test_a_declared_type_that_passed_is_checked_again_under_another_ir_version(monkeypatch):
    """A float8 input needs IR version 9: the type object that passed under IR 10 is kept
    with that version, and the same object under IR 8 is reported."""
    monkeypatch.setattr(checker, "_TYPES_PASSED", {}, raising=False)
    ran = []
    rules = _CHECKER.type_rules
    monkeypatch.setattr(
        _CHECKER, "type_rules", lambda self, t, *a: ran.append(t) or rules(self, t, *a)
    )
    e4m3 = TensorProto.FLOAT8E4M3FN
    assert not [p for p in problems(_conv(elem=e4m3)) if p.rule == "ir-version-feature"]
    first = len(ran)
    problems(_conv(elem=e4m3))  # (the reader's types are shared: all passed before)
    assert len(ran) == first
    old = _conv(elem=e4m3, ir_version=8)
    assert "ir-version-feature" in {p.rule for p in problems(old)}


def test_an_initializer_of_values_read_into_an_array_is_held_to_its_dims(monkeypatch):
    """An initializer whose values a converter wrote in the typed fields (read into an array,
    not wire bytes) passes without check_tensor when the array has its dims' size, and is
    reported when it has not."""
    import numpy as np

    w = helper.make_tensor("w", F, [2, 3], [1.0] * 6)
    out = helper.make_tensor_value_info("y", F, None)
    g = helper.make_graph([helper.make_node("Relu", ["w"], ["y"])], "g", [], [out], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    model = onyx.load(m.SerializeToString())
    looked = []
    rule = _CHECKER.check_tensor
    monkeypatch.setattr(
        _CHECKER, "check_tensor", lambda self, *a: looked.append(a) or rule(self, *a)
    )
    assert problems(model) == [] and looked == []
    t = model.graph.initializers["w"].const_value
    t._array = np.zeros(5, np.float32)  # noqa: SLF001 (a short array, as a broken model's)
    assert [p.rule for p in problems(model)] == ["tensor-data-size"]


def test_a_constants_value_of_the_wrong_size_is_reported():
    """A Constant's tensor passes by its plain case (wire bytes of its dims' size) without
    check_tensor; bytes of another size are still reported."""
    value = helper.make_tensor("v", F, [2, 3], b"\0" * 24, raw=True)
    out = helper.make_tensor_value_info("y", F, None)
    node = helper.make_node("Constant", [], ["y"], value=value)
    m = helper.make_model(
        helper.make_graph([node], "g", [], [out]), opset_imports=[helper.make_opsetid("", 18)]
    )
    model = onyx.load(m.SerializeToString())
    assert problems(model) == []
    attr = model.graph.nodes[0].attributes["value"]
    attr.value = onyx.ir.Tensor.from_raw(b"\0" * 20, F, (2, 3))  # (as a model built in memory)
    found = problems(model)
    assert [p.rule for p in found] == ["tensor-data-size"] and "attribute 'value'" in found[
        0
    ].message
