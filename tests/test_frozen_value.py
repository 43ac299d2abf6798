"""utils.FrozenValue behaves as @dataclass(frozen=True) does, for the classes that use it
instead (to define them without compiling methods at import)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import threading
from dataclasses import dataclass, field

import pytest

from onyx.ir.frozen import FrozenValue, _PendingFields, lazy_fields


@dataclass(frozen=True)
class Made:
    a: int
    b: object = None
    c: dict = field(default_factory=dict, compare=False, hash=False)
    d: str = field(default="x", repr=False)


@dataclass(init=False, repr=False, eq=False)
class Written(FrozenValue):
    a: int
    b: object = None
    c: dict = field(default_factory=dict, compare=False, hash=False)
    d: str = field(default="x", repr=False)

    def __init__(self, a: int, b: object = None, c: dict | None = None, d: str = "x"):
        self._set(a=a, b=b, c={} if c is None else c, d=d)


def _both(*args, **kwargs):
    return Made(*args, **kwargs), Written(*args, **kwargs)


def test_equality_hash_and_repr_follow_the_fields_flags():
    m1, w1 = _both(1, (2, 3), {"k": 1}, "y")
    m2, w2 = _both(1, (2, 3), {"other": 2}, "y")
    m3, w3 = _both(1, (2, 4))
    assert (m1 == m2, m1 == m3) == (w1 == w2, w1 == w3) == (True, False)
    assert (hash(m1) == hash(m2)) and (hash(w1) == hash(w2))
    assert repr(w1) == repr(m1).replace("Made", "Written")
    assert (w1 == 5) is False and w1.__eq__(m1) is NotImplemented


def test_fields_replace_vars_copy_and_pickle_work_as_for_a_dataclass():
    m, w = _both(1, "b", {"k": 1})
    assert [f.name for f in dataclasses.fields(w)] == [f.name for f in dataclasses.fields(m)]
    assert vars(w) == vars(m) and list(vars(w)) == list(vars(m))
    assert dataclasses.replace(w, a=2) == Written(2, "b", {"k": 1})
    assert copy.copy(w) == w and copy.deepcopy(w) == w
    assert pickle.loads(pickle.dumps(w)) == w


def test_fields_cannot_be_assigned_or_deleted():
    m, w = _both(1)
    for obj in (m, w):
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.a = 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            del obj.a


def test_unhashable_fields_fail_to_hash_alike():
    m, w = _both(1, [1])
    for obj in (m, w):
        with pytest.raises(TypeError):
            hash(obj)


@lazy_fields
class Lazy(FrozenValue):
    """Written's fields, made a dataclass when first asked for."""

    a: int
    b: object = None
    c: dict = field(default_factory=dict, compare=False, hash=False)
    d: str = field(default="x", repr=False)

    def __init__(self, a: int, b: object = None, c: dict | None = None, d: str = "x"):
        self._set(a=a, b=b, c={} if c is None else c, d=d)


class LazyChild(Lazy):
    """Not declared itself: its base's fields."""


@lazy_fields
class LazyMore(Lazy):
    """One field more."""

    e: int = 0

    def __init__(self, a: int, e: int = 0):
        self._set(a=a, b=None, c={}, d="x", e=e)


def _described(cls) -> list:
    return [
        (f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.hash, f.compare)
        for f in dataclasses.fields(cls)
    ]


def test_lazy_fields_are_made_when_first_asked_for():
    @lazy_fields
    class Fresh(FrozenValue):
        """Not asked for yet."""

        a: int

    assert isinstance(Fresh.__dict__["__dataclass_fields__"], _PendingFields)
    assert [f.name for f in dataclasses.fields(Fresh)] == ["a"]
    assert type(Fresh.__dict__["__dataclass_fields__"]) is dict  # (made: it replaced itself)


def test_lazy_fields_are_a_dataclasses_once_asked_for():
    assert _described(Lazy) == _described(Written)
    assert Lazy.__match_args__ == Written.__match_args__
    assert (Lazy.b, Lazy.d, hasattr(Lazy, "c")) == (Written.b, Written.d, hasattr(Written, "c"))
    w, z = Written(1, "b", {"k": 1}), Lazy(1, "b", {"k": 1})
    assert dataclasses.asdict(z) == dataclasses.asdict(w)
    assert dataclasses.replace(z, a=2) == Lazy(2, "b", {"k": 1})
    assert repr(z) == repr(w).replace("Written", "Lazy") and hash(z) == hash(w)
    assert pickle.loads(pickle.dumps(z)) == z


def test_lazy_fields_of_subclasses_and_of_an_instance_first():
    # (an instance asks first here: the class's own fields are made then)
    assert dataclasses.is_dataclass(LazyMore(1, 2))
    assert [f.name for f in dataclasses.fields(LazyMore)] == ["a", "b", "c", "d", "e"]
    assert _described(LazyChild) == _described(Lazy) and dataclasses.is_dataclass(LazyChild)
    assert not dataclasses.is_dataclass(FrozenValue)


def test_lazy_fields_asked_for_by_threads_at_once_are_made_once():
    @lazy_fields
    class Racing(FrozenValue):
        """Asked for by eight threads at once."""

        a: int
        c: dict = field(default_factory=dict)

    start = threading.Barrier(8)
    seen = []

    def ask():
        start.wait()
        seen.append(dataclasses.fields(Racing))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(s == seen[0] for s in seen)
    assert [f.default_factory for f in seen[0]] == [dataclasses.MISSING, dict]


def test_a_cold_session_makes_no_fields_of_the_ir_schemas_checker_optimizer_or_inference():
    """The classes' dataclass fields are made when asked for: a float CNN's session and its
    first run ask for none of these."""
    import subprocess
    import sys
    from pathlib import Path

    import onyx

    tiny = Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx"
    code = (
        "import numpy as np, onyx\n"
        "from onyx import checker, defs, ir\n"
        "from onyx.inference import engine\n"
        "from onyx.optimizer import core\n"
        f"s = onyx.InferenceSession({str(tiny)!r})\n"
        "i = s.get_inputs()[0]\n"
        "s.run(None, {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape],\n"
        "    np.float32)})\n"
        "classes = (ir.TensorType, ir.Shape, ir.Attr, ir.dtypes.DTypeInfo, defs.OpSchema,\n"
        "    defs.FormalParameter, defs.AttributeDef, defs.TypeConstraint, defs.FunctionBody,\n"
        "    checker.Problem, core.Pass, core.PassResult, core.PassContext, engine.Data)\n"
        "print([c.__name__ for c in classes if type(c.__dict__['__dataclass_fields__']) is dict])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
