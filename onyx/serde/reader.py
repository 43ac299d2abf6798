"""Protobuf messages -> IR.

Names become Value objects: every use of a name refers to the Value that defines it, looked up
through the enclosing scopes for subgraphs; a name defined nowhere becomes a fresh Value with no
producer (the checker reports it). What the IR does not model (unknown fields, fields present
with a default value, repeated entries a dict cannot hold) is kept in the objects' ``extras`` so
that writing them back gives an equal message.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.unknown_fields import UnknownFieldSet

from ..errors import FormatError
from ..ir.attr import Attr, AttrType
from ..ir.dtypes import DataType
from ..ir.graph import Function, Graph, Model, Node, Value
from ..ir.tensor import SparseTensor
from ..ir.types import (
    MapType,
    OpaqueType,
    OptionalType,
    SequenceType,
    Shape,
    SparseTensorType,
    TensorType,
)
from ..proto import AttributeProto, NodeProto
from .fields import set_fields, written_empty
from .tensors import plain_raw_tensor, plain_typed_tensor, tensor_from_proto
from .wire_reader import TENSOR_TYPES, bind_initializers
from .wire_reader import decode_text as _decode
from .wire_reader import uses_in_node_order as _uses_in_node_order

A = AttrType
#: AttributeProto field holding each attribute type's value.
ATTR_FIELD = {
    A.FLOAT: "f",
    A.INT: "i",
    A.STRING: "s",
    A.TENSOR: "t",
    A.GRAPH: "g",
    A.SPARSE_TENSOR: "sparse_tensor",
    A.TYPE_PROTO: "tp",
    A.FLOATS: "floats",
    A.INTS: "ints",
    A.STRINGS: "strings",
    A.TENSORS: "tensors",
    A.GRAPHS: "graphs",
    A.SPARSE_TENSORS: "sparse_tensors",
    A.TYPE_PROTOS: "type_protos",
}
_FIELD_ATTR = {v: k for k, v in ATTR_FIELD.items()}
#: Attribute types read for every attribute, as module constants: reading ``A.X`` goes through
#: the enum class's ``__getattr__`` hook (Python 3.11's EnumType defines one), some 0.25 us a
#: read.
_STRING, _STRINGS, _TENSOR, _FLOATS = A.STRING, A.STRINGS, A.TENSOR, A.FLOATS
_TYPE_PROTO = A.TYPE_PROTO
_SCALARS = (A.FLOAT, A.INT)
_NUMBER_LISTS = (A.FLOATS, A.INTS)
SINGULAR = frozenset({A.FLOAT, A.INT, A.STRING, A.TENSOR, A.GRAPH, A.SPARSE_TENSOR, A.TYPE_PROTO})
_ATTR_BASE = frozenset({"name", "ref_attr_name", "doc_string", "type"})
_FLOATS_FIELD = AttributeProto.DESCRIPTOR.fields_by_name["floats"].number
_INTS_FIELD = AttributeProto.DESCRIPTOR.fields_by_name["ints"].number
_INTS = A.INTS
#: Lists of at least this many elements are read by serde/repeated.py, imported then: a model
#: without such a list (a scikit-learn model's thresholds, support vectors) never loads it.
#: repeated.MIN_ELEMENTS, which tests/test_cold_import.py holds equal to it.
LONG_LIST = 512


def _long_floats(a, values):
    """A long FLOATS attribute's elements as a read-only float32 array, viewing its wire bytes
    (None: a short one, or a layout left to the element-by-element conversion;
    serde/repeated.py). The Attr keeps the array (Attr.of_array): a list is made only if
    someone reads ``value``."""
    if len(values) < LONG_LIST:
        return None
    from . import repeated  # (long lists only: LONG_LIST)

    return repeated.float_array(a, _FLOATS_FIELD, len(values))


def _long_ints(a, values):
    """A long INTS attribute's elements as a read-only int64 array decoded from its wire bytes
    (None: a short one, or a layout left to the message's conversion; serde/repeated.py)."""
    if len(values) < LONG_LIST:
        return None
    from . import repeated  # (long lists only: LONG_LIST)

    return repeated.int_array(a, _INTS_FIELD, len(values))


def _long_strings(values):
    """A long STRINGS attribute's elements as an object array of their bytes, not decoded
    (None: a short one). A tree ensemble's 10**4 node modes took five times as long to decode
    as to slice, and its kernel reads the bytes (Attr.of_array: decoded if ``value`` is read)."""
    if len(values) < LONG_LIST:
        return None
    array = np.array(values[:], dtype=object)
    array.flags.writeable = False
    return array


def _residual(msg, modeled: frozenset) -> bytes | None:
    """The serialized part of ``msg`` outside ``modeled`` fields (unmodeled and unknown ones)."""
    rest = type(msg)()
    rest.CopyFrom(msg)
    for fd, _ in rest.ListFields():
        if fd.name in modeled:
            rest.ClearField(fd.name)
    return rest.SerializeToString() or None


def _present(msg, names) -> tuple[str, ...]:
    """Optional scalar fields explicitly set to their default value."""
    return tuple(f for f in names if not getattr(msg, f) and msg.HasField(f))


#: Serialized attribute -> (name, type, value, doc_string) of the plain small attributes read
#: before, by any reader: a model's convs repeat a few kernel_shape / strides / pads messages,
#: and a model created again in the process repeats all of them; reading one field by field
#: costs several times serializing it. Only scalars, strings and short lists without anything
#: kept in ``extras`` (their value is a function of the bytes alone; lists are kept as tuples
#: and each Attr gets its own list). Cleared when full.
PLAIN_ATTRS: dict[bytes, tuple] = {}
_MEMO_KINDS = frozenset({A.FLOAT, A.INT, A.STRING, A.FLOATS, A.INTS, A.STRINGS})
MEMO_MAX_BYTES = 256
MEMO_MAX_ELEMENTS = 64
_LIST_FIELDS = {A.FLOATS: "floats", A.INTS: "ints", A.STRINGS: "strings"}
MEMO_MAX_ENTRIES = 4096


#: The Readers' tables of types read (Reader._types) and of initializers' tensor types
#: (Reader._tensor_types: the wire path's table, so both paths give an initializer the same
#: type object), shared: a type is a function of its bytes (or its element type and dims)
#: alone. Cleared when a Reader starts with MEMO_MAX_ENTRIES in one.
_TYPES: dict[bytes, tuple] = {}
_TENSOR_TYPES = TENSOR_TYPES


def _small_plain(a) -> bool:
    """Whether an AttributeProto may be a memo entry: of a plain type, and no long list or
    string (counted before serializing: a tree ensemble's lists of thousands, or a long
    string, would be copied for nothing)."""
    kind = a.type
    if kind not in _MEMO_KINDS:
        return False
    if kind == _STRING:
        return len(a.s) <= MEMO_MAX_BYTES
    field = _LIST_FIELDS.get(kind)
    return field is None or len(getattr(a, field)) <= MEMO_MAX_ELEMENTS


_ATTR_FIELD = AttributeProto.DESCRIPTOR.fields_by_name
_ATTR_NAME, _ATTR_T, _ATTR_TYPE = (_ATTR_FIELD[f] for f in ("name", "t", "type"))


def _plain_tensor_attribute(a) -> Attr | None:
    """A TENSOR attribute of a name, a type and a plain raw tensor and nothing else (a
    Constant's value, as exporters write it: a transformer holds a hundred), read without the
    general path's bookkeeping, which it would find nothing for; else None."""
    fields = a.ListFields()  # (in field number order: name 1, t 5, type 20)
    if len(fields) != 3:
        return None
    (f_name, name), (f_t, tp), (f_type, _) = fields
    if f_name is not _ATTR_NAME or f_t is not _ATTR_T or f_type is not _ATTR_TYPE:
        return None
    t = plain_raw_tensor(tp, unnamed=True)
    if t is None or len(UnknownFieldSet(a)):
        return None
    return Attr(name, _TENSOR, t)


def _plain(attr: Attr) -> bool:
    return attr.type in _MEMO_KINDS and attr.extras is None and not attr.ref_attr_name


class Reader:
    """Converts the messages of one file; ``where`` names the file in errors."""

    def __init__(self, where: str = "<bytes>", externals=None):
        self.where = where
        self.externals = externals
        #: TypeProto bytes -> (ir type, faithful): a model's values share a few dozen types,
        #: and reading one field by field costs 15x serializing it (types are immutable, so
        #: the table is the process's: a model created again reads none of its types)
        self._types: dict[bytes, tuple] = _TYPES
        self._tensor_types: dict[tuple, TensorType] = _TENSOR_TYPES
        if len(_TYPES) >= MEMO_MAX_ENTRIES:
            _TYPES.clear()
        if len(_TENSOR_TYPES) >= MEMO_MAX_ENTRIES:
            _TENSOR_TYPES.clear()
        #: Whether some use was settled after the uses of later nodes (see ``_nodes``).
        self._unordered = False

    def fail(self, what: str, message: str):
        raise FormatError(f"{self.where}: {what}: {message}")

    # -- types --------------------------------------------------------------------------------
    def type(self, tp):
        """(ir type or None, faithful): faithful is False when writing it back would differ."""
        key = tp.SerializeToString()
        known = self._types.get(key)
        if known is None:
            known = self._types[key] = self._read_type(tp)
        return known

    def _read_type(self, tp):
        which = tp.WhichOneof("value")
        faithful = not len(UnknownFieldSet(tp))
        den = tp.denotation if tp.HasField("denotation") else None
        if which == "tensor_type" or which == "sparse_tensor_type":
            t = getattr(tp, which)
            shape, ok = self.shape(t) if t.HasField("shape") else (None, True)
            faithful &= ok and not len(UnknownFieldSet(t))
            faithful &= bool(t.elem_type) or not t.HasField("elem_type")
            cls = TensorType if which == "tensor_type" else SparseTensorType
            try:
                return cls(DataType(t.elem_type), shape, den), faithful
            except ValueError:
                return None, False
        if which in ("sequence_type", "optional_type"):
            t = getattr(tp, which)
            elem, ok = self.type(t.elem_type) if t.HasField("elem_type") else (None, True)
            faithful &= ok and not len(UnknownFieldSet(t))
            cls = SequenceType if which == "sequence_type" else OptionalType
            return cls(elem, den), faithful
        if which == "map_type":
            t = tp.map_type
            value, ok = self.type(t.value_type) if t.HasField("value_type") else (None, True)
            faithful &= ok and not len(UnknownFieldSet(t)) and t.HasField("key_type")
            try:
                return MapType(DataType(t.key_type), value, den), faithful
            except ValueError:
                return None, False
        if which == "opaque_type":
            t = tp.opaque_type
            faithful &= not len(UnknownFieldSet(t)) and not _present(t, ("domain", "name"))
            return OpaqueType(t.domain, t.name, den), faithful
        return None, False

    def shape(self, t) -> tuple[Shape, bool]:
        s = t.shape
        faithful = not len(UnknownFieldSet(s))
        dims = []
        dens = []
        for d in s.dim:
            which = d.WhichOneof("value")
            dims.append(d.dim_value if which == "dim_value" else d.dim_param if which else None)
            dens.append(d.denotation if d.HasField("denotation") else None)
            if len(UnknownFieldSet(d)):
                faithful = False
        denotations = tuple(dens) if any(x is not None for x in dens) else None
        return Shape(tuple(dims), denotations), faithful

    def value_info(self, v: Value, vi) -> None:
        """Set a Value's type, doc_string and metadata from its first ValueInfoProto."""
        if type(vi) is _Named:
            return
        extras = {}
        if vi.HasField("type"):
            ty, faithful = self.type(vi.type)
            v.type = ty
            if not faithful:
                extras["type"] = (ty, vi.type.SerializeToString())
        v.doc_string = vi.doc_string
        if vi.metadata_props:
            v.metadata_props = {e.key: e.value for e in vi.metadata_props}
            extras["props"] = [e.SerializeToString() for e in vi.metadata_props]
        present = _present(vi, ("name", "doc_string"))
        if present:
            extras["present"] = present
        if len(UnknownFieldSet(vi)):
            extras["residual"] = _residual(vi, _VI_MODELED)
        if extras:
            v.extras = extras

    # -- tensors and attributes ---------------------------------------------------------------
    def tensor(self, tp, what: str, raw=None):
        try:
            return tensor_from_proto(tp, what, raw=raw, externals=self.externals)
        except FormatError as e:
            msg = str(e)
            raise FormatError(
                msg if msg.startswith(self.where) else f"{self.where}: {msg}"
            ) from None

    def sparse(self, sp, what: str) -> SparseTensor:
        s = SparseTensor(
            self.tensor(sp.values, what + " values"),
            self.tensor(sp.indices, what + " indices"),
            tuple(sp.dims),
        )
        extra = {}
        if len(UnknownFieldSet(sp)):
            extra["residual"] = _residual(sp, frozenset({"values", "indices", "dims"}))
        if not sp.HasField("values") or not sp.HasField("indices"):
            extra["absent"] = tuple(f for f in ("values", "indices") if not sp.HasField(f))
        s.extras = extra or None
        return s

    def attribute(self, a, scopes: list[dict], what: str) -> Attr:
        if a.type == _TENSOR:
            attr = _plain_tensor_attribute(a)
            if attr is not None:
                return attr
        key = a.SerializeToString() if _small_plain(a) else None
        if key is not None and len(key) > MEMO_MAX_BYTES:
            key = None
        known = PLAIN_ATTRS.get(key) if key is not None else None
        if known is not None:
            name, kind, value, doc = known
            return Attr(name, kind, list(value) if type(value) is tuple else value, doc)
        attr = self._attribute(a, scopes, what)
        if key is not None and _plain(attr):
            if len(PLAIN_ATTRS) >= MEMO_MAX_ENTRIES:
                PLAIN_ATTRS.clear()
            value = attr.value
            PLAIN_ATTRS[key] = (
                attr.name,
                attr.type,
                tuple(value) if type(value) is list else value,
                attr.doc_string,
            )
        return attr

    def _attribute(self, a, scopes: list[dict], what: str) -> Attr:
        fields = set_fields(a)
        names = fields.keys()
        kind = fields.get("type", 0)
        absent_type = "type" not in fields
        if absent_type:  # IR < 3 files: the type is whichever value field is set
            kinds = [_FIELD_ATTR[n] for n in names if n in _FIELD_ATTR]
            kind = kinds[0] if len(kinds) == 1 else A.UNDEFINED
        try:
            kind = A(kind)
        except ValueError:
            kind = A.UNDEFINED
        field = ATTR_FIELD.get(kind)
        name = fields.get("name", "")
        ref = fields.get("ref_attr_name", "")
        here = f"{what} attribute {name!r}"
        value = array = None
        if field is not None and not ref or field in names:
            raw = fields[field] if field in names else getattr(a, field)
            array = (
                _long_floats(a, raw)
                if kind == _FLOATS
                else _long_strings(raw)
                if kind == _STRINGS
                else _long_ints(a, raw)
                if kind == _INTS
                else None
            )
            if array is None:
                value = self.attr_value(kind, raw, scopes, here)
        doc = fields.get("doc_string", "")
        if array is None:
            attr = Attr(name, kind, value, doc, ref)
        else:
            attr = Attr.of_array(name, kind, array, doc, ref)
        extras = {}
        modeled = _ATTR_BASE | {field} if field else _ATTR_BASE
        if any(n not in modeled for n in names) or len(UnknownFieldSet(a)):
            extras["residual"] = _residual(a, modeled)
        present = written_empty(fields, _ATTR_PRESENCE)
        if present:
            extras["present"] = present
        if absent_type:
            extras["absent_type"] = True
        if field and kind in SINGULAR and field not in names and not ref:
            extras["absent_value"] = True  # a singular value field that was not written
        if kind == _TYPE_PROTO and value is not None and not self.type(a.tp)[1]:
            extras["tp"] = (value, a.tp.SerializeToString())
        if extras:
            attr.extras = extras
        return attr

    def attr_value(self, kind: A, v, scopes: list[dict], what: str):
        if kind in _SCALARS:
            return v
        if kind == _STRING:
            return _decode(v)
        if kind in _NUMBER_LISTS:
            # (a slice of a repeated field is a list made in one C call: a third faster than
            # list(), which iterates; a tree ensemble holds lists of 10**4 ints)
            return v[:]
        if kind == _STRINGS:
            try:  # (one C call for the whole list: a tree ensemble holds 10**5 node modes)
                return list(map(bytes.decode, v))
            except UnicodeDecodeError:
                return [_decode(s) for s in v]
        if kind == A.TENSOR:
            return self.tensor(v, what)
        if kind == A.TENSORS:
            return [self.tensor(t, f"{what}[{i}]") for i, t in enumerate(v)]
        if kind == A.GRAPH:
            return self.graph(v, scopes, what)
        if kind == A.GRAPHS:
            return [self.graph(g, scopes, f"{what}[{i}]") for i, g in enumerate(v)]
        if kind == A.SPARSE_TENSOR:
            return self.sparse(v, what)
        if kind == A.SPARSE_TENSORS:
            return [self.sparse(s, f"{what}[{i}]") for i, s in enumerate(v)]
        if kind == A.TYPE_PROTO:
            return self.type(v)[0]
        if kind == A.TYPE_PROTOS:
            return [self.type(t)[0] for t in v]
        return None

    # -- graphs -------------------------------------------------------------------------------
    def graph(self, gp, outer: list[dict], what: str = "graph", initializers=None) -> Graph:
        """A Graph from a GraphProto; ``outer`` are the enclosing scopes (innermost last).

        ``initializers``: the initializers as ir.Tensors, already read by the caller (who may
        have taken big tensors out of the message).
        """
        g = Graph(name=gp.name)
        what = f"{what} {gp.name!r}" if gp.name else what
        scope: dict[str, Value] = {}
        scopes = [*outer, scope]
        declared: set[int] = set()
        overrides: list = []

        for vi in gp.input:
            v = Value(vi.name)
            self.value_info(v, vi)
            declared.add(id(v))
            scope[vi.name] = v
            g.inputs.append(v)
        if initializers is None:
            initializers = self.initializers(gp.initializer, what)
        bind_initializers(g, scope, initializers)
        for i, sp in enumerate(gp.sparse_initializer):
            s = self.sparse(sp, f"{what} sparse initializer {i}")
            g.sparse_initializers.append(s)
            if s.name not in scope:
                scope[s.name] = Value(s.name, TensorType(s.dtype, s.dims))

        self._nodes(g, gp.node, scope, scopes, what)

        for i, vi in enumerate(gp.output):
            v = self._lookup(vi.name, scopes)
            self._declare(v, vi, declared, overrides, ("output", i))
            g.outputs.append(v)
        for i, vi in enumerate(gp.value_info):
            v = scope.get(vi.name) or self._lookup(vi.name, scopes)
            self._declare(v, vi, declared, overrides, ("value_info", i))
            g.value_info.append(v)
        tensor_type = self._tensor_type
        for v in g.initializers.values():
            if v.type is None:
                t = v.const_value
                v.type = tensor_type(t.dtype, t.shape)

        if type(gp) is _FunctionBody:
            return g
        g.doc_string = gp.doc_string
        extras = {}
        if gp.metadata_props:
            g.metadata_props = {e.key: e.value for e in gp.metadata_props}
            extras["props"] = [e.SerializeToString() for e in gp.metadata_props]
        present = _present(gp, ("name", "doc_string"))
        if present:
            extras["present"] = present
        if gp.quantization_annotation or len(UnknownFieldSet(gp)):
            extras["residual"] = _residual(gp, _GRAPH_MODELED)
        if overrides:
            extras["overrides"] = {key: (v, v.type, b) for key, v, b in overrides}
        if extras:
            g.extras = extras
        return g

    def _nodes(self, g: Graph, protos, scope: dict, scopes: list[dict], what: str) -> None:
        """Append the nodes of ``protos`` to ``g``.

        A use of a name means the Value its graph defines under that name (the last one, if
        several: the checker reports it), else an enclosing graph's. Nodes are read in one pass,
        each input looked up when its node is read; the rare uses that cannot be settled then
        (a name defined later, or defined again) are settled after the last node, as are the
        attributes (a subgraph may read any name of this graph)."""
        get = scope.get
        append = g.append
        later = []  # (node, [(input index, name)] or None, attribute messages or None)
        redefined = False
        for np_ in protos:
            fields = dict(np_.ListFields())  # descriptor -> value, one call into the message
            names = fields.get(_INPUT)
            unsettled = None
            if names is None:
                inputs = []
            else:
                names = names[:]  # (a slice is a list at once; iterating reads one by one)
                inputs = (
                    list(map(get, names))
                    if "" not in scope
                    else [get(n) if n else None for n in names]
                )
                if None in inputs:  # (an omitted input, '', is None as it should be)
                    unsettled = [(i, n) for i, n in enumerate(names) if n and inputs[i] is None]
            names = fields.get(_OUTPUT)
            outputs = list(map(Value, names[:])) if names is not None else []
            if fields.keys() <= _PLAIN_NODE and not len(UnknownFieldSet(np_)):
                # nothing the IR does not model: the common case
                node = Node(
                    fields.get(_OP_TYPE, ""),
                    inputs,
                    outputs,
                    None,
                    fields.get(_DOMAIN, ""),
                    fields.get(_NAME, ""),
                )
                if _DOC_STRING in fields:
                    node.doc_string = fields[_DOC_STRING]
                if not all(fields.values()):  # (skl2onnx writes every node's domain, "" too)
                    node.extras = {"present": _written_empty_node(fields)}
            else:
                named = {fd.name: value for fd, value in fields.items()}
                node = Node(
                    named.get("op_type", ""),
                    inputs,
                    outputs,
                    None,
                    named.get("domain", ""),
                    named.get("name", ""),
                    named.get("overload", ""),
                )
                self._node_extras(node, np_, named)
            for v in outputs:
                if v.name:
                    if v.name in scope:
                        redefined = True
                    scope[v.name] = v
            attributes = fields.get(_ATTRIBUTE)
            if unsettled or attributes:
                later.append((node, unsettled, attributes))
            append(node)
        if redefined:  # every use means the last definition, even uses before it
            for node in g:
                for i, v in enumerate(node.inputs):
                    if v is not None and get(v.name, v) is not v:
                        node.set_input(i, scope[v.name])
        unordered = redefined
        for node, unsettled, attributes in later:
            if unsettled:
                unordered = True
                for i, name in unsettled:
                    node.set_input(i, get(name) or self._lookup(name, scopes))
            if attributes:
                here = f"{what} node {node.name or node.op_type!r}"
                node.attributes = {a.name: self.attribute(a, scopes, here) for a in attributes}
                unordered = unordered or node.has_subgraphs()
        self._unordered = self._unordered or unordered
        if len(scopes) == 1 and self._unordered:
            _uses_in_node_order(g)
            self._unordered = False

    def initializers(self, protos, what: str) -> list:
        """The tensors of a graph's initializer messages; ``what`` names the graph in errors."""
        out = []
        for tp in protos:
            t = plain_raw_tensor(tp)
            if t is None:
                t = plain_typed_tensor(tp)
            out.append(t if t is not None else self.tensor(tp, f"{what} initializer {tp.name!r}"))
        return out

    def _tensor_type(self, dtype: DataType, shape: tuple) -> TensorType:
        """One (immutable) TensorType per element type and shape: initializers share them."""
        key = (dtype, shape)
        t = self._tensor_types.get(key)
        if t is None:
            t = self._tensor_types[key] = TensorType(dtype, shape)
        return t

    def _lookup(self, name: str, scopes: list[dict]) -> Value:
        for scope in reversed(scopes):
            v = scope.get(name)
            if v is not None:
                return v
        v = Value(name)  # defined nowhere: the checker reports it
        scopes[-1][name] = v
        return v

    def _declare(self, v: Value, vi, declared: set, overrides: list, key) -> None:
        if id(v) not in declared and v.type is None and not v.doc_string:
            declared.add(id(v))
            self.value_info(v, vi)
            return
        if type(vi) is _Named:
            return
        # declared before (or typed by an outer graph): keep this entry as written if it differs
        ty = self.type(vi.type)[0] if vi.HasField("type") else None
        if (
            ty != v.type
            or vi.doc_string != v.doc_string
            or vi.metadata_props
            or (len(UnknownFieldSet(vi)) or (ty is not None and not self.type(vi.type)[1]))
        ):
            overrides.append((key, v, vi.SerializeToString()))

    def _node_extras(self, node: Node, np_, fields: dict) -> None:
        """What a node holds beyond the IR's fields; ``fields``: its set fields by name."""
        extras = None
        doc = fields.get("doc_string", "")
        if doc:
            node.doc_string = doc
        present = written_empty(fields, _NODE_PRESENCE)
        if present:
            extras = {"present": present}
        props = fields.get("metadata_props")
        if props:
            node.metadata_props = {e.key: e.value for e in props}
            extras = extras or {}
            extras["props"] = [e.SerializeToString() for e in props]
        if "device_configurations" in fields or len(UnknownFieldSet(np_)):
            extras = extras or {}
            extras["residual"] = _residual(np_, _NODE_MODELED)
        node.extras = extras

    # -- functions and models -----------------------------------------------------------------
    def function(self, fp) -> Function:
        what = f"function {fp.domain}::{fp.name}"
        g = self.graph(_FunctionBody(fp), [], what)
        f = Function(
            fp.domain,
            fp.name,
            g,
            list(fp.attribute),
            [self.attribute(a, [], what) for a in fp.attribute_proto],
            {o.domain: o.version for o in fp.opset_import},
            fp.overload,
        )
        f.doc_string = fp.doc_string
        extras = {"opsets": [o.SerializeToString() for o in fp.opset_import]}
        if fp.metadata_props:
            f.metadata_props = {e.key: e.value for e in fp.metadata_props}
            extras["props"] = [e.SerializeToString() for e in fp.metadata_props]
        present = _present(fp, ("name", "domain", "overload", "doc_string"))
        if present:
            extras["present"] = present
        if len(UnknownFieldSet(fp)):
            extras["residual"] = _residual(fp, _FUNCTION_MODELED)
        f.extras = extras
        return f

    def model_header(self, mp) -> Model:
        """A Model from every field of ``mp`` but the graph."""
        m = Model(None)
        m.opset_imports = {o.domain: o.version for o in mp.opset_import}
        m.ir_version = mp.ir_version
        m.producer_name = mp.producer_name
        m.producer_version = mp.producer_version
        m.domain = mp.domain
        m.model_version = mp.model_version
        m.doc_string = mp.doc_string
        extras = {"opsets": [o.SerializeToString() for o in mp.opset_import]}
        if mp.metadata_props:
            m.metadata_props = {e.key: e.value for e in mp.metadata_props}
            extras["props"] = [e.SerializeToString() for e in mp.metadata_props]
        for fp in mp.functions:
            f = self.function(fp)
            m.functions[f.key] = f
        present = _present(mp, _MODEL_PRESENCE)
        if present:
            extras["present"] = present
        if mp.training_info or mp.configuration or len(UnknownFieldSet(mp)):
            extras["residual"] = _residual(mp, _MODEL_MODELED)
        m.extras = extras
        return m


class _FunctionBody:
    """A FunctionProto seen as a GraphProto (inputs/outputs are bare names)."""

    def __init__(self, fp):
        self.fp = fp
        self.name = ""
        self.doc_string = ""
        self.node = fp.node
        self.initializer = ()
        self.sparse_initializer = ()
        self.value_info = fp.value_info
        self.metadata_props = ()
        self.quantization_annotation = ()
        self.input = [_Named(n) for n in fp.input]
        self.output = [_Named(n) for n in fp.output]

    def HasField(self, name):  # noqa: N802 - protobuf's spelling
        return False


class _Named:
    """A ValueInfoProto with a name only."""

    def __init__(self, name):
        self.name = name
        self.doc_string = ""
        self.metadata_props = ()

    def HasField(self, name):  # noqa: N802
        return False

    def SerializeToString(self):  # noqa: N802
        return b""


_NODE_FIELD = NodeProto.DESCRIPTOR.fields_by_name
_INPUT, _OUTPUT, _NAME, _OP_TYPE, _ATTRIBUTE, _DOC_STRING, _DOMAIN = (
    _NODE_FIELD[f]
    for f in ("input", "output", "name", "op_type", "attribute", "doc_string", "domain")
)
#: The fields of a node read without the general path's bookkeeping.
_PLAIN_NODE = frozenset({_INPUT, _OUTPUT, _NAME, _OP_TYPE, _ATTRIBUTE, _DOC_STRING, _DOMAIN})
#: Its optional scalars, in _NODE_PRESENCE's order (a repeated field is listed only when it
#: holds something).
_PLAIN_NODE_SCALARS = (_NAME, _OP_TYPE, _DOMAIN, _DOC_STRING)


def _written_empty_node(fields: dict) -> tuple[str, ...]:
    """What ``written_empty(named fields, _NODE_PRESENCE)`` gives for a node of _PLAIN_NODE
    fields, from its fields by descriptor."""
    return tuple(f.name for f in _PLAIN_NODE_SCALARS if f in fields and not fields[f])


_VI_MODELED = frozenset({"name", "type", "doc_string", "metadata_props"})
_GRAPH_MODELED = frozenset(
    {"node", "name", "initializer", "sparse_initializer", "doc_string", "input", "output"}
    | {"value_info", "metadata_props"}
)
_ATTR_PRESENCE = ("name", "doc_string", "ref_attr_name")
_NODE_PRESENCE = ("name", "op_type", "domain", "overload", "doc_string")
_NODE_MODELED = frozenset(
    {"input", "output", "name", "op_type", "domain", "overload", "attribute", "doc_string"}
    | {"metadata_props"}
)
_FUNCTION_MODELED = frozenset(
    {"name", "input", "output", "attribute", "attribute_proto", "node", "doc_string"}
    | {"opset_import", "domain", "overload", "value_info", "metadata_props"}
)
_MODEL_PRESENCE = (
    "ir_version",
    "producer_name",
    "producer_version",
    "domain",
    "model_version",
    "doc_string",
)
_MODEL_MODELED = frozenset(
    {"ir_version", "opset_import", "producer_name", "producer_version", "domain"}
    | {"model_version", "doc_string", "graph", "metadata_props", "functions"}
)
