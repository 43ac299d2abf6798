"""FrozenValue: the methods @dataclass(frozen=True) gives a class, written once."""

from __future__ import annotations

from dataclasses import FrozenInstanceError


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
