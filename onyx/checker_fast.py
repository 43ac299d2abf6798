"""A fast proof that a model file is valid, so that ``onyx.check(path)`` of an ordinary model
need not build its IR.

Why it exists: checking a file through the IR means building the whole graph (a Value per name,
a Node per node, a Tensor per initializer) and taking it apart again, which costs several times
what the checker's rules do; onnx.checker, in C++, is far cheaper. This pass reads the parsed
messages directly and proves the common case valid: every name defined once and before its use,
declared types that pass the type rules, initializers of a known element type whose raw bytes
have the right size (the bytes themselves never read), and every node passing the checker's own
node rules, run on a stand-in IR node once per distinct signature (op, domain, input and output
types, attribute bytes): a model repeats a few kinds of node thousands of times.

It answers "valid" or "don't know", never "invalid": whatever it does not follow (local
functions, subgraphs, sparse or external tensors, packed or string data, a name declared twice,
any broken rule) sends the model to the full checker, the only one that reports problems, so
the messages never depend on this pass. tests/test_checker_fast.py holds it to the full checker on
valid and on broken models.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from itertools import chain
from operator import attrgetter

from .ir import AttrType, DataType, Model, Node, TensorType, Value
from .ir.tensor import wire_size
from .proto import AttributeProto, GraphProto, TensorProto
from .serde import wire
from .serde.model_io import BIG_TENSOR, SPLIT_MIN, read_file
from .serde.proto_load import split_model
from .serde.reader import Reader

__all__ = ["certify"]

_GRAPH_ATTRS = (AttrType.GRAPH, AttrType.GRAPHS)
_INITIALIZER = 5  # GraphProto.initializer
_RAW_DATA = 9  # TensorProto.raw_data
#: What the proof reads of a tensor and of a node (one call each: the loop is the cost).
_TENSOR_FIELDS = attrgetter("name", "data_type", "dims", "raw_data", "data_location")
_NODE_FIELDS = attrgetter("input", "output", "op_type", "domain", "attribute")
_SERIALIZE = AttributeProto.SerializeToString
#: Element types whose typed field holds one value per element, read without conversion
#: errors (the others pack, split or reinterpret their values).
_TYPED_FIELDS = {
    DataType.FLOAT: "float_data",
    DataType.DOUBLE: "double_data",
    DataType.INT64: "int64_data",
    **dict.fromkeys(
        (DataType.INT32, DataType.INT16, DataType.INT8, DataType.UINT16, DataType.UINT8),
        "int32_data",
    ),
    DataType.BOOL: "int32_data",
}
#: In a node's signature: an omitted input or output (''), and where the outputs begin.
_ABSENT = object()
_OUTPUTS = object()


def certify(source, new_checker: Callable[[Model], object], where: str = "") -> bool:
    """True when the full checker would find no problem in ``source`` (a path or serialized
    bytes, which ``where`` names: the file they were read from); False when that is not
    proven, valid or not. ``new_checker(model)`` makes the checker whose rules this pass runs
    (header, type and node rules)."""
    try:
        if isinstance(source, str | os.PathLike):
            where = os.fspath(source)
            return _certify(read_file(where), where, new_checker)
        if isinstance(source, bytes | bytearray | memoryview) or _is_mapped(source):
            return _certify(source, where or "<bytes>", new_checker)
    except Exception:  # whatever went wrong, the full checker meets it again and reports it
        return False
    return False


def _is_mapped(source) -> bool:
    """Whether ``source`` is a memory-mapped file (only where mmap, an extension module a small
    model's load never needs, was imported: nothing else made one)."""
    if "mmap" not in sys.modules:
        return False
    import mmap  # (the statement, not sys.modules' entry: another thread may be importing it)

    return isinstance(source, mmap.mmap)


def _certify(data, where: str, new_checker) -> bool:
    mp, graph_bytes = split_model(data, where)
    if graph_bytes is None or len(mp.functions):
        return False
    reader = Reader(where)
    model = reader.model_header(mp)
    checker = new_checker(model)
    checker.check_header()
    if checker.problems:
        return False
    gp, big = _graph_message(graph_bytes)
    return _GraphProof(checker, reader, model.opset_imports).graph(gp, big)


def _graph_message(mv: memoryview) -> tuple[GraphProto, list]:
    """The graph's message and [(TensorProto without raw_data, its length)] of the big
    initializers taken out of it, as the loader takes them out (a big graph's weights are
    never copied)."""
    gp = GraphProto()
    if len(mv) < SPLIT_MIN:
        gp.ParseFromString(mv)
        return gp, []
    rest, big = [], []
    for field, start, payload, end in wire.iter_fields(mv):
        if field == _INITIALIZER and end - payload >= BIG_TENSOR and mv[start] & 7 == wire.LEN:
            big.append(_tensor_header(mv, payload, end))
        else:
            rest.append(mv[start:end])
    gp.ParseFromString(b"".join(rest))
    return gp, big


def _tensor_header(mv: memoryview, start: int, end: int) -> tuple[TensorProto, int | None]:
    header, raw_len = [], None
    for field, fstart, payload, fend in wire.iter_fields(mv, start, end):
        if field == _RAW_DATA and raw_len is None and mv[fstart] & 7 == wire.LEN:
            raw_len = fend - payload
        else:  # (a second raw_data stays in the header: the tensor is then not plain)
            header.append(mv[fstart:fend])
    tp = TensorProto()
    tp.ParseFromString(b"".join(header))
    return tp, raw_len


class _GraphProof:
    """Proves the main graph valid; each method returns False (or None) at the first thing it
    does not follow."""

    def __init__(self, checker, reader: Reader, opsets: dict[str, int]):
        self.checker = checker
        self.reader = reader
        self.opsets = opsets
        self.clean_types: dict[int, tuple] = {}  # id(ir type) -> (type, passes the rules?)
        #: (element type, raw bytes, *dims) -> the tensor type, or False when not plain
        self.plain_types: dict[tuple, TensorType | bool] = {}
        self.tensor_dtypes: dict[int, bool] = {}
        self.domains: dict[str, tuple] = {}
        self.clean: set[tuple] = set()  # node signatures that passed the node rules

    def graph(self, gp: GraphProto, big: list) -> bool:
        if not gp.name or len(gp.sparse_initializer):
            return False
        self.gname = gp.name
        values = self.inputs(gp)  # name -> type of the graph inputs, then the initializers
        if values is None:
            return False
        inputs = set(values)
        if not self.initializers(gp, big, values, inputs):
            return False
        declared = self.declarations(gp, values, inputs)  # node output name -> type
        if declared is None:
            return False
        defined = self.nodes(gp, values, declared)
        # (a value_info entry may name a value no node makes: the IR gives it a Value of its own)
        return defined is not None and all(vi.name in defined for vi in gp.output)

    def inputs(self, gp: GraphProto) -> dict | None:
        types: dict = {}
        for vi in gp.input:
            t = self.declared_type(vi)
            if t is None or not vi.name or vi.name in types:
                return None
            types[vi.name] = t
        return types

    def initializers(self, gp: GraphProto, big: list, types: dict, inputs: set) -> bool:
        """Adds the initializers that are not graph inputs to ``types``."""
        found = {}
        plain = self.plain_types
        for tp in gp.initializer:
            name, dtype, dims, raw, external = _TENSOR_FIELDS(tp)
            key = (dtype, len(raw), *dims)
            t = plain.get(key)
            if t is None:
                t = plain[key] = self.plain_type(dtype, len(raw), dims) or False
            if not t and not raw:
                t = self.typed_type(tp)
            if not t or external or not name:
                return False
            found[name] = t
        for tp, raw_len in big:  # (their raw_data taken out)
            name, dtype, dims, raw, external = _TENSOR_FIELDS(tp)
            t = self.plain_type(dtype, raw_len, dims) if raw_len else self.typed_type(tp)
            if not t or external or raw or not name:
                return False
            found[name] = t
        if len(found) != len(gp.initializer) + len(big):
            return False  # a name used twice: no plain case
        for name in inputs.intersection(found):
            del found[name]  # an initializer that is an input has the input's type
        types.update(found)
        return not found or self.checker.ir_version >= 4  # (before, each is an input)

    def plain_type(self, dtype: int, raw_len: int | None, dims) -> TensorType | None:
        """The type of a tensor whose raw bytes have the right size for a known element type
        that passes the tensor rules; None for any other."""
        try:
            dt = DataType(dtype)
        except ValueError:
            return None
        dims = tuple(dims)
        if dt in (DataType.UNDEFINED, DataType.STRING) or (dims and min(dims) < 0):
            return None
        if not raw_len or raw_len != wire_size(dt, dims):
            return None
        return TensorType(dt, dims) if self.tensor_dtype(dt) else None

    def typed_type(self, tp: TensorProto) -> TensorType | None:
        """The type of a tensor whose values are in the typed field of its element type, one
        value per element, and nothing else besides its name and dims; None for any other."""
        fields = {fd.name: value for fd, value in tp.ListFields()}
        dtype = fields.get("data_type")
        field = _TYPED_FIELDS.get(dtype)
        if field is None or not fields.keys() <= {"dims", "data_type", "name", field}:
            return None
        dims = tuple(fields.get("dims", ()))
        if min(dims, default=0) < 0 or len(fields.get(field, ())) != math.prod(dims):
            return None
        return TensorType(DataType(dtype), dims) if self.tensor_dtype(dtype) else None

    def tensor_dtype(self, dtype: DataType) -> bool:
        """Whether a tensor of this element type passes the type rules (some need an IR
        version), once per element type."""
        ok = self.tensor_dtypes.get(dtype)
        if ok is None:
            ok = self.tensor_dtypes[dtype] = self.clean_type(TensorType(dtype))
        return ok

    def declarations(self, gp: GraphProto, values: dict, inputs: set) -> dict | None:
        """The types that graph outputs and value_info declare for node outputs; as in the IR,
        the first declaration of a name counts, and types an initializer (not an input)."""
        outputs = [vi.name for vi in gp.output]
        if len(set(outputs)) != len(outputs):
            return None
        declared: dict = {}
        typed = set(inputs)
        for vi in chain(gp.output, gp.value_info):
            name = vi.name
            t = self.declared_type(vi)
            if t is None or not name:
                return None
            if name in typed:
                continue
            typed.add(name)
            if name in values:
                values[name] = t  # an initializer
            else:
                declared[name] = t
        return declared

    def declared_type(self, vi):
        """The type a ValueInfoProto declares if it passes the type rules, else None."""
        if not vi.HasField("type"):
            return None
        t = self.reader.type(vi.type)[0]
        return t if t is not None and self.clean_type(t) else None

    def clean_type(self, t) -> bool:
        """Whether a declared type passes the type rules (once per type object)."""
        hit = self.clean_types.get(id(t))
        if hit is None or hit[0] is not t:
            checker = self.checker
            found = len(checker.problems)
            checker.check_type_features(t, self.gname, "")
            hit = self.clean_types[id(t)] = (t, len(checker.problems) == found)
        return hit[1]

    def nodes(self, gp: GraphProto, values: dict, declared: dict) -> dict | None:
        """Every name the graph defines; None unless each node uses names defined before it,
        defines new ones and passes the node rules."""
        type_str = self.checker.type_str
        key_of = {name: type_str(t) for name, t in values.items()}  # the names defined so far
        key_of[""] = _ABSENT
        out_key = {name: type_str(t) for name, t in declared.items()}
        out_key[""] = _ABSENT
        input_key, output_key = key_of.__getitem__, out_key.get
        clean = self.clean
        for inputs, outputs, op, domain, attrs in map(_NODE_FIELDS, gp.node):
            outputs = outputs[:]  # (a slice is a list at once; iterating reads one by one)
            try:  # one flat tuple: the cost is per object made
                signature = (
                    op,
                    domain,
                    *map(input_key, inputs[:]),
                    _OUTPUTS,
                    *map(output_key, outputs),
                    *(map(_SERIALIZE, attrs) if attrs else ()),
                )
            except KeyError:  # an input defined later or nowhere
                return None
            for name in outputs:
                if name:
                    if name in key_of:
                        return None  # defined twice
                    key_of[name] = output_key(name)
            if signature not in clean:
                if not self.node_rules(op, domain, inputs, outputs, attrs, values, declared):
                    return None
                clean.add(signature)
        return key_of

    def node_rules(self, op, domain, inputs, outputs, attrs, values, declared) -> bool:
        """The checker's rules for one node, run on a stand-in IR node."""
        if any(a.HasField("g") or len(a.graphs) for a in attrs):
            return False  # subgraphs: scopes this pass does not follow
        attributes = {}
        for a in attrs:
            attr = self.reader.attribute(a, [], "node")
            if attr.type in _GRAPH_ATTRS:
                return False
            attributes[attr.name] = attr
        ins = [Value(n, values.get(n) or declared.get(n)) if n else None for n in inputs]
        node = Node(op, ins, [Value(n, declared.get(n)) for n in outputs], None, domain)
        node.attributes = attributes
        resolved = self.domains.get(domain)
        if resolved is None:
            resolved = self.domains[domain] = self.checker.resolve_domain(domain, self.opsets)
        checker = self.checker
        found = len(checker.problems)
        checker.check_node(
            node, node.inputs, node.outputs, resolved, self.gname, {}, self.opsets, None
        )
        return len(checker.problems) == found
