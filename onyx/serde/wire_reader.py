"""A plain model's IR read straight from its wire bytes, without protobuf.

A session's cold start paid for importing protobuf (its C module, descriptors, the well-known
types its message metaclass imports once per process) and for building onyx.proto's message
classes: several milliseconds, most of a small model's load. Most model files hold nothing but
what this module follows (opsets, a graph of nodes with scalar/list/tensor attributes, raw or
typed numeric tensors, tensor/sequence/map types, metadata, strings written empty): for those
it builds the very IR that ``reader.Reader`` builds from the parsed messages, extras included.
Anything else makes it say "don't know" (``read_model`` returns None) and the caller runs the
protobuf path, which reads it or reports the error as ever:

- bytes that are not exactly well formed (truncated, a bad varint, a wrong wire type, a group,
  a field number it does not model, which protobuf would keep as an unknown field);
- a singular field written twice (protobuf merges or keeps the last one);
- what the Reader keeps in ``extras`` as bytes (residuals, overrides, unfaithful types), an
  attribute's doc string or reference, other oneof members, functions, sparse tensors,
  subgraphs, string tensors, external data, optional and opaque types; and, from model_io (a
  ``limited`` read), a graph of more items than what is left of ITEM_BUDGET;
- names used before (or without) their definition, or defined twice (the Reader settles them
  after the last node).

The field numbers are onyx.proto's (tests/test_wire_reader.py holds them to the schema), and
tests hold the IR built here to the Reader's on every model file of the repository.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from ..ir.attr import Attr, AttrType
from ..ir.dtypes import BY_ENUM, DataType, bit_width
from ..ir.graph import Graph, Model, Node, Value
from ..ir.tensor import Tensor
from ..ir.types import MapType, SequenceType, Shape, TensorType
from .wire import encode_varint

# -- onyx.proto's field numbers (tests/test_wire_reader.py checks them against the schema) ----
# ModelProto
M_IR_VERSION, M_PRODUCER_NAME, M_PRODUCER_VERSION, M_DOMAIN = 1, 2, 3, 4
M_MODEL_VERSION, M_DOC_STRING, M_GRAPH, M_OPSET_IMPORT, M_METADATA_PROPS = 5, 6, 7, 8, 14
# OperatorSetIdProto, StringStringEntryProto
OPSET_DOMAIN, OPSET_VERSION = 1, 2
ENTRY_KEY, ENTRY_VALUE = 1, 2
# GraphProto
G_NODE, G_NAME, G_INITIALIZER, G_DOC_STRING = 1, 2, 5, 10
G_INPUT, G_OUTPUT, G_VALUE_INFO, G_METADATA_PROPS = 11, 12, 13, 16
# NodeProto
N_INPUT, N_OUTPUT, N_NAME, N_OP_TYPE, N_ATTRIBUTE, N_DOC_STRING, N_DOMAIN = 1, 2, 3, 4, 5, 6, 7
N_METADATA_PROPS = 9
# AttributeProto
A_NAME, A_F, A_I, A_S, A_T, A_G, A_FLOATS, A_INTS, A_STRINGS, A_TYPE = 1, 2, 3, 4, 5, 6, 7, 8, 9, 20
# ValueInfoProto, TypeProto, TypeProto.Tensor, TensorShapeProto(.Dimension)
VI_NAME, VI_TYPE, VI_DOC_STRING, VI_METADATA_PROPS = 1, 2, 3, 4
TYPE_TENSOR_TYPE, TYPE_SEQUENCE_TYPE, TYPE_MAP_TYPE = 1, 4, 5
SEQ_ELEM_TYPE = 1
MAP_KEY_TYPE, MAP_VALUE_TYPE = 1, 2
TT_ELEM_TYPE, TT_SHAPE = 1, 2
SHAPE_DIM = 1
DIM_VALUE, DIM_PARAM = 1, 2
# TensorProto
T_DIMS, T_DATA_TYPE, T_NAME, T_RAW_DATA, T_DOC_STRING, T_DATA_LOCATION = 1, 2, 8, 9, 12, 14
T_FLOAT_DATA, T_INT32_DATA, T_INT64_DATA, T_DOUBLE_DATA, T_UINT64_DATA = 4, 5, 7, 10, 11

#: Models bigger than this are left to the protobuf path (a big file is memory-mapped and its
#: big initializers read as views of the map: model_io.MMAP_MIN).
MAX_BYTES = 16 << 20
#: Attribute lists of this many elements or more are held as read-only arrays (ir's
#: Attr.of_array), as the Reader holds them (reader.LONG_LIST, which tests hold equal).
LONG_LIST = 512
#: What the wire path saves is protobuf's import (and its messages' classes, and the Reader's
#: modules), a fixed cost once per process: 7-8 ms (fresh processes, load and graph, medians:
#: tiny_cnn 0.5 ms here against 7.9 by protobuf). Per item of a graph (a node, an initializer,
#: an input, output or value_info, a metadata entry) it costs up to some 3 us more than protobuf's C parse with
#: the Reader (in-process, both warm; less where big raw weights dominate, which protobuf
#: copies twice), and more for nodes of many small attributes (an isolation forest of 2700
#: items: 24 ms more). So a process reads models here until their items add up to this, about
#: the import's worth; a model that would take it past is left to protobuf, whose import then
#: takes every later model too (model_io). ``read_model(data, limited=True)`` counts against
#: it. (The biggest plain zoo models, 1300-1500 items, read 4-7 ms faster cold this way.)
ITEM_BUDGET = 2000
#: A model of at most this many items is read here whatever is left of the budget (its
#: first read costs about what protobuf's does: no import is worth it).
SMALL_ITEMS = 128
#: Once protobuf is imported (its import paid), a model of at most WARM_MAX_ITEMS items and
#: WARM_MAX_INITIALIZERS initializers is still read here: read again, as a serving process
#: creates sessions of its models, it costs less here than protobuf's C parse with the
#: Reader (the memos below hold its nodes, attributes and types; serving zoo, warm reads:
#: 0.6-0.9 of protobuf's time, a transformer's 0.7, a tree ensemble's 0.1-0.35), though its
#: first read costs more (a transformer's: 3.7 ms against 3.1). Not a model of many
#: initializers: a quantized CNN's scales and zero points, each read here every time, cost
#: more than protobuf's (1.02-1.07 of its time); nor a graph of thousands of nodes.
WARM_MAX_ITEMS = 1024
WARM_MAX_INITIALIZERS = 64
#: What is left of ITEM_BUDGET in this process.
items_left = ITEM_BUDGET

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
#: model_io._EXTERNAL_MARK: TensorProto.data_location (14) = EXTERNAL (1), as encoded.
_EXTERNAL_MARK = b"\x70\x01"
_U64 = 1 << 64
_I64_MIN = 1 << 63
_A = AttrType
#: Attribute type -> the field holding its value (the types read here).
ATTR_VALUE = {
    int(_A.FLOAT): A_F,
    int(_A.INT): A_I,
    int(_A.STRING): A_S,
    int(_A.TENSOR): A_T,
    int(_A.GRAPH): A_G,
    int(_A.FLOATS): A_FLOATS,
    int(_A.INTS): A_INTS,
    int(_A.STRINGS): A_STRINGS,
}
_ATTR_KIND = {int(k): k for k in (_A.FLOAT, _A.INT, _A.STRING, _A.TENSOR, _A.GRAPH)}
_ATTR_KIND.update({int(k): k for k in (_A.FLOATS, _A.INTS, _A.STRINGS)})
_BY_VALUE = {int(d): d for d in DataType}
#: Bytes per element of the element types a raw initializer is read for (reader's plain case).
_ITEM_BYTES = {
    int(d): bit_width(d) // 8 for d in BY_ENUM if bit_width(d) % 8 == 0 and d != DataType.STRING
}


class _Decline(Exception):
    """What the bytes hold is not followed here: the protobuf path reads them."""


def read_model(
    data,
    limited: bool = False,
    max_items: int | None = None,
    max_initializers: int | None = None,
) -> Model | None:
    """The IR of a plain model's bytes, as ``Reader`` builds it from the parsed messages, or
    None (don't know: the caller runs the protobuf path). ``max_items``: a graph of more
    items declines; ``limited``: one of more than ``items_left`` too, unless it has at most
    ``max_items``, and one read takes its items off it (ITEM_BUDGET); ``max_initializers``:
    a main graph of more initializers declines."""
    global items_left
    if not isinstance(data, bytes) or len(data) > MAX_BYTES:
        return None
    limit = max(items_left, max_items or 0) if limited else max_items
    reading = _Model(data, limit, weigh_strings=limited or max_items is None)
    reading.max_initializers = max_initializers
    try:
        model = reading.model()
    except _Decline:
        return None
    if limited:
        items_left = max(items_left - reading.items, 0)
    return model


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while pos < end:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >= _U64:  # (more than 64 bits)
                raise _Decline
            return result, pos
        shift += 7
        if shift >= 70:
            raise _Decline
    raise _Decline  # truncated


def _fields(buf: bytes, pos: int, end: int) -> list[tuple[int, int, int, int]]:
    """[(field, wire type, a, b)]: a varint's value in a, a LEN field's payload buf[a:b], a
    fixed field's bytes buf[a:b]; groups, field 0 and anything malformed decline."""
    out = []
    append = out.append
    while pos < end:
        key = buf[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(buf, pos, end)
        field, wt = key >> 3, key & 7
        if field == 0:
            raise _Decline
        if wt == _LEN:
            n = buf[pos] if pos < end else 0x80
            if n < 0x80:
                pos += 1
            else:
                n, pos = _varint(buf, pos, end)
            a, pos = pos, pos + n
            if pos > end:
                raise _Decline
            append((field, wt, a, pos))
        elif wt == _VARINT:
            v = buf[pos] if pos < end else 0x80
            if v < 0x80:
                pos += 1
            else:
                v, pos = _varint(buf, pos, end)
            append((field, wt, v, pos))
        elif wt == _I32 or wt == _I64:
            a, pos = pos, pos + (4 if wt == _I32 else 8)
            if pos > end:
                raise _Decline
            append((field, wt, a, pos))
        else:
            raise _Decline
    return out


def _one_field(buf: bytes, pos: int, end: int) -> tuple[int, int, int, int, int]:
    """(field, wire type, a, b, position after it) of the field at ``pos``, as _fields
    gives them."""
    key = buf[pos]
    if key < 0x80:
        pos += 1
    else:
        key, pos = _varint(buf, pos, end)
    field, wt = key >> 3, key & 7
    if field == 0:
        raise _Decline
    if wt == _VARINT:
        v, pos = _varint(buf, pos, end)
        return field, wt, v, pos, pos
    if wt == _LEN:
        n, pos = _varint(buf, pos, end)
        a, pos = pos, pos + n
    elif wt == _I32 or wt == _I64:
        a, pos = pos, pos + (4 if wt == _I32 else 8)
    else:
        raise _Decline
    if pos > end:
        raise _Decline
    return field, wt, a, pos, pos


def _packed_varints(raw: bytes) -> np.ndarray:
    """The varints of a packed field as uint64, decoded with numpy (a quantized model's zero
    points, an index tensor: element by element in Python they cost 1 us each), decoded once
    per process (_VARINT_RUNS: a model read again copies its values, a k-NN's indices,
    instead of a dozen numpy calls over them, some 10 us however short the run)."""
    global _varint_run_bytes
    known = _VARINT_RUNS.get(raw)
    if known is None:
        known = _decode_packed_varints(raw)
        cost = len(raw) + known.nbytes
        if _varint_run_bytes + cost > VARINT_MEMO_BYTES:
            _VARINT_RUNS.clear()
            _varint_run_bytes = 0
        _VARINT_RUNS[raw] = known
        _varint_run_bytes += cost
    return known.copy()  # (the memo's own is never handed out: the caller's is writeable)


#: Packed varint runs' bytes -> their uint64 values (_packed_varints), while they and their
#: values add up to VARINT_MEMO_BYTES (cleared when full).
_VARINT_RUNS: dict[bytes, np.ndarray] = {}
VARINT_MEMO_BYTES = 16 << 20
_varint_run_bytes = 0


def _decode_packed_varints(raw: bytes) -> np.ndarray:
    arr = np.frombuffer(raw, np.uint8)
    last = arr < 0x80
    if not arr.size or last.all():
        return arr.astype(np.uint64)
    if not last[-1]:
        raise _Decline  # (truncated)
    ends = np.flatnonzero(last)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    return _varints_at(arr, starts, ends)


def _varints_at(arr: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The uint64 values of the varints spanning bytes starts[i]..ends[i] of ``arr``."""
    lengths = ends - starts + 1
    longest = int(lengths.max())
    if longest > 10 or (longest == 10 and (arr[starts[lengths == 10] + 9] > 1).any()):
        raise _Decline  # (more than 64 bits)
    out = np.zeros(len(ends), np.uint64)
    for k in range(longest):
        has = lengths > k
        out[has] |= (arr[starts[has] + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
    return out


def _byte_varints(buf: bytes, pos: int, end: int) -> tuple[np.ndarray | None, int]:
    """(uint64 values, position after them) of the run of unpacked one-byte ints (a tag byte
    and a value under 128, a tree's ids and features) starting at ``pos``, found with bytes'
    C code; (None, pos) where the first value takes more bytes."""
    run = buf[pos:end]
    tags = run[0::2]
    k = len(tags) - len(tags.lstrip(_INT_ITEM_BYTE))
    values = run[1 : 2 * k : 2]
    if not values.isascii():  # (the pairs before the first longer value only)
        k = next(i for i, v in enumerate(values) if v >= 0x80)
        values = values[:k]
    if len(values) < k:
        k = len(values)  # (a tag at the very end: truncated, left to the next step)
    if k == 0:
        return None, pos
    return np.frombuffer(values, np.uint8).astype(np.uint64), pos + 2 * k


def _unpacked_varints(buf: bytes, pos: int, end: int, tag: int) -> tuple[np.ndarray, int]:
    """(uint64 values, position after them) of the run of unpacked varint fields of one-byte
    ``tag`` starting at ``pos``: onnx.proto2's layout of an attribute's ints (a tree
    ensemble's ids, 10**4 of them), each a tag byte and a varint, found at once: every byte
    under 0x80 ends a token, and the run lasts while each tag is ``tag`` right after the
    previous value's last byte."""
    region = np.frombuffer(buf, np.uint8, end - pos, pos)
    ends = np.flatnonzero(region < 0x80)
    tags, lasts = ends[0::2], ends[1::2]
    m = len(lasts)
    tags = tags[:m]
    ok = region[tags] == tag
    ok[1:] &= tags[1:] == lasts[:-1] + 1
    k = m if ok.all() else int(ok.argmin())
    if k == 0:
        raise _Decline  # (a truncated value)
    values = _varints_at(region, tags[:k] + 1, lasts[:k])
    return values, pos + int(lasts[k - 1]) + 1


def _aligned_bytes(buf: bytes, a: int, b: int) -> memoryview:
    """A read-only copy of buf[a:b] starting on a multiple of ALIGNMENT bytes."""
    n = b - a
    block = np.empty(n + ALIGNMENT, np.uint8)
    start = -block.ctypes.data % ALIGNMENT
    out = block[start : start + n]
    out[:] = np.frombuffer(buf, np.uint8, n, a)
    out.flags.writeable = False
    return memoryview(out)


def _signed(v: int) -> int:
    """An int64 field's value from its varint."""
    return v - _U64 if v >= _I64_MIN else v


def _int32(v: int) -> int:
    """An int32 field's value; a varint protobuf would truncate declines."""
    if v >= _I64_MIN:
        v -= _U64
    if not -(1 << 31) <= v < 1 << 31:
        raise _Decline
    return v


#: A typed float field of at most this many elements reaches the Reader's numpy as a list of
#: Python floats, a longer one as the field itself (tensors.SHORT_TYPED, which tests hold
#: equal): the two differ on a signaling NaN, which only the list makes quiet.
SHORT_TYPED = 32
#: Raw tensors of at least this many bytes are copied from the file to a buffer starting
#: on a cache line of ALIGNMENT bytes (read-only; the tensor's raw bytes are a memoryview
#: of it, as proto_load's big ones are views of the file): a plan copies a weight of this
#: size that does not start on one (runtime/values.ALIGN_MIN_BYTES and ALIGNMENT, which
#: tests hold equal), and a bytes copy almost never does, so every weight was copied twice.
ALIGNED_MIN_BYTES = 4096
ALIGNMENT = 64
#: Attributes of at most this many bytes are read field by field; bigger ones find their
#: lists' runs with numpy, whose fixed cost (some 10 us) a Python loop over a list's elements
#: (0.3 us each) passes at a few dozen.
SMALL_ATTRIBUTE = 64

#: Types read (TypeProto bytes -> type), shared by every read in the process as the Reader's
#: table is (reader._TYPES, which holds its own form of them); and initializers' tensor types
#: ((element type, dims) -> type), ONE table for both readers (reader.py uses this one), so an
#: initializer's type is the same object whichever path read it: types are immutable, and the
#: checker's and inference's memos key on them. Cleared when a read starts with
#: MEMO_MAX_ENTRIES in one.
_TYPES: dict[bytes, TensorType] = {}
TENSOR_TYPES: dict[tuple, TensorType] = {}
#: Attribute bytes -> (name, type, value; a list as a tuple) of the attributes read, but
#: tensors: a CNN's convs repeat a few kernel_shape / strides / pads messages, and a model
#: created again repeats all of them (as the Reader's reader.PLAIN_ATTRS).
_ATTRS: dict[bytes, tuple] = {}
#: NodeProto bytes -> its fields (_Model.node_fields): a model created again in the process
#: decodes none of its nodes (the Reader's protobuf parse is C code: this keeps up with it).
_NODES: dict[bytes, tuple] = {}
#: NodeProto bytes -> its attributes' (name, type, value) as _ATTRS keeps them, and how
#: each Attr gets a value of its own (0: as it is, _AS_LIST, _AS_TENSOR), for a node whose
#: attributes are all plain: a node read again makes its Attrs straight from them.
_NODE_ATTRS: dict[bytes, tuple] = {}
#: ValueInfoProto bytes -> what _Model.value_info makes of it (those without metadata).
_VALUE_INFOS: dict[bytes, tuple] = {}
MEMO_MAX_NODE_BYTES = 1024
MEMO_MAX_ENTRIES = 4096
MEMO_MAX_BYTES = 256
#: Bigger attributes' bytes -> (name, type, value, whether the value is the read-only array
#: of Attr.of_array) (_Model.big_attribute): attributes of at most BIG_ATTR_MAX_BYTES, while
#: their bytes and arrays add up to BIG_ATTR_MEMO_BYTES (cleared when full).
_BIG_ATTRS: dict[bytes, tuple] = {}
BIG_ATTR_MAX_BYTES = 4 << 20
BIG_ATTR_MEMO_BYTES = 32 << 20
_big_attr_bytes = 0


class _Model:
    """One file's decoding."""

    def __init__(self, buf: bytes, max_items: int | None = None, weigh_strings: bool = True):
        self.buf = buf
        self.max_items = max_items
        #: Whether a long list of strings counts as items (a quarter of one a string): the
        #: budget's weighing of the import (ITEM_BUDGET); not WARM_MAX_ITEMS's of the graph,
        #: which a tree ensemble's labels, memoized once read (_BIG_ATTRS), would pass after
        #: its other attributes were decoded, at every read.
        self.weigh_strings = weigh_strings
        #: A main graph of more initializers declines (None: no bound).
        self.max_initializers: int | None = None
        self.items = 0
        #: Whether the node being read holds a subgraph (a _Pending attribute).
        self.pending = False
        for table in (_TYPES, TENSOR_TYPES):  # (the others: cleared when full)
            if len(table) >= MEMO_MAX_ENTRIES:
                table.clear()

    def text(self, a: int, b: int) -> str:
        try:
            return self.buf[a:b].decode("utf-8")
        except UnicodeDecodeError:
            raise _Decline from None

    def singular(self, fields, allowed: dict) -> dict:
        """Field number -> (a, b) of a message whose fields are all singular, each of the
        wire type ``allowed`` gives it, and written once."""
        got = {}
        for field, wt, a, b in fields:
            if allowed.get(field) != wt or field in got:
                raise _Decline
            got[field] = (a, b)
        return got

    # -- model ---------------------------------------------------------------------------------
    def model(self) -> Model:
        buf = self.buf
        m = Model(None)
        opsets, opset_bytes, props, prop_bytes = {}, [], {}, []
        seen, graph, present = set(), None, set()
        strings = {M_PRODUCER_NAME: "", M_PRODUCER_VERSION: "", M_DOMAIN: "", M_DOC_STRING: ""}
        ints = {M_IR_VERSION: 0, M_MODEL_VERSION: 0}
        for field, wt, a, b in _fields(buf, 0, len(buf)):
            if field == M_OPSET_IMPORT and wt == _LEN:
                domain, version, raw = self.opset(a, b)
                opsets[domain] = version
                opset_bytes.append(raw)
                continue
            if field == M_METADATA_PROPS and wt == _LEN:
                key, value, raw = self.entry(a, b)
                props[key] = value
                prop_bytes.append(raw)
                continue
            if field in seen:
                raise _Decline
            seen.add(field)
            if field in strings and wt == _LEN:
                strings[field] = value = self.text(a, b)
            elif field in ints and wt == _VARINT:
                ints[field] = value = _signed(a)
            elif field == M_GRAPH and wt == _LEN:
                graph, value = (a, b), True
            else:
                raise _Decline
            if not value:  # (written with its default value: kept in extras)
                present.add(field)
        if graph is None:
            raise _Decline
        m.opset_imports = opsets
        m.ir_version, m.model_version = ints[M_IR_VERSION], ints[M_MODEL_VERSION]
        m.producer_name = strings[M_PRODUCER_NAME]
        m.producer_version = strings[M_PRODUCER_VERSION]
        m.domain, m.doc_string = strings[M_DOMAIN], strings[M_DOC_STRING]
        extras = {"opsets": opset_bytes}
        if prop_bytes:
            m.metadata_props = props
            extras["props"] = prop_bytes
        written = tuple(name for f, name in _MODEL_PRESENCE if f in present)
        if written:
            extras["present"] = written
        m.extras = extras
        m.set_graph_source(_Built(self.graph(*graph), memoryview(buf)[graph[0] : graph[1]]))
        return m

    def opset(self, a: int, b: int) -> tuple[str, int, bytes]:
        """(domain, version, the message as protobuf serializes it)."""
        got = self.singular(_fields(self.buf, a, b), {OPSET_DOMAIN: _LEN, OPSET_VERSION: _VARINT})
        raw = b""
        domain = version = None
        if OPSET_DOMAIN in got:
            domain = self.text(*got[OPSET_DOMAIN])
            encoded = domain.encode()
            raw += b"\x0a" + encode_varint(len(encoded)) + encoded
        if OPSET_VERSION in got:
            version = _signed(got[OPSET_VERSION][0])
            raw += b"\x10" + encode_varint(version)
        return domain or "", version or 0, raw

    def entry(self, a: int, b: int) -> tuple[str, str, bytes]:
        """A StringStringEntryProto: (key, value, the message as protobuf serializes it)."""
        buf = self.buf
        if (
            b - a >= 4 and buf[a] == _TAG_KEY and buf[a + 1] < 0x80
        ):  # (as protobuf writes it: those bytes)
            k = a + 2 + buf[a + 1]
            if k + 2 <= b and buf[k] == _TAG_VALUE and k + 2 + buf[k + 1] == b:
                return self.text(a + 2, k), self.text(k + 2, b), buf[a:b]
        got = self.singular(_fields(self.buf, a, b), {ENTRY_KEY: _LEN, ENTRY_VALUE: _LEN})
        raw, texts = b"", []
        for field, tag in ((ENTRY_KEY, b"\x0a"), (ENTRY_VALUE, b"\x12")):
            span = got.get(field)
            texts.append(self.text(*span) if span else "")
            if span:
                raw += tag + encode_varint(span[1] - span[0]) + self.buf[span[0] : span[1]]
        return texts[0], texts[1], raw

    # -- graph ---------------------------------------------------------------------------------
    def graph(self, start: int, end: int, outer: tuple = ()) -> Graph:
        """A GraphProto's Graph; ``outer``: the enclosing graphs' scopes, outermost first (a
        subgraph's nodes read their names, as the Reader's do)."""
        nodes, inits, inputs, outputs, infos, props = [], [], [], [], [], []
        lists = {_TAG_NODE: nodes, _TAG_INITIALIZER: inits, _TAG_INPUT: inputs}
        lists.update({_TAG_OUTPUT: outputs, _TAG_VALUE_INFO: infos, _TAG_PROPS: props})
        name = doc = None
        buf, pos = self.buf, start
        # (a graph of more items than the budget declines before the rest is scanned)
        left = len(buf) if self.max_items is None else self.max_items - self.items
        while pos < end:  # (every field of a graph is LEN: its spans, by tag)
            key = buf[pos]
            if key < 0x80:
                pos += 1
            else:
                key, pos = _varint(buf, pos, end)
            n = buf[pos] if pos < end else 0x80
            if n < 0x80:
                pos += 1
            elif pos + 1 < end and buf[pos + 1] < 0x80:  # (two bytes: _varint's, inline)
                n = (n & 0x7F) | buf[pos + 1] << 7
                pos += 2
            else:
                n, pos = _varint(buf, pos, end)
            a, pos = pos, pos + n
            if pos > end:
                raise _Decline
            into = lists.get(key)
            if into is not None:
                into.append((a, pos))
                left -= 1
                if left < 0:
                    raise _Decline  # (protobuf's import costs less than reading it here)
            elif key == _TAG_GRAPH_NAME and name is None:
                name = self.text(a, pos)
            elif key == _TAG_GRAPH_DOC and doc is None:
                doc = self.text(a, pos)
            else:
                raise _Decline
        self.items += len(nodes) + len(inits) + len(infos) + len(props) + len(inputs) + len(outputs)
        if not outer and self.max_initializers is not None and len(inits) > self.max_initializers:
            raise _Decline  # (protobuf's reads them faster: WARM_MAX_INITIALIZERS)
        g = Graph(name=name or "")
        scope: dict[str, Value] = {}
        declared: set[int] = set()
        for span in inputs:
            vname, vi = self.value_info(*span)
            v = Value(vname)
            self.declare(v, vi)
            declared.add(id(v))
            scope[vname] = v
            g.inputs.append(v)
        if "" in scope:
            raise _Decline
        bind_initializers(g, scope, (self.tensor(*span, named=True) for span in inits))
        borrowed: set[str] = set()
        later = []
        for span in nodes:
            node = self.node(*span, scope, outer, borrowed)
            g.append(node)
            if self.pending:
                later.append(node)
                self.pending = False
        if later:  # (a subgraph may read any name of this graph: read after its last node)
            self.subgraphs(later, (*outer, scope))
            if not outer:
                uses_in_node_order(g)
        scopes = (*outer, scope)
        for span in outputs:
            g.outputs.append(self.declared(span, scopes, declared))
        for span in infos:
            g.value_info.append(self.declared(span, scopes, declared))
        for v in g.initializers.values():
            if v.type is None:
                t = v.const_value
                key = (t.dtype, t.shape)
                ty = TENSOR_TYPES.get(key)
                if ty is None:
                    ty = TENSOR_TYPES[key] = TensorType(*key)
                v.type = ty
        g.doc_string = doc or ""
        extras = self.props(g, props)
        written = tuple(f for f, text in (("name", name), ("doc_string", doc)) if text == "")
        if written:
            extras["present"] = written
        if extras:
            g.extras = extras
        return g

    def props(self, owner, spans) -> dict:
        """Set ``owner``'s metadata_props from its entries; {"props": their bytes} or {}."""
        if not spans:
            return {}
        entries = [self.entry(a, b) for a, b in spans]
        owner.metadata_props = {key: value for key, value, _ in entries}
        return {"props": [raw for _, _, raw in entries]}

    def subgraphs(self, nodes: list, scopes: tuple) -> None:
        """Read the GRAPH attributes of ``nodes`` (placeholders, _Pending, till now)."""
        for node in nodes:
            node.attributes = {
                key: Attr(a.name, _A.GRAPH, self.graph(*a.span, scopes), "", "")
                if type(a) is _Pending
                else a
                for key, a in node.attributes.items()
            }

    def declared(self, span, scopes: tuple, declared: set) -> Value:
        """The Value a graph output or value_info entry names, declared by it (the Reader's
        _lookup and _declare; an entry that would differ from an earlier one declines)."""
        vname, vi = self.value_info(*span)
        v = _lookup(scopes, vname)
        if v is None:
            v = scopes[-1][vname] = Value(vname)
        if id(v) not in declared and v.type is None and not v.doc_string:
            declared.add(id(v))
            self.declare(v, vi)
        elif vi[0] != v.type or vi[1] != v.doc_string or vi[2]:
            raise _Decline  # (the Reader keeps such an entry as written: extras)
        return v

    def declare(self, v: Value, vi: tuple) -> None:
        ty, doc, props, written = vi
        if ty is not None:
            v.type = ty
        v.doc_string = doc
        extras = self.props(v, props)
        if written:
            extras["present"] = written
        if extras:
            v.extras = extras

    def value_info(self, a: int, b: int) -> tuple[str, tuple]:
        """(name, (type or None, doc_string, metadata entries, fields written empty)) of a
        ValueInfoProto; one without metadata is a function of its bytes (_VALUE_INFOS)."""
        key = self.buf[a:b] if b - a <= MEMO_MAX_NODE_BYTES else None
        known = _VALUE_INFOS.get(key) if key is not None else None
        if known is None:
            known = self.read_value_info(a, b)
            if key is not None and not known[1][2]:
                if len(_VALUE_INFOS) >= MEMO_MAX_ENTRIES:
                    _VALUE_INFOS.clear()
                _VALUE_INFOS[key] = known
        return known

    def read_value_info(self, a: int, b: int) -> tuple[str, tuple]:
        got, props = {}, []
        for field, wt, fa, fb in _fields(self.buf, a, b):
            if field == VI_METADATA_PROPS and wt == _LEN:
                props.append((fa, fb))
            elif _VALUE_INFO.get(field) != wt or field in got:
                raise _Decline
            else:
                got[field] = (fa, fb)
        name = self.text(*got[VI_NAME]) if VI_NAME in got else ""
        doc = self.text(*got[VI_DOC_STRING]) if VI_DOC_STRING in got else ""
        written = tuple(
            f for f, n, text in (("name", VI_NAME, name), ("doc_string", VI_DOC_STRING, doc))
            if n in got and not text
        )  # fmt: skip
        ty = self.type(*got[VI_TYPE]) if VI_TYPE in got else None
        return name, (ty, doc, props, written)

    def type(self, a: int, b: int) -> TensorType:
        """A TypeProto holding a tensor type with an element type and maybe a shape; one
        object per encoding in the process, as the Reader's (its table: _TYPES)."""
        key = self.buf[a:b]
        ty = _TYPES.get(key)
        if ty is None:
            ty = _TYPES[key] = self.read_type(a, b)
        return ty

    def read_type(self, a: int, b: int) -> TensorType:
        got = self.singular(_fields(self.buf, a, b), _TYPE_ONEOF)
        if len(got) != 1:  # (none, or two of the oneof: protobuf keeps the last)
            raise _Decline
        if TYPE_SEQUENCE_TYPE in got:  # (scikit-learn's ZipMap output: a sequence of maps)
            s = self.singular(_fields(self.buf, *got[TYPE_SEQUENCE_TYPE]), {SEQ_ELEM_TYPE: _LEN})
            return SequenceType(self.type(*s[SEQ_ELEM_TYPE]) if s else None)
        if TYPE_MAP_TYPE in got:
            m = self.singular(_fields(self.buf, *got[TYPE_MAP_TYPE]), _MAP)
            key = _BY_VALUE.get(_int32(m[MAP_KEY_TYPE][0])) if MAP_KEY_TYPE in m else None
            if key is None:  # (absent or unknown: the Reader keeps the type's bytes)
                raise _Decline
            return MapType(key, self.type(*m[MAP_VALUE_TYPE]) if MAP_VALUE_TYPE in m else None)
        t = self.singular(_fields(self.buf, *got[TYPE_TENSOR_TYPE]), _TENSOR_TYPE)
        if TT_ELEM_TYPE not in t:
            raise _Decline
        elem = _BY_VALUE.get(_int32(t[TT_ELEM_TYPE][0]))
        if not elem:  # (0: the Reader keeps it in extras; unknown: no type)
            raise _Decline
        shape = self.shape(*t[TT_SHAPE]) if TT_SHAPE in t else None
        return TensorType(elem, shape)

    def shape(self, a: int, b: int) -> Shape:
        dims = []
        for field, wt, da, db in _fields(self.buf, a, b):
            if field != SHAPE_DIM or wt != _LEN:
                raise _Decline
            d = self.singular(_fields(self.buf, da, db), _DIMENSION)
            if len(d) > 1:
                raise _Decline  # (a oneof written twice: protobuf keeps the last)
            if DIM_VALUE in d:
                dims.append(_signed(d[DIM_VALUE][0]))
            elif DIM_PARAM in d:
                dims.append(self.text(*d[DIM_PARAM]))
            else:
                dims.append(None)
        return Shape(tuple(dims), None)

    # -- tensors -------------------------------------------------------------------------------
    def tensor_fields(self, a: int, b: int, named: bool):
        """(dims, element type code, name, raw_data span or None, typed field's entries or
        None, doc_string span or None, whether data_location is written) of a TensorProto of
        dims, an element type, a name (``named``: written and not empty; else absent or not
        empty), raw_data or one typed field, maybe a doc string and a data_location of
        DEFAULT, and nothing else. Its fields' numbers are all under 16 (one-byte tags), read
        here in one loop: a quantized model holds hundreds of such tensors, each a scale or a
        zero point."""
        buf = self.buf
        dims, typed = [], []
        code = name = raw = typed_tag = doc = None
        located = False
        pos = a
        while pos < b:
            key = buf[pos]
            wt = key & 7
            if wt == _LEN:
                n = buf[pos + 1] if pos + 1 < b else 0x80
                if n < 0x80:
                    pos += 2
                elif pos + 2 < b and buf[pos + 2] < 0x80:  # (two bytes: _varint's, inline)
                    n = (n & 0x7F) | buf[pos + 2] << 7
                    pos += 3
                else:
                    n, pos = _varint(buf, pos + 1, b)
                end = pos + n
                if end > b:
                    raise _Decline
                if key == _TAG_NAME and name is None:
                    name = (pos, end)
                elif key == _TAG_RAW and raw is None:
                    raw = (pos, end)
                elif key == _TAG_DIMS_PACKED:
                    dims.extend(self.varints(_LEN, pos, end))
                elif key == _TAG_TENSOR_DOC and doc is None:
                    doc = (pos, end)
                elif key in _TYPED_TAGS and typed_tag in (None, key >> 3):
                    typed_tag = key >> 3
                    typed.append((_LEN, pos, end))
                else:
                    raise _Decline
                pos = end
            elif wt == _VARINT:
                v = buf[pos + 1] if pos + 1 < b else 0x80
                if v < 0x80:
                    pos += 2
                else:
                    v, pos = _varint(buf, pos + 1, b)
                if key == _TAG_DIMS:
                    dims.append(v)
                elif key == _TAG_DATA_TYPE and code is None:
                    code = v
                elif key == _TAG_LOCATION and v == 0 and not located:  # (EXTERNAL: declines)
                    located = True
                elif key in _TYPED_TAGS and typed_tag in (None, key >> 3):
                    typed_tag = key >> 3
                    typed.append((_VARINT, v, pos))
                else:
                    raise _Decline
            elif key in _TYPED_TAGS and typed_tag in (None, key >> 3):  # (fixed32 / fixed64)
                typed_tag = key >> 3
                end = pos + 1 + (4 if wt == _I32 else 8)
                if end > b:
                    raise _Decline
                typed.append((wt, pos + 1, end))
                pos = end
            else:
                raise _Decline
        if code is None or (raw is not None and typed_tag is not None):
            raise _Decline
        if name is not None:
            name = self.text(*name)
            if not name:
                raise _Decline
        elif named:
            raise _Decline
        else:
            name = ""
        if dims:
            dims = tuple(map(_signed, dims))
            if min(dims) < 0:
                raise _Decline
        else:
            dims = ()
        typed = (typed_tag, typed) if typed_tag else None
        return dims, _int32(code), name, raw, typed, doc, located

    def tensor(self, a: int, b: int, named: bool) -> Tensor:
        """An initializer (``named``) or an attribute's tensor: raw bytes of a whole-byte
        element type, or a numeric typed field (the Reader's plain cases, and its general
        path's reading of a doc string or a data_location written as DEFAULT)."""
        dims, code, name, raw, typed, doc, located = self.tensor_fields(a, b, named)
        if raw is not None:
            t = self.raw(dims, code, name, raw)
        elif typed is not None:
            t = self.typed_tensor(dims, code, name, *typed)
        else:  # (no data field: the typed field read empty, right for no elements alone)
            known = _PLAIN_TYPED.get(code)
            if known is None:
                raise _Decline
            t = self.typed_tensor(dims, code, name, known[0], ())
        if doc is not None or located:
            self.tensor_extras(t, doc, located)
        return t

    def tensor_extras(self, t: Tensor, doc, located: bool) -> None:
        """A tensor's doc string, and the fields written empty (tensors.tensor_from_proto's
        "present", in its _PRESENCE order: name and data_type are never empty here)."""
        text = self.text(*doc) if doc is not None else ""
        t.doc_string = text
        present = ("doc_string",) if doc is not None and not text else ()
        if located:
            present += ("data_location",)
        if present:
            extras = t.extras or {}
            extras["present"] = present
            t.extras = extras

    def raw(self, dims: tuple, code: int, name: str, raw) -> Tensor:
        size = _ITEM_BYTES.get(code)
        if size is None:
            raise _Decline
        ra, rb = raw
        if rb - ra != math.prod(dims) * size:
            raise _Decline  # (the general path reports the wrong size)
        if rb - ra >= ALIGNED_MIN_BYTES:  # (a weight: its one copy, on a cache line)
            return Tensor.from_raw(_aligned_bytes(self.buf, ra, rb), _BY_VALUE[code], dims, name)
        return Tensor.from_raw(self.buf[ra:rb], _BY_VALUE[code], dims, name)

    def typed_tensor(self, dims: tuple, code: int, name: str, field: int, entries) -> Tensor:
        """A numeric tensor written one value per element in its typed field: reader's plain
        case (tensors.plain_typed_tensor), its values converted as protobuf and numpy do."""
        known = _PLAIN_TYPED.get(code)
        if known is None or known[0] != field:
            raise _Decline
        _, wire_dtype, field_dtype, element = known
        buf = self.buf
        if field_dtype.kind == "f":  # (fixed width: packed, or one element an entry)
            size = field_dtype.itemsize
            fixed = _I32 if size == 4 else _I64
            if any(wt != _LEN and wt != fixed for wt, _, _ in entries):
                raise _Decline
            raw = buf[entries[0][1] : entries[0][2]] if len(entries) == 1 else self.join(entries)
            if len(raw) % size:
                raise _Decline
            count = len(raw) // size
            if count <= SHORT_TYPED:  # (the Reader's list of Python floats: a float32 value
                # converted to double and back, a signaling NaN made quiet, as struct does)
                arr = np.array(
                    struct.unpack(f"<{count}{'f' if size == 4 else 'd'}", raw), field_dtype
                )
            else:  # (its field read by numpy whole: the bits as they are)
                arr = np.frombuffer(raw, wire_dtype).astype(field_dtype)
        elif all(wt == _LEN for wt, _, _ in entries):  # (packed, as writers write them)
            raw = buf[entries[0][1] : entries[0][2]] if len(entries) == 1 else self.join(entries)
            if raw.isascii():  # (every value one byte, under 128: a zero point, an index)
                arr = np.frombuffer(raw, np.uint8).astype(field_dtype)
            else:
                arr = _packed_varints(raw)
                if field_dtype != np.uint64:
                    arr = arr.view(np.int64)
                    if field_dtype == np.int32:
                        if arr.size and (arr.min() < -(1 << 31) or arr.max() >= 1 << 31):
                            raise _Decline  # (protobuf would truncate them)
                        arr = arr.astype(np.int32)
        else:
            values = [v for wt, a, b in entries for v in self.varints(wt, a, b)]
            if field_dtype == np.int32:
                values = list(map(_int32, values))
            elif field_dtype == np.int64:
                values = list(map(_signed, values))
            arr = np.array(values, dtype=field_dtype)
        if arr.size != math.prod(dims):
            raise _Decline  # (a wrong count: the general path reports it)
        if element is not None:
            arr = arr.astype(element)
        t = Tensor(arr.reshape(dims), name=name, dtype=_BY_VALUE[code])
        t.extras = {"storage": "typed"}
        return t

    def join(self, entries) -> bytes:
        """The payloads of a repeated field's entries, one after the other."""
        buf = self.buf
        return b"".join(buf[a:b] for _, a, b in entries)

    def varints(self, wt: int, a: int, b: int) -> list[int]:
        """A repeated varint field's values (unsigned) from one packed or unpacked entry."""
        if wt == _VARINT:
            return [a]
        if wt != _LEN:
            raise _Decline
        out, pos, buf = [], a, self.buf
        while pos < b:
            v, pos = _varint(buf, pos, b)
            out.append(v)
        return out

    # -- nodes and attributes ------------------------------------------------------------------
    def node(self, a: int, b: int, scope: dict, outer: tuple, borrowed: set) -> Node:
        """A NodeProto's Node, its inputs the Values of ``scope`` (else of the ``outer``
        scopes, innermost first: the name is then ``borrowed``, and a later definition of it
        here, which the Reader would prefer, declines)."""
        key = self.buf[a:b] if b - a <= MEMO_MAX_NODE_BYTES else None
        fields = _NODES.get(key) if key is not None else None
        if fields is None:
            fields = self.node_fields(a, b)
            if key is not None:
                if len(_NODES) >= MEMO_MAX_ENTRIES:
                    _NODES.clear()
                _NODES[key] = fields
        inputs, outputs, op_type, domain, name, texts, attrs, props = fields
        if attrs:
            attrs = [(a + start, a + end) for start, end in attrs]
        if props:
            props = [(a + start, a + end) for start, end in props]
        get = scope.get
        values = [get(n) if n else None for n in inputs]
        if None in values and any(n and v is None for n, v in zip(inputs, values)):
            values = self.borrow(inputs, values, outer, borrowed)
        outs = [Value(n) for n in outputs]
        for n, v in zip(outputs, outs):
            if n:
                if n in scope or n in borrowed:
                    raise _Decline  # (defined again: every use means the last definition)
                scope[n] = v
        node = Node(op_type, values, outs, None, domain, name)
        if texts is not None:
            self.node_texts(node, texts, props)
        elif props:
            node.extras = self.props(node, props)
        if attrs:
            known = _NODE_ATTRS.get(key) if key is not None else None
            if known is not None:  # (every attribute plain: made from the memo's values)
                node.attributes = made = {}
                for name, kind, value, copy in known:
                    if copy:
                        value = list(value) if copy == _AS_LIST else Tensor.from_raw(*value)
                    made[name] = Attr(name, kind, value, "", "")
            else:
                node.attributes = {at.name: at for at in map(self.attribute, *zip(*attrs))}
                if key is not None:
                    _keep_node_attrs(key, node.attributes.values())
        return node

    def borrow(self, names, values: list, outer: tuple, borrowed: set) -> list:
        """``values`` with the names this graph does not define (yet) found in the enclosing
        graphs; one defined nowhere (or later: the Reader settles it at the end) declines."""
        out = []
        for n, v in zip(names, values):
            if n and v is None:
                v = _lookup(outer, n)
                if v is None:
                    raise _Decline
                borrowed.add(n)
            out.append(v)
        return out

    def node_fields(self, a: int, b: int) -> tuple:
        """(input names, output names, op_type, domain, name, {field: text} where it has a
        doc string or a text written empty (else None), attribute and metadata spans from
        ``a``) of a NodeProto: a function of its bytes (_NODES)."""
        buf = self.buf
        inputs, outputs, attrs, props = [], [], [], []
        texts = {}
        pos = a
        try:
            while pos < b:  # (its fields, read here: the loop is a model's biggest cost)
                key = buf[pos]
                if key & 7 != _LEN or key >= 0x80:  # (every node field: LEN, number < 16)
                    raise _Decline
                n = buf[pos + 1] if pos + 1 < b else 0x80
                if n < 0x80:
                    pos += 2
                else:
                    n, pos = _varint(buf, pos + 1, b)
                end = pos + n
                if end > b:
                    raise _Decline
                field = key >> 3
                if field == N_INPUT:
                    inputs.append(buf[pos:end].decode())
                elif field == N_OUTPUT:
                    outputs.append(buf[pos:end].decode())
                elif field == N_ATTRIBUTE:
                    attrs.append((pos - a, end - a))
                elif field == N_METADATA_PROPS:
                    props.append((pos - a, end - a))
                elif field in _NODE_TEXTS and field not in texts:
                    texts[field] = buf[pos:end].decode()
                else:
                    raise _Decline
                pos = end
        except UnicodeDecodeError:
            raise _Decline from None
        get = texts.get
        plain = N_DOC_STRING not in texts and all(texts.values())
        return (
            tuple(inputs),
            tuple(outputs),
            get(N_OP_TYPE, ""),
            get(N_DOMAIN, ""),
            get(N_NAME, ""),
            None if plain else _NodeTexts(texts),
            tuple(attrs),
            tuple(props),
        )

    def node_texts(self, node: Node, texts: _NodeTexts, props: list) -> None:
        """A node's doc_string, and its extras: strings written empty, metadata."""
        if texts.doc is not None:
            node.doc_string = texts.doc
        present = texts.present
        extras = {"present": present} if present else {}
        if props:
            extras.update(self.props(node, props))
        if extras:
            node.extras = extras

    def attribute(self, a: int, b: int) -> Attr:
        buf = self.buf
        if b - a > MEMO_MAX_BYTES:
            return self.big_attribute(a, b)
        key = buf[a:b]
        known = _ATTRS.get(key)
        if known is not None:
            return _memo_attr(*known)
        attr = self.read_attribute(a, b)
        entry = _memo_entry(attr)
        if entry is not None:
            if len(_ATTRS) >= MEMO_MAX_ENTRIES:
                _ATTRS.clear()
            _ATTRS[key] = entry
        return attr

    def big_attribute(self, a: int, b: int) -> Attr:
        """An attribute of more than MEMO_MAX_BYTES (a tree ensemble's lists, 10**4 elements
        each), read once per process while _BIG_ATTRS has room: a model created again decodes
        none of them (protobuf's C parse kept up with this module only on such models)."""
        global _big_attr_bytes
        if b - a > BIG_ATTR_MAX_BYTES:
            return self.read_attribute(a, b)
        key = self.buf[a:b]
        known = _BIG_ATTRS.get(key)
        if known is not None:
            name, kind, value, array = known
            if array:  # (read-only: every Attr holding it shares it, as a view of the file)
                return Attr.of_array(name, kind, value)
            return Attr(name, kind, list(value) if type(value) is tuple else value, "", "")
        attr = self.read_attribute(a, b)
        if type(attr) is _Pending or attr.type in (_A.TENSOR, _A.GRAPH):
            return attr
        array = attr.array
        value = array if array is not None else attr.value
        if array is None and type(value) is list:
            value = tuple(value)
        cost = 2 * len(key) + (array.nbytes if array is not None else 0)
        if _big_attr_bytes + cost > BIG_ATTR_MEMO_BYTES:
            _BIG_ATTRS.clear()
            _big_attr_bytes = 0
        _BIG_ATTRS[key] = (attr.name, attr.type, value, array is not None)
        _big_attr_bytes += cost
        return attr

    def read_attribute(self, a: int, b: int) -> Attr:
        buf = self.buf
        small = b - a <= SMALL_ATTRIBUTE  # (a conv's kernel shape: its fields one by one)
        got, lists = self.small_attribute_fields(a, b) if small else self.attribute_fields(a, b)
        if A_TYPE not in got or A_NAME not in got:
            raise _Decline
        code = got[A_TYPE][0]
        kind = _ATTR_KIND.get(code)
        if kind is None:
            raise _Decline
        value_field = ATTR_VALUE[code]
        others = got.keys() - {A_NAME, A_TYPE, value_field}
        if others or lists.keys() - {value_field}:
            raise _Decline  # (another value field: the Reader keeps it in extras)
        name = self.text(*got[A_NAME])
        if kind == _A.GRAPH:
            if value_field not in got or not name:
                raise _Decline
            self.pending = True
            return _Pending(name, got[value_field])
        if kind == _A.TENSOR:
            if value_field not in got:
                raise _Decline
            return Attr(name, kind, self.tensor(*got[value_field], named=False))
        if not name:
            raise _Decline
        if value_field in _LIST_WIRE:
            entries = lists.get(value_field, ())
            value = self.short_list(kind, entries) if small else self.attr_list(kind, entries)
            if type(value) is not list:  # (a long list: its array)
                return Attr.of_array(name, kind, value)
        elif value_field not in got:
            raise _Decline
        else:
            fa, fb = got[value_field]
            if kind == _A.FLOAT:
                value = np.frombuffer(buf, "<f4", 1, fa).tolist()[0]
            elif kind == _A.INT:
                value = _signed(fa)
            else:
                value = decode_text(buf[fa:fb])
        return Attr(name, kind, value, "", "")

    def small_attribute_fields(self, a: int, b: int) -> tuple[dict, dict]:
        """({singular field: (a, b)}, {list field: [(wire type, a, b)]}) of an AttributeProto
        of SMALL_ATTRIBUTE bytes or fewer (no list of LONG_LIST elements fits in it)."""
        got, lists = {}, {}
        for field, wt, fa, fb in _fields(self.buf, a, b):
            if field in _LIST_WIRE:
                lists.setdefault(field, []).append((wt, fa, fb))
            elif _ATTR_SINGULAR.get(field) != wt or field in got:
                raise _Decline
            else:
                got[field] = (fa, fb)
        return got, lists

    def short_list(self, kind: AttrType, entries) -> list:
        """A list attribute's value from its entries (small_attribute_fields)."""
        buf = self.buf
        if kind == _A.STRINGS:
            if any(wt != _LEN for wt, _, _ in entries):
                raise _Decline
            return [decode_text(buf[a:b]) for _, a, b in entries]
        if kind == _A.INTS:
            return [_signed(v) for wt, a, b in entries for v in self.varints(wt, a, b)]
        chunks = []
        for wt, a, b in entries:
            if (wt == _LEN and (b - a) % 4) or wt not in (_LEN, _I32):
                raise _Decline
            chunks.append(buf[a:b])
        return np.frombuffer(b"".join(chunks), "<f4").tolist()

    def attribute_fields(self, a: int, b: int) -> tuple[dict, dict]:
        """({singular field: (a, b)}, {list field: chunks}) of an AttributeProto: a float32
        or uint64 array a chunk, or for strings one list of their (a, b) spans; a run of unpacked
        floats or ints is read at once (a tree ensemble's lists of 10**4)."""
        buf = self.buf
        got, lists = {}, {}
        pos = a
        while pos < b:
            key = buf[pos]
            if key == _TAG_INTS:
                values, pos = _byte_varints(buf, pos, b)
                if values is None:  # (a value of two bytes or more first)
                    values, pos = _unpacked_varints(buf, pos, b, key)
                lists.setdefault(A_INTS, []).append(values)
                continue
            if key == _TAG_FLOAT_ITEM:
                # (bytes' C code finds the run: every fifth byte this tag, from here on)
                tags = buf[pos:b:5]
                k = len(tags) - len(tags.lstrip(_FLOAT_ITEM_BYTE))
                if pos + 5 * k > b:
                    k -= 1
                if k <= 0:
                    raise _Decline  # (truncated)
                run = np.frombuffer(buf, _UNPACKED_FLOAT, k, pos)
                lists.setdefault(A_FLOATS, []).append(np.ascontiguousarray(run["value"]))
                pos += 5 * k
                continue
            if key == _TAG_STRINGS:
                spans = lists.setdefault(A_STRINGS, [])
                while pos < b and buf[pos] == key:
                    n = buf[pos + 1] if pos + 1 < b else 0x80
                    if n < 0x80:
                        start = pos + 2
                    else:
                        n, start = _varint(buf, pos + 1, b)
                    pos = start + n
                    if pos > b:
                        raise _Decline
                    spans.append((start, pos))
                continue
            field, wt, fa, fb, pos = _one_field(buf, pos, b)
            if field == A_FLOATS and wt == _LEN:
                if (fb - fa) % 4:
                    raise _Decline
                floats = np.frombuffer(buf, "<f4", (fb - fa) // 4, fa).copy()  # (aligned)
                lists.setdefault(field, []).append(floats)
            elif field == A_INTS and wt == _LEN:
                lists.setdefault(field, []).append(_packed_varints(buf[fa:fb]))
            elif _ATTR_SINGULAR.get(field) != wt or field in got:
                raise _Decline  # (and any list field in another wire type)
            else:
                got[field] = (fa, fb)
        return got, lists

    def attr_list(self, kind: AttrType, chunks):
        """A list attribute's value: a list, or for LONG_LIST elements or more the read-only
        array the Reader holds (float32, int64, or an object array of the strings' bytes)."""
        buf = self.buf
        if kind == _A.STRINGS:
            spans = chunks  # (one list of spans, however the entries came)
            if len(spans) >= LONG_LIST:
                if self.weigh_strings:
                    self.items += len(spans) // 4  # (a Python loop per string: ITEM_BUDGET)
                    if self.max_items is not None and self.items > self.max_items:
                        raise _Decline
                arr = np.array([buf[a:b] for a, b in spans], dtype=object)
                arr.flags.writeable = False
                return arr
            strings = [buf[a:b] for a, b in spans]
            try:  # (one C call for the list, as the Reader's)
                return list(map(bytes.decode, strings))
            except UnicodeDecodeError:
                return list(map(decode_text, strings))
        if not chunks:
            return []
        arr = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
        if kind == _A.INTS:
            arr = arr.view(np.int64)
        if len(arr) >= LONG_LIST:
            arr.flags.writeable = False
            return arr
        return arr.tolist()


class _NodeTexts:
    """A node's doc string (None: not written) and its texts written empty, in the Reader's
    order (_NODE_PRESENCE): a function of the node's bytes (_NODES; skl2onnx writes every
    node's domain, empty ones too)."""

    __slots__ = ("doc", "present")

    def __init__(self, texts: dict):
        self.doc = texts.get(N_DOC_STRING)
        self.present = tuple(f for n, f in _NODE_TEXT_NAMES if n in texts and not texts[n])


def _memo_attr(name: str, kind: AttrType, value) -> Attr:
    """An Attr of its own from a memo's (name, type, value) (_ATTRS, _NODE_ATTRS)."""
    if type(value) is _RawTensor:  # (a Constant's: a tensor of its own, same bytes)
        return Attr(name, kind, Tensor.from_raw(*value), "", "")
    return Attr(name, kind, list(value) if type(value) is tuple else value, "", "")


def _memo_entry(attr: Attr) -> tuple | None:
    """(name, type, value) of a plain attribute as the memos keep it (a list as a tuple, a
    raw tensor as _RawTensor), or None (a subgraph, a long list's array, other tensors)."""
    if type(attr) is not Attr:
        return None
    value = attr.value
    if attr.type == _A.TENSOR:
        value = _RawTensor.of(value)
        if value is None:
            return None
    elif attr.type == _A.GRAPH:
        return None
    elif type(value) is list:
        value = tuple(value)
    return attr.name, attr.type, value


_AS_LIST, _AS_TENSOR = 1, 2


def _keep_node_attrs(key: bytes, attrs) -> None:
    """Keep a node's attributes in _NODE_ATTRS when every one is plain."""
    entries = []
    for attr in attrs:
        entry = _memo_entry(attr)
        if entry is None:
            return
        value = entry[2]  # (and how a node's Attr gets its own: _Model.node)
        copy = _AS_LIST if type(value) is tuple else _AS_TENSOR if type(value) is _RawTensor else 0
        entries.append((*entry, copy))
    if len(_NODE_ATTRS) >= MEMO_MAX_ENTRIES:
        _NODE_ATTRS.clear()
    _NODE_ATTRS[key] = tuple(entries)


class _RawTensor(tuple):
    """A small TENSOR attribute's value as _ATTRS keeps it: Tensor.from_raw's arguments
    (raw bytes, element type, dims, name), for a tensor of raw bytes and nothing else."""

    __slots__ = ()

    @classmethod
    def of(cls, t: Tensor) -> _RawTensor | None:
        if not t.has_raw_bytes() or t.extras is not None or t.doc_string or t.metadata_props:
            return None
        raw = t.raw_bytes()
        if type(raw) is not bytes or t.external is not None:
            return None
        return cls((raw, t.dtype, t.shape, t.name))


class _Pending:
    """A GRAPH attribute of a node, read once its graph's last node is read (_Model.subgraphs)."""

    __slots__ = ("name", "span")

    def __init__(self, name: str, span: tuple[int, int]):
        self.name, self.span = name, span


def _lookup(scopes: tuple, name: str) -> Value | None:
    """The Value ``name`` means in the innermost of ``scopes`` that defines it, or None."""
    for scope in reversed(scopes):
        v = scope.get(name)
        if v is not None:
            return v
    return None


def bind_initializers(g: Graph, scope: dict, tensors) -> None:
    """g's initializers, read after its inputs (``scope``: the names in scope so far): one
    named as an input is that input's constant value (IR < 4's defaults), any other a Value of
    its own, in scope unless a name is there already (both readers)."""
    input_names = set(scope)
    named = g.initializers
    for t in tensors:
        name = t.name
        if name in input_names:
            v = scope[name]
            v.const_value = t
        else:
            v = Value(name, None, t)
            scope.setdefault(name, v)
        named[name] = v


def uses_in_node_order(g: Graph) -> None:
    """Register every use again, node by node and each node's subgraphs after its own inputs:
    a Value lists its uses in that order, as if every name had been settled as it was read
    (both readers, for a graph that holds subgraphs)."""
    for node in g:
        node.set_inputs(node.inputs)
        for sub in node.subgraphs():
            uses_in_node_order(sub)


class _Built:
    """The graph read, handed over on its first access as proto_load's graph source hands
    its own: saving a model nobody edited writes its graph's bytes back as they came."""

    __slots__ = ("graph", "raw")

    def __init__(self, graph: Graph, raw: memoryview):
        self.graph, self.raw = graph, raw

    def __call__(self) -> Graph:
        return self.graph

    def might_have_external(self) -> bool:
        """proto_load's answer for the same bytes (which decides how saving writes them):
        whether they hold a tensor's ``data_location: EXTERNAL`` encoding anywhere."""
        return _EXTERNAL_MARK in bytes(self.raw)


def decode_text(s: bytes):
    """A string field's text, or its bytes where they are not UTF-8 (both readers keep them:
    writing them back gives the same message)."""
    try:
        return s.decode("utf-8")
    except UnicodeDecodeError:
        return s


_TENSOR_TYPE = {TT_ELEM_TYPE: _VARINT, TT_SHAPE: _LEN}
_TYPE_ONEOF = {TYPE_TENSOR_TYPE: _LEN, TYPE_SEQUENCE_TYPE: _LEN, TYPE_MAP_TYPE: _LEN}
_MAP = {MAP_KEY_TYPE: _VARINT, MAP_VALUE_TYPE: _LEN}
_VALUE_INFO = {VI_NAME: _LEN, VI_TYPE: _LEN, VI_DOC_STRING: _LEN}
#: A model's optional scalars in the order the Reader lists those written empty.
_MODEL_PRESENCE = (
    (M_IR_VERSION, "ir_version"),
    (M_PRODUCER_NAME, "producer_name"),
    (M_PRODUCER_VERSION, "producer_version"),
    (M_DOMAIN, "domain"),
    (M_MODEL_VERSION, "model_version"),
    (M_DOC_STRING, "doc_string"),
)
_DIMENSION = {DIM_VALUE: _VARINT, DIM_PARAM: _LEN}
#: GraphProto's tags (every field LEN).
_TAG_NODE, _TAG_GRAPH_NAME, _TAG_INITIALIZER = (
    G_NODE << 3 | _LEN,
    G_NAME << 3 | _LEN,
    G_INITIALIZER << 3 | _LEN,
)
_TAG_GRAPH_DOC, _TAG_INPUT, _TAG_OUTPUT = (
    G_DOC_STRING << 3 | _LEN,
    G_INPUT << 3 | _LEN,
    G_OUTPUT << 3 | _LEN,
)
_TAG_VALUE_INFO, _TAG_PROPS = G_VALUE_INFO << 3 | _LEN, G_METADATA_PROPS << 3 | _LEN
_TAG_KEY, _TAG_VALUE = ENTRY_KEY << 3 | _LEN, ENTRY_VALUE << 3 | _LEN
#: TensorProto's one-byte tags (field number << 3 | wire type) read by _Model.tensor_fields.
_TAG_DIMS, _TAG_DIMS_PACKED = T_DIMS << 3 | _VARINT, T_DIMS << 3 | _LEN
_TAG_TENSOR_DOC, _TAG_LOCATION = T_DOC_STRING << 3 | _LEN, T_DATA_LOCATION << 3 | _VARINT
_TAG_DATA_TYPE, _TAG_NAME, _TAG_RAW = (
    T_DATA_TYPE << 3 | _VARINT,
    T_NAME << 3 | _LEN,
    T_RAW_DATA << 3 | _LEN,
)
_TYPED_WIRE = frozenset({T_FLOAT_DATA, T_INT32_DATA, T_INT64_DATA, T_DOUBLE_DATA, T_UINT64_DATA})
#: Their tags in every wire type but groups' (the field's type checks the wire type later).
_TYPED_TAGS = frozenset(f << 3 | wt for f in _TYPED_WIRE for wt in (_VARINT, _I64, _LEN, _I32))
_D = DataType
#: Element type -> (its typed field, the field's wire dtype, the field's numpy dtype, the
#: element type's numpy dtype where it differs, else None): tensors._PLAIN_TYPED's types.
_PLAIN_TYPED = {
    int(d): (field, np.dtype(wire), np.dtype(wire).newbyteorder("="), element)
    for d, field, wire, element in (
        (_D.FLOAT, T_FLOAT_DATA, "<f4", None),
        (_D.DOUBLE, T_DOUBLE_DATA, "<f8", None),
        (_D.INT64, T_INT64_DATA, "<i8", None),
        (_D.INT32, T_INT32_DATA, "<i4", None),
        (_D.INT16, T_INT32_DATA, "<i4", np.int16),
        (_D.INT8, T_INT32_DATA, "<i4", np.int8),
        (_D.UINT64, T_UINT64_DATA, "<u8", None),
        (_D.UINT32, T_UINT64_DATA, "<u8", np.uint32),
        (_D.UINT16, T_INT32_DATA, "<i4", np.uint16),
        (_D.UINT8, T_INT32_DATA, "<i4", np.uint8),
        (_D.BOOL, T_INT32_DATA, "<i4", np.bool_),
    )
}
_NODE_TEXTS = frozenset({N_NAME, N_OP_TYPE, N_DOMAIN, N_DOC_STRING})
#: A node's optional strings in the order the Reader lists those written empty (_NODE_PRESENCE).
_NODE_TEXT_NAMES = (
    (N_NAME, "name"),
    (N_OP_TYPE, "op_type"),
    (N_DOMAIN, "domain"),
    (N_DOC_STRING, "doc_string"),
)
_LIST_WIRE = frozenset({A_FLOATS, A_INTS, A_STRINGS})
#: The tags of an attribute's list elements as onnx.proto2 writes them, unpacked.
_TAG_FLOAT_ITEM, _TAG_INTS, _TAG_STRINGS = A_FLOATS << 3 | _I32, A_INTS << 3, A_STRINGS << 3 | _LEN
_UNPACKED_FLOAT = np.dtype([("tag", "u1"), ("value", "<f4")])
_FLOAT_ITEM_BYTE, _INT_ITEM_BYTE = bytes([_TAG_FLOAT_ITEM]), bytes([_TAG_INTS])
_ATTR_SINGULAR = {A_NAME: _LEN, A_TYPE: _VARINT, A_F: _I32, A_I: _VARINT, A_S: _LEN, A_T: _LEN}
_ATTR_SINGULAR[A_G] = _LEN
