"""What `import onyx` and a float CNN's session load (issue 23, cold start), and the cheaper
ways some of it is now made (ir/frozen.int_enum)."""

from __future__ import annotations

import enum
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from onyx.ir import AttrType, DataType
from onyx.ir.frozen import IntEnumBody, int_enum
from onyx.runtime.options import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    RunOptions,
    SessionOptions,
)
from onyx.serde import reader, repeated, wire_reader

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "onyx" / "examples" / "tiny_cnn.onnx"
ENUMS = [DataType, AttrType, GraphOptimizationLevel, ExecutionMode, ExecutionOrder]


def _class_statement(made: type) -> type:
    """The enum ``class Name(enum.IntEnum)`` with ``made``'s body would have made."""
    body = {"__module__": made.__module__, "__qualname__": made.__qualname__}
    if made.__doc__ is not None:
        body["__doc__"] = made.__doc__
    members = [(m.name, m.value) for m in made]
    return types.new_class(
        made.__name__,
        (enum.IntEnum,),
        exec_body=lambda ns: [ns.__setitem__(k, v) for k, v in [*body.items(), *members]],
    )


def _same_enum(a: type, b: type) -> None:
    assert type(a) is type(b) and a.__mro__[1:] == b.__mro__[1:]
    assert (a.__name__, a.__qualname__, a.__module__, a.__doc__) == (
        b.__name__,
        b.__qualname__,
        b.__module__,
        b.__doc__,
    )
    assert [(m.name, m.value) for m in a] == [(m.name, m.value) for m in b]
    assert list(a.__members__) == list(b.__members__)
    # each member held in the class's dict as the class statement holds it (there, a member
    # is read at a dict lookup's speed: DataType.FLOAT is read in every pass and kernel)
    assert [a.__dict__.get(m.name) is m for m in a] == [b.__dict__.get(m.name) is m for m in b]
    for m, n in zip(a, b):
        assert (repr(m), str(m), format(m), m.name, int(m)) == (
            repr(n),
            str(n),
            format(n),
            n.name,
            int(n),
        )
        assert a(int(m)) is m and a[m.name] is m


@pytest.mark.parametrize("made", ENUMS, ids=lambda e: e.__name__)
def test_int_enum_is_the_class_statements_enum(made):
    assert issubclass(made, enum.IntEnum)
    reference = _class_statement(made)
    _same_enum(made, reference)
    if hasattr(enum, "_test_simple_enum"):  # (the standard library's own check of the two)
        enum._test_simple_enum(reference, made)  # noqa: SLF001


def test_int_enum_without_simple_enum(monkeypatch):
    """Where enum has no _simple_enum (Python 3.10), the functional API makes the same enum."""
    monkeypatch.delattr(enum, "_simple_enum", raising=False)

    class Colour(IntEnumBody):
        """Colours."""

        RED = 1
        GREEN = 4
        BLUE = 2

    made = int_enum(Colour)
    _same_enum(made, _class_statement(made))
    assert [m.name for m in made] == ["RED", "GREEN", "BLUE"] and made.__doc__ == "Colours."


def test_int_enum_keeps_a_missing_docstring():
    class Bare(IntEnumBody):
        A = 1

    made = int_enum(Bare)
    _same_enum(made, _class_statement(made))


#: Modules a float CNN's session (import, options, creation, first run) does not load: the
#: saving half of serde (saving.py, writer.py, text.py), external data (external.py), long
#: repeated fields (repeated.py).
NOT_LOADED = [
    "onyx.serde.saving",
    "onyx.serde.writer",
    "onyx.serde.text",
    "onyx.serde.external",
    "onyx.serde.repeated",
    "onyx.serde.values",
]

_CHILD = """
import json, sys
import numpy as np
import onyx
so = onyx.SessionOptions()
so.intra_op_num_threads = 1
sess = onyx.InferenceSession(sys.argv[1], so)
x = np.zeros([d if isinstance(d, int) else 1 for d in sess.get_inputs()[0].shape], np.float32)
sess.run(None, {sess.get_inputs()[0].name: x})
print(json.dumps(sorted(m for m in sys.modules if m.startswith("onyx"))))
from onyx.runtime import session
made = [c.__name__ for c in (onyx.SessionOptions, onyx.RunOptions, session.NodeArg)
        if isinstance(c.__dict__["__dataclass_fields__"], dict)]
print(json.dumps(made))
"""


def _session(model: Path) -> tuple[set[str], list[str]]:
    """The onyx modules a fresh process's session of ``model`` loaded (import, options,
    creation, a run), and which of its option and NodeArg classes' dataclass fields were made."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(model)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout.splitlines()
    return set(json.loads(out[-2])), json.loads(out[-1])


def _session_modules(model: Path) -> set[str]:
    return _session(model)[0]


def test_a_float_cnn_session_loads_no_saving_external_or_long_list_code():
    loaded = _session_modules(TINY)
    assert "onyx.serde.wire_reader" in loaded  # (the probe sees serde's modules)
    assert [m for m in NOT_LOADED if m in loaded] == []


def test_external_data_and_long_lists_still_load_their_modules(tmp_path):
    """A model whose weights are external data imports what it needs; one with a long list
    attribute is read by the wire path, which decodes the list without serde/repeated.py."""
    import onnx
    from onnx import TensorProto, helper

    import onyx

    path = tmp_path / "ext.onnx"
    onyx.save(onyx.load(TINY), path, external_data=True, size_threshold=0)
    assert "onyx.serde.external" in _session_modules(path)
    n = reader.LONG_LIST + 8
    node = helper.make_node("Constant", [], ["c"], value_floats=[float(i) for i in range(n)])
    add = helper.make_node("Add", ["x", "c"], ["y"])
    graph = helper.make_graph(
        [node, add],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
    )
    long_list = tmp_path / "long.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), long_list)
    # (read by the wire path, which decodes long lists itself: serde/wire_reader.py)
    assert "onyx.serde.repeated" not in _session_modules(long_list)


def test_the_reader_and_repeated_agree_on_a_long_list():
    assert reader.LONG_LIST == repeated.MIN_ELEMENTS == wire_reader.LONG_LIST


def test_a_session_makes_no_dataclass_fields_of_its_options_or_args():
    """SessionOptions, RunOptions and NodeArg are dataclasses whose fields are made when first
    asked for (ir/frozen.lazy_fields): a session's creation and run ask for none."""
    assert _session(TINY)[1] == []


@pytest.mark.parametrize("cls", [SessionOptions, RunOptions], ids=lambda c: c.__name__)
def test_option_fields_declared_are_the_dataclass_fields(cls):
    from dataclasses import MISSING, fields

    expected = tuple(
        (f.name, f.default, None if f.default_factory is MISSING else f.default_factory)
        for f in fields(cls)
    )
    assert cls._fields_declared == expected  # noqa: SLF001
    assert [f.name for f in fields(cls)] == list(vars(cls())) == [e[0] for e in expected]
