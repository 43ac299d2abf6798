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
from onyx.runtime.options import ExecutionMode, ExecutionOrder, GraphOptimizationLevel

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
