"""utils.FrozenValue behaves as @dataclass(frozen=True) does, for the classes that use it
instead (to define them without compiling methods at import)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from onyx.ir.frozen import FrozenValue


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
