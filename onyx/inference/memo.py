"""What a node's shape rule found, remembered for nodes alike in everything the rule reads.

Why: a session infers its model's types while it is created, and a model repeats a few kinds
of node (a transformer's layers, a CNN's blocks); a model created again in the process repeats
all of them. A rule is a function of its node's op (domain, type, opset: its schema and rule),
its attributes, which inputs and outputs are present, the inputs' types and propagated data,
and the engine's settings: two nodes alike in all of these get the same output types and data.
Only what that key fully describes is remembered: plain attributes and small numeric tensors
(no graphs or references), short lists, tensor types, small numeric data; a rule that named a fresh
symbolic dim (unique per use) or failed is not. Cleared when full.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import AttrType, TensorType

#: Entries kept before the memo is cleared.
MAX_ENTRIES = 4096
#: Longest attribute list and largest data (elements) a key holds.
MAX_LIST = 64
MAX_DATA = 4096

# (plain ints: an enum member hashes in Python, and a key is hashed at every node)
_PLAIN = frozenset(map(int, (AttrType.FLOAT, AttrType.INT, AttrType.STRING)))
_LISTS = frozenset(map(int, (AttrType.FLOATS, AttrType.INTS, AttrType.STRINGS)))
_TENSOR = int(AttrType.TENSOR)
_FLOAT, _FLOATS = int(AttrType.FLOAT), int(AttrType.FLOATS)

MEMO: dict[tuple, tuple] = {}
#: engine.Data, set by the engine (it imports this module).
DATA: list = [None]


def key(engine, node, env: dict, found: tuple) -> tuple | None:
    """The memo key of ``node``'s inference (None: not remembered, as for a malformed node,
    whose rule reports what is wrong)."""
    try:
        k = _key(engine, node, env, found)
        hash(k)  # (an attribute built through the API may hold an unhashable value)
    except Exception:  # noqa: BLE001  (e.g. a tensor attribute without a type: the rule says)
        return None
    return k


def _key(engine, node, env: dict, found: tuple) -> tuple | None:
    attrs = []
    for name, a in node.attributes.items():
        kind = int(a.type)
        if a.ref_attr_name:
            return None
        value = a.value
        if kind in _LISTS:
            if len(value) > MAX_LIST:
                return None
            value = tuple(value)
            if kind == _FLOATS and 0.0 in value:
                value = tuple(map(_signed, value))
        elif kind == _TENSOR:  # (a Constant's small value: its dtype and bytes)
            value = _tensor_key(value)
            if value is None:
                return None
        elif kind not in _PLAIN:
            return None
        elif kind == _FLOAT and value == 0.0:
            value = _signed(value)
        attrs.append((name, kind, value))
    types, data = env["types"], env["data"]
    type_keys = TYPE_KEYS
    inputs = []
    for v in node.inputs:
        if v is None:
            inputs.append(None)
            continue
        t = types.get(id(v))
        if t is not None:
            if t.__class__ is not TensorType:
                return None
            known = type_keys.get(id(t))
            t = known[1] if known is not None and known[0] is t else type_key(t)
        d = data.get(id(v))
        if d is not None:
            d = _data_key(d)
            if d is None:
                return None
        inputs.append((t, d))
    outputs = tuple([v.name != "" for v in node.outputs])
    flags = (engine.strict, engine.data_prop)
    domain, opset, schema, rule = found
    # (the schema by identity: an entry holds it, so its id is not reused while it lives)
    op = (node.domain, node.op_type, domain, opset, id(schema), rule)
    return (op, tuple(attrs), tuple(inputs), outputs, flags)


#: id(type) -> (the TensorType, its key), for the types that come back: those a memo hit hands
#: out and the initializers' shared ones are the same objects at every creation of a model.
TYPE_KEYS: dict[int, tuple] = {}


def type_key(t: TensorType) -> tuple:
    """The type's fields as plain tuples (hashing and comparing a type object calls its
    methods, several per node), kept with the type (frozen: its key never changes)."""
    shape = t.shape
    dims = None if shape is None else (shape.dims, shape.denotations)
    k = (int(t.elem_type), dims, t.denotation)
    if len(TYPE_KEYS) >= 4 * MAX_ENTRIES:
        TYPE_KEYS.clear()
    TYPE_KEYS[id(t)] = (t, k)  # (the entry holds the type: its id is not reused meanwhile)
    return k


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


def lookup(k: tuple) -> tuple[dict, dict] | None:
    """(output types, output data) remembered for key ``k``, fresh copies of the data."""
    hit = MEMO.get(k)
    if hit is None:
        return None
    return dict(hit[0]), {i: _copy(d) for i, d in hit[1].items()}


def remember(k: tuple, outputs: dict, out_data: dict, schema) -> None:
    """Keep what a rule found for key ``k`` (when its data is of the kinds a key describes)."""
    for d in out_data.values():
        if d is not None and not _describable(d):
            return
    if any(t.__class__ is not TensorType for t in outputs.values()):
        return
    if len(MEMO) >= MAX_ENTRIES:
        MEMO.clear()
    MEMO[k] = (dict(outputs), {i: _copy(d) for i, d in out_data.items()}, schema)


def _copy(d):
    if d is None:
        return None
    if d.__class__ is np.ndarray:
        return d.copy()
    return d.__class__(list(d.dims), d.scalar)
