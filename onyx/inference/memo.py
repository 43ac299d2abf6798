"""What a node's shape rule found, remembered for nodes alike in everything the rule reads.

Why: a session infers its model's types while it is created, and a model repeats a few kinds
of node (a transformer's layers, a CNN's blocks); a model created again in the process repeats
all of them. A rule is a function of its node's op (domain, type, opset: its schema and rule),
its attributes, which inputs and outputs are present, the inputs' types and propagated data,
and the engine's settings: two nodes alike in all of these get the same output types and data.
A rule that read no input's data (NodeContext.value, data, raw: most rules, a conv's or a
DequantizeLinear's, which read their constant weights' shapes only) is remembered under the key
without the data, and nodes alike but for their constants' values share its entry (its path up
to a first read of data is a function of that key: a node alike in it reads none either).
Only what that key fully describes is remembered: plain attributes and small numeric tensors
(no graphs or references), short lists, tensor types, small numeric data; a rule that named a fresh
symbolic dim (unique per use) or failed is not. Cleared when full: by entries, or by bytes
(MAX_BYTES: what the entries' keys and data hold), and an entry that alone would hold more than
MAX_ENTRY_BYTES (a long string attribute, many inputs of propagated data) is not kept at all.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..ir import AttrType, TensorType

#: Entries kept before the memo is cleared.
MAX_ENTRIES = 4096
#: Longest attribute list and largest data (elements) a key holds.
MAX_LIST = 64
MAX_DATA = 4096
#: Bytes (of data, strings and dims) the entries hold together before the memo is cleared, and
#: the most one entry may hold: a count of entries alone let a process keep gigabytes (4096
#: entries of a Concat of many propagated constants, or of a megabyte string attribute each).
MAX_BYTES = 32 << 20
MAX_ENTRY_BYTES = 256 << 10

# (plain ints: an enum member hashes in Python, and a key is hashed at every node)
_PLAIN = frozenset(map(int, (AttrType.FLOAT, AttrType.INT, AttrType.STRING)))
_LISTS = frozenset(map(int, (AttrType.FLOATS, AttrType.INTS, AttrType.STRINGS)))
_TENSOR = int(AttrType.TENSOR)
_FLOAT, _FLOATS = int(AttrType.FLOAT), int(AttrType.FLOATS)

MEMO: dict[tuple, tuple] = {}
#: The bytes MEMO's entries hold (_entry_bytes), reset with it.
HELD = [0]
#: engine.Data, set by the engine (it imports this module).
DATA: list = [None]


def find(engine, node, env: dict, found: tuple) -> tuple[tuple | None, tuple | None]:
    """The memo key of ``node``'s inference and what is remembered for it (the entry: output
    types, output data and schema, the memo's own, which the caller reads only and copies
    the data of, :func:`copy_data`; None: nothing yet); (None, None) where the node is
    not remembered, as for a malformed node, whose rule reports what is wrong. The key is a
    pair: the node's key without its inputs' data, and the one with it (made only for an op an
    entry was kept with data for, and only where the key without the data has no entry; None
    where some data is not of the kinds a key holds; else what it is made of): see
    :func:`remember`."""
    try:
        k = _key(engine, node, env, found)
        if k is None:
            return None, None
        blind, parts = k
        # (hashing it: an attribute built through the API may hold an unhashable value)
        hit = MEMO.get(blind)
        if hit is None and parts[0] in READ_DATA:  # (an op some of whose rules read data)
            # (looked for only where no entry without the data is: a node alike in the key
            # without them has one kind of entry, as its rule's path up to a first read of
            # data is a function of that key; the key with the data, its arrays' bytes, was
            # made for every node of such an op, hit or not)
            full = _with_data(*parts)
            k = (blind, full)
            hit = None if full is None else MEMO.get(full)
    except Exception:  # noqa: BLE001  (e.g. a tensor attribute without a type: the rule says)
        return None, None
    return k, hit


def _key(engine, node, env: dict, found: tuple) -> tuple | None:
    """(the key without the inputs' data, what :func:`_with_data` makes the key with it of)."""
    attrs = []
    for name, a in node.attributes.items():
        kind = int(a.type)
        if a.ref_attr_name:
            return None
        if kind in _LISTS:
            if a.array is not None:  # (a long list kept as an array: far over MAX_LIST)
                return None
            value = a.value
            if len(value) > MAX_LIST:
                return None
            value = tuple(value)
            if kind == _FLOATS and 0.0 in value:
                value = tuple(map(_signed, value))
        elif kind == _TENSOR:  # (a Constant's small value: its dtype and bytes)
            value = _tensor_key(a.value)
            if value is None:
                return None
        elif kind not in _PLAIN:
            return None
        else:
            value = a.value
            if kind == _FLOAT and value == 0.0:
                value = _signed(value)
        attrs.append((name, kind, value))
    types, data = env["types"], env["data"]
    type_keys = TYPE_KEYS
    inputs = []
    held = None  # (position, data) of the inputs that hold data
    for v in node._inputs:  # noqa: SLF001 (read only: Node.inputs makes a tuple)
        if v is None:
            inputs.append(None)
            continue
        at = id(v)
        t = types.get(at)
        if t is not None:
            if t.__class__ is not TensorType:
                return None
            known = type_keys.get(id(t))
            t = known[1] if known is not None and known[0] is t else type_id(t)
        d = data.get(at)
        if d is not None:
            if held is None:
                held = []
            held.append((len(inputs), d))
        inputs.append(t)
    outputs = tuple([v.name != "" for v in node._outputs])  # noqa: SLF001
    flags = (engine.strict, engine.data_prop)
    op = found[4]  # (the op's id: op_id of its domain, type, opset, schema and rule)
    attrs = tuple(attrs)
    blind = (WITHOUT_DATA, op, attrs, tuple(inputs), outputs, flags)
    return blind, _Unmade((op, attrs, inputs, held or (), outputs, flags))


class _Unmade(tuple):
    """What the key with the inputs' data is made of (_with_data's arguments), where find did
    not make it."""

    __slots__ = ()  # (no instance dict: one is made per node)


#: The first item of a key without the inputs' data (a key with them has none such).
WITHOUT_DATA = "without data"
#: The ops (their ids: a key's first part, op_id) of the entries ever kept
#: with their inputs' data: no other op's node looks for one (a cold process's creation finds
#: none, and a conv's weights were keyed for nothing).
READ_DATA: set[tuple] = set()


def _with_data(op, attrs, types: list, held: list, outputs, flags) -> tuple | None:
    """The key with the inputs' data (None where some data is not of the kinds a key holds)."""
    inputs = [None if t is None else (t, None) for t in types]
    for i, d in held:
        if d.__class__ is np.ndarray:  # (_data_key's first case, inlined: most data)
            if d.dtype.hasobject or d.size > MAX_DATA:
                return None
            d = ("array", d.dtype.str, d.shape, d.tobytes())
        else:
            d = _data_key(d)
            if d is None:
                return None
        inputs[i] = (types[i], d)
    return (op, attrs, tuple(inputs), outputs, flags)


#: id(type) -> (the TensorType, its id: type_id), for the types that come back: those a memo
#: hit hands out and the initializers' shared ones are the same objects at every creation.
TYPE_KEYS: dict[int, tuple] = {}
#: A type's fields (type_key) -> its id; an id -> the bytes its dims count in an entry.
TYPE_IDS: dict[tuple, int] = {}
TYPE_BYTES: dict[int, int] = {}
#: An op's part of a key (engine._resolve's: node domain, op type, domain, opset, schema and
#: rule) -> (its id, the schema and rule, held so that their ids are not reused meanwhile).
OP_IDS: dict[tuple, tuple] = {}
#: Where interned ids come from: never reused, so that a table cleared when full gives a
#: type or op seen again a new id (its old entries missed, never mistaken for another's).
_NEXT_ID = itertools.count(1)


def type_key(t: TensorType) -> tuple:
    """The type's fields as plain tuples (what tells its id: two types of these fields alike
    get one id)."""
    shape = t.shape
    dims = None if shape is None else (shape.dims, shape.denotations)
    return (int(t.elem_type), dims, t.denotation)


def type_id(t: TensorType) -> int:
    """A small int that stands for the type's fields in a key, kept with the type (frozen: its
    fields never change). Why: a key of nested tuples (dims, denotations) was hashed and, at a
    hit, compared item by item at every node; an int is hashed and compared at once."""
    k = type_key(t)
    n = TYPE_IDS.get(k)
    if n is None:
        if len(TYPE_IDS) >= 4 * MAX_ENTRIES:
            TYPE_IDS.clear()
            TYPE_BYTES.clear()
        n = TYPE_IDS[k] = next(_NEXT_ID)
        TYPE_BYTES[n] = 0 if k[1] is None else 8 * len(k[1][0])
    if len(TYPE_KEYS) >= 4 * MAX_ENTRIES:
        TYPE_KEYS.clear()
    TYPE_KEYS[id(t)] = (t, n)  # (the entry holds the type: its id is not reused meanwhile)
    return n


def op_id(op: tuple, schema, fn) -> int:
    """The id of an op's part of a key (``op`` holds id(schema) and the rule)."""
    known = OP_IDS.get(op)
    if known is None:
        if len(OP_IDS) >= MAX_ENTRIES:
            OP_IDS.clear()
        known = OP_IDS[op] = (next(_NEXT_ID), schema, fn)
    return known[0]


def _signed(x: float) -> tuple:
    """A float and its sign: 0.0 == -0.0, and a Constant of one propagates its own zero."""
    return (x, math.copysign(1.0, x))


def _tensor_key(t) -> tuple | None:
    if t is None or t.size > MAX_DATA:
        return None
    arr = t.numpy()  # (what the rule reads: decoded once, kept by the tensor)
    if arr.dtype.hasobject:
        return None
    return (int(t.dtype), arr.dtype.str, arr.shape, arr.tobytes())


def _describable(d) -> bool:
    """Whether a key can hold data ``d``: a small numeric array, or propagated dims
    (engine.Data) of ints, names and unknowns."""
    if d.__class__ is np.ndarray:
        return not d.dtype.hasobject and d.size <= MAX_DATA
    if d.__class__ is DATA[0]:
        dims = d.dims
        if len(dims) > MAX_DATA:
            return False
        for x in dims:  # (a loop, not all() of a generator: this runs for most shape nodes)
            if x is not None and x.__class__ is not int and x.__class__ is not str:
                return False
        return True
    return False


def _data_key(d) -> tuple | None:
    if not _describable(d):
        return None
    if d.__class__ is np.ndarray:
        return ("array", d.dtype.str, d.shape, d.tobytes())
    return ("dims", tuple(d.dims), d.scalar)


def remember(k: tuple, outputs: dict, out_data: dict, schema, read_data: bool = True) -> None:
    """Keep what a rule found for key ``k`` (find's pair; when its data is of the kinds a key
    describes): under the key without the inputs' data where the rule (and the data folds
    after it) read none (``read_data``), a function then of what that key holds, whatever the
    data (a rule's path up to its first read of data is one of the key's fields: a node alike
    in them reads none either), else under the key with it. A conv's or a
    DequantizeLinear's weights, data of the constants that inference propagates, no longer
    tell alike nodes apart."""
    blind, full = k
    if read_data and full.__class__ is _Unmade:
        full = _with_data(*full)  # (find did not make it)
    if read_data and full is None:
        return  # (some data a key cannot hold)
    k = full if read_data else blind
    for d in out_data.values():
        if d is not None and not _describable(d):
            return
    if any(t.__class__ is not TensorType for t in outputs.values()):
        return
    size = _entry_bytes(k, outputs, out_data)
    if size > MAX_ENTRY_BYTES or k in MEMO:
        return
    if len(MEMO) >= MAX_ENTRIES or HELD[0] + size > MAX_BYTES:
        clear()
    MEMO[k] = (dict(outputs), {i: copy_data(d) for i, d in out_data.items()}, schema)
    HELD[0] += size
    if read_data:
        READ_DATA.add(k[0])


def clear() -> None:
    """Forget every entry (and the bytes they held)."""
    MEMO.clear()
    READ_DATA.clear()
    HELD[0] = 0


def _entry_bytes(k: tuple, outputs: dict, out_data: dict) -> int:
    """About the bytes an entry holds beyond its fixed parts: its key's attribute values,
    input dims and data, and its output dims and data (8 bytes a dim or list item)."""
    if k[0] is WITHOUT_DATA:
        _, _, attrs, types, _, _ = k
        inputs = [None if t is None else (t, None) for t in types]
    else:
        _, attrs, inputs, _, _ = k
    n = 0
    for _, kind, value in attrs:
        if kind == _TENSOR:
            n += len(value[3])
        elif kind in _LISTS:
            n += sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in value)
        elif isinstance(value, (str, bytes)):
            n += len(value)
    for entry in inputs:
        if entry is None:
            continue
        t, d = entry
        if t is not None:
            n += TYPE_BYTES.get(t, 0)  # (0 only for an id whose table was cleared since)
        if d is not None:
            n += len(d[3]) if d[0] == "array" else 8 * len(d[1])
    for t in outputs.values():
        n += 8 * len(t.shape.dims) if t.shape is not None else 0
    for d in out_data.values():
        if d is not None:
            n += d.nbytes if d.__class__ is np.ndarray else 8 * len(d.dims)
    return n


def copy_data(d):
    """A copy of propagated data (an entry's data must not be changed by a later rule)."""
    if d is None:
        return None
    if d.__class__ is np.ndarray:
        return d.copy()
    return d.__class__(list(d.dims), d.scalar)
