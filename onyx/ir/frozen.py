"""FrozenValue: the methods @dataclass(frozen=True) gives a class, written once; int_enum: an
enum.IntEnum made without the class statement's member-by-member machinery."""

from __future__ import annotations

import _thread
import enum
from dataclasses import FrozenInstanceError, dataclass
from typing import TYPE_CHECKING, TypeVar


class FrozenValue:
    """What ``@dataclass(frozen=True)`` gives a class (equality and hash over its compared
    fields, a repr of its fields, no assignment), for classes decorated with
    ``@dataclass(init=False, repr=False, eq=False)`` that write their own ``__init__``.

    Why: ``@dataclass`` compiles its methods' source when each class is defined, and a
    session's cold start defined some forty such classes; these methods are compiled once,
    here, and the fields stay dataclass fields (``dataclasses.fields``, ``replace``)."""

    __slots__ = ()

    def _set(self, **values) -> None:
        """Set fields, in their order (for ``__init__``: past the frozen ``__setattr__``)."""
        self.__dict__.update(values)

    def __setattr__(self, name: str, value) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self, kind: str) -> tuple:
        names = _field_names(type(self), kind)
        return tuple([getattr(self, n) for n in names])

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return self._values("compare") == other._values("compare")
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values("hash"))

    def __repr__(self) -> str:
        names = _field_names(type(self), "repr")
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{type(self).__qualname__}({shown})"


_FIELD_NAMES: dict[tuple[type, str], tuple[str, ...]] = {}


def _field_names(cls: type, kind: str) -> tuple[str, ...]:
    """The dataclass fields of ``cls`` that take part in "compare", "hash" or "repr", as
    ``@dataclass`` picks them."""
    key = (cls, kind)
    names = _FIELD_NAMES.get(key)
    if names is None:
        fields = cls.__dataclass_fields__.values()
        if kind == "hash":
            names = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
        else:
            names = tuple(f.name for f in fields if getattr(f, kind))
        _FIELD_NAMES[key] = names
    return names


class DataValue:
    """What a plain ``@dataclass`` gives a class (equality over its compared fields, no hash,
    a repr of its fields), for mutable classes decorated ``@dataclass(init=False, repr=False,
    eq=False)`` that write their own ``__init__`` (why: FrozenValue's)."""

    __slots__ = ()
    __hash__ = None  # (mutable and compared by value, as @dataclass(eq=True) leaves it)
    __eq__ = FrozenValue.__eq__
    __repr__ = FrozenValue.__repr__
    _values = FrozenValue._values


def lazy_fields(cls: type) -> type:
    """``@dataclass(init=False, repr=False, eq=False)``, applied when the class's dataclass
    fields are first asked for (``dataclasses.fields``, ``replace``, ``is_dataclass``, or a
    FrozenValue's equality, hash or repr), not when the class is defined.

    Why: dataclass reads every annotation of a class when it is defined (a tenth of a
    millisecond a class, some thirty of them on a cold start), and a session's cold start
    asks for the fields of almost none. Meanwhile ``__dataclass_fields__`` is a descriptor that
    makes them (under a lock: two threads make them once); the class's ``__init__`` sets every
    field, so nothing reads a default off the class before. A class without a docstring
    (dataclass writes its signature there) is made a dataclass at once."""
    if cls.__doc__ is None:
        return dataclass(init=False, repr=False, eq=False)(cls)
    cls.__dataclass_fields__ = _PendingFields(cls)
    return cls


_MAKING = _thread.RLock()  # (reentrant: a subclass's fields make its bases' first)


class _PendingFields:
    """A lazy_fields class's ``__dataclass_fields__`` until they are made: asked for (on the
    class, a subclass or an instance), it makes them, and they replace it."""

    __slots__ = ("owner",)

    def __init__(self, owner: type):
        self.owner = owner

    def __get__(self, obj, cls=None) -> dict:
        owner = self.owner
        with _MAKING:
            if owner.__dict__.get("__dataclass_fields__") is self:
                dataclass(init=False, repr=False, eq=False)(owner)
        return owner.__dict__["__dataclass_fields__"]


_C = TypeVar("_C", bound=type)

if TYPE_CHECKING:  # (what an int_enum class is, for type checkers and IDEs)
    IntEnumBody = enum.IntEnum
else:

    class IntEnumBody:
        """The base an ``int_enum`` class is written with: at run time a plain class (the
        decorator makes the enum), for type checkers ``enum.IntEnum``."""

        __slots__ = ()


def int_enum(cls: _C) -> _C:
    """``cls``, a plain class of int constants (``class Name(IntEnumBody)``), as the
    ``enum.IntEnum`` that ``class Name(enum.IntEnum)`` with the same body makes: same name,
    module, docstring, members, order, and members held in the class's dict
    (tests/test_cold_import.py holds each such enum to the class statement's).

    Why: the class statement runs EnumType's general machinery member by member (0.3 ms for
    DataType's 29 members); ``enum._simple_enum``, what the standard library builds its own
    enums with (http.HTTPStatus, re.RegexFlag...) for the same reason, makes the same class in
    under half of that, and a session's cold start makes five of these enums. Where it is
    missing (Python 3.10, or should a later Python drop it) the functional API makes it."""
    simple = getattr(enum, "_simple_enum", None)
    if simple is not None:
        made = simple(enum.IntEnum)(cls)
        _members_in_class_dict(made)
    else:
        members = [(k, v) for k, v in vars(cls).items() if not k.startswith("_")]
        made = enum.IntEnum(cls.__name__, members, module=cls.__module__, qualname=cls.__qualname__)
    # (both give an undocumented enum "An enumeration.", a class statement None)
    made.__doc__ = cls.__doc__
    return made


def _members_in_class_dict(made: type) -> None:
    """Store each member in the class's dict, as the class statement does (a member whose name
    no base class defines): ``_simple_enum`` (Python 3.11) leaves an ``enum.property`` there
    that looks the member up, and reading ``DataType.FLOAT`` (every pass and kernel does,
    again and again) then cost five times what a dict lookup does."""
    for name, member in made._member_map_.items():
        held = made.__dict__.get(name)
        if held is member or any(name in base.__dict__ for base in made.__mro__[1:]):
            continue
        type.__setattr__(made, name, member)  # (EnumType.__setattr__ refuses members)
