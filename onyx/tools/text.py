"""ONNX's textual syntax: ``to_text`` prints a model, graph, node or function in it, and
``parse_model`` / ``parse_graph`` / ``parse_function`` / ``parse_node`` read it back into the IR.

The syntax is the one of onnx's ``onnx.printer`` / ``onnx.parser`` (docs/Syntax.md of the ONNX
repository); the printer writes what onnx's parser reads into an equal model, and the parser
reads what onnx's printer writes:

    <ir_version: 8, opset_import: ["" : 17]>
    agraph (float[N, 128] X, float[128, 10] W) => (float[N, 10] C) {
        T = MatMul(X, W)
        C = Softmax <axis: int = -1> (T)
    }

What the syntax has no place for (doc strings of graphs, nodes and values, denotations,
metadata of anything but the model) is not printed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import OnyxError
from ..ir import (
    Attr,
    AttrType,
    DataType,
    ExternalData,
    Function,
    Graph,
    MapType,
    Model,
    Node,
    OpaqueType,
    OptionalType,
    SequenceType,
    SparseTensorType,
    Tensor,
    TensorType,
    Value,
)
from ..ir.dtypes import SUB_BYTE, bit_width
from ..ir.tensor import pack_sub_byte, unpack_sub_byte

__all__ = [
    "TextSyntaxError",
    "parse_function",
    "parse_graph",
    "parse_model",
    "parse_node",
    "to_text",
]


class TextSyntaxError(OnyxError, ValueError):
    """Text that is not in ONNX's textual syntax; the message names the line and column."""


# -- names shared by printer and parser ------------------------------------------------------

#: Element type names of the syntax (the same as onnxruntime's 'tensor(...)' names).
TYPE_NAMES = {
    DataType.FLOAT: "float",
    DataType.UINT8: "uint8",
    DataType.INT8: "int8",
    DataType.UINT16: "uint16",
    DataType.INT16: "int16",
    DataType.INT32: "int32",
    DataType.INT64: "int64",
    DataType.STRING: "string",
    DataType.BOOL: "bool",
    DataType.FLOAT16: "float16",
    DataType.DOUBLE: "double",
    DataType.UINT32: "uint32",
    DataType.UINT64: "uint64",
    DataType.COMPLEX64: "complex64",
    DataType.COMPLEX128: "complex128",
    DataType.BFLOAT16: "bfloat16",
    DataType.FLOAT8E4M3FN: "float8e4m3fn",
    DataType.FLOAT8E4M3FNUZ: "float8e4m3fnuz",
    DataType.FLOAT8E5M2: "float8e5m2",
    DataType.FLOAT8E5M2FNUZ: "float8e5m2fnuz",
    DataType.FLOAT8E8M0: "float8e8m0",
    DataType.UINT4: "uint4",
    DataType.INT4: "int4",
    DataType.FLOAT4E2M1: "float4e2m1",
    DataType.UINT2: "uint2",
    DataType.INT2: "int2",
    DataType.FLOAT6E2M3: "float6e2m3",
    DataType.FLOAT6E3M2: "float6e3m2",
}
TYPE_BY_NAME = {v: k for k, v in TYPE_NAMES.items()}

ATTR_TYPE_NAMES = {
    AttrType.FLOAT: "float",
    AttrType.INT: "int",
    AttrType.STRING: "string",
    AttrType.TENSOR: "tensor",
    AttrType.GRAPH: "graph",
    AttrType.SPARSE_TENSOR: "sparse_tensor",
    AttrType.TYPE_PROTO: "type_proto",
    AttrType.FLOATS: "floats",
    AttrType.INTS: "ints",
    AttrType.STRINGS: "strings",
    AttrType.TENSORS: "tensors",
    AttrType.GRAPHS: "graphs",
    AttrType.SPARSE_TENSORS: "sparse_tensors",
    AttrType.TYPE_PROTOS: "type_protos",
}
ATTR_TYPE_BY_NAME = {v: k for k, v in ATTR_TYPE_NAMES.items()}
_SINGULAR = {
    AttrType.FLOATS: AttrType.FLOAT,
    AttrType.INTS: AttrType.INT,
    AttrType.STRINGS: AttrType.STRING,
    AttrType.TENSORS: AttrType.TENSOR,
    AttrType.GRAPHS: AttrType.GRAPH,
    AttrType.SPARSE_TENSORS: AttrType.SPARSE_TENSOR,
    AttrType.TYPE_PROTOS: AttrType.TYPE_PROTO,
}
_PLURAL = {v: k for k, v in _SINGULAR.items()}

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: Element types whose data the syntax writes as integer codes (bit patterns for floats).
_CODE_VIEW = {
    DataType.FLOAT16: np.uint16,
    DataType.BFLOAT16: np.uint16,
    DataType.FLOAT8E4M3FN: np.uint8,
    DataType.FLOAT8E4M3FNUZ: np.uint8,
    DataType.FLOAT8E5M2: np.uint8,
    DataType.FLOAT8E5M2FNUZ: np.uint8,
    DataType.FLOAT8E8M0: np.uint8,
    DataType.FLOAT6E2M3: np.uint8,
    DataType.FLOAT6E3M2: np.uint8,
}
_FLOAT32_DATA = {DataType.FLOAT, DataType.COMPLEX64}
_FLOAT64_DATA = {DataType.DOUBLE, DataType.COMPLEX128}


# ============================================================================ printer


def to_text(obj, max_tensor_elements: int | None = None) -> str:
    """``obj`` (ir.Model, Graph, Node, Function or Tensor) in ONNX's textual syntax.

    ``max_tensor_elements``: tensors with more elements print their data as ``...`` (readable,
    but no longer parseable); None prints every element.
    """
    p = _Printer(max_tensor_elements)
    if isinstance(obj, Model):
        p.model(obj)
    elif isinstance(obj, Graph):
        p.graph(obj)
    elif isinstance(obj, Node):
        p.node(obj)
        return "".join(p.out).strip()
    elif isinstance(obj, Function):
        p.function(obj)
    elif isinstance(obj, Tensor):
        p.tensor(obj)
    else:
        raise TypeError(f"to_text takes an ir.Model, Graph, Node, Function or Tensor, not {obj!r}")
    return "".join(p.out)


def format_float(x: float, single: bool = True) -> str:
    """The shortest text that reads back as the same float32 (float64 if not ``single``),
    positional or scientific, whichever is shorter (as C++'s std::to_chars writes it)."""
    if math.isnan(x):
        return "-nan" if math.copysign(1.0, x) < 0 else "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    v = np.float32(x) if single else np.float64(x)
    fixed = np.format_float_positional(v, unique=True, trim="-")
    sci = np.format_float_scientific(v, unique=True, trim="-", exp_digits=2)
    return sci if len(sci) < len(fixed) else fixed


def quote(s) -> str:
    if isinstance(s, bytes):
        s = s.decode("utf-8", errors="surrogateescape")
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ident(s: str) -> str:
    return s if _IDENTIFIER.match(s) else quote(s)


class _Printer:
    def __init__(self, max_tensor_elements: int | None):
        self.out: list[str] = []
        self.indent = 3
        self.max_elements = max_tensor_elements
        self._fresh: dict[int, str] = {}

    def w(self, *parts: str) -> None:
        self.out.extend(parts)

    def name(self, v: Value | None) -> str:
        if v is None or (not v.name and v.producer is not None and not v.uses()):
            return '""'  # an absent input, or an optional output nothing reads
        if v.name:
            return ident(v.name)
        n = self._fresh.get(id(v))
        if n is None:
            n = self._fresh[id(v)] = f"_onyx_{len(self._fresh)}"
        return n

    # -- types and tensors ----------------------------------------------------------------
    def type(self, t) -> str:
        if isinstance(t, TensorType):
            return TYPE_NAMES.get(t.elem_type, "undefined") + self.shape(t.shape)
        if isinstance(t, SparseTensorType):
            return f"sparse_tensor({TYPE_NAMES[t.elem_type]}{self.shape(t.shape)})"
        if isinstance(t, SequenceType):
            return f"seq({self.type(t.elem)})"
        if isinstance(t, OptionalType):
            return f"optional({self.type(t.elem)})"
        if isinstance(t, MapType):
            return f"map({TYPE_NAMES[t.key]}, {self.type(t.value)})"
        if isinstance(t, OpaqueType):
            inner = ",".join(p for p in (t.domain, t.name) if p)
            return f"opaque({inner})"
        return ""

    @staticmethod
    def shape(shape) -> str:
        if shape is None:
            return "[]"
        if not shape.dims:
            return ""
        dims = ["?" if d is None else ident(d) if isinstance(d, str) else str(d) for d in shape]
        return "[" + ",".join(dims) + "]"

    def value_info(self, v: Value) -> str:
        ty = self.type(v.type) if v.type is not None else ""
        return f"{ty} {self.name(v)}" if ty else self.name(v)

    def tensor(self, t: Tensor, initializer: bool = False) -> None:
        self.w(TYPE_NAMES.get(t.dtype, "undefined"))
        if t.shape:
            self.w("[", ",".join(str(d) for d in t.shape), "]")
        if t.name:
            self.w(" ", ident(t.name))
        if initializer:
            self.w(" =")
        ext = t.external
        if ext is not None and not t.is_loaded() and not t.has_raw_bytes():  # (data on disk)
            pairs = ", ".join(f"{quote(k)}: {quote(v)}" for k, v in ext.entries)
            self.w(" [", pairs, "]")
            return
        if self.max_elements is not None and t.size > self.max_elements:
            self.w(" {...}")
            return
        self.w(" {", ",".join(tensor_literals(t)), "}")

    # -- attributes and nodes -------------------------------------------------------------
    def attr(self, a: Attr) -> None:
        head = f"{a.name}: {ATTR_TYPE_NAMES.get(a.type, 'undefined')} = "
        if a.is_ref:
            self.w(head, "@", a.ref_attr_name)
            return
        self.w(head)
        t, v = a.type, a.value
        if t == AttrType.INT:
            self.w(str(int(v)))
        elif t == AttrType.FLOAT:
            self.w(format_float(v))
        elif t == AttrType.STRING:
            self.w(quote(v))
        elif t == AttrType.INTS:
            self.w("[", ", ".join(str(int(x)) for x in v), "]")
        elif t == AttrType.FLOATS:
            self.w("[", ", ".join(format_float(x) for x in v), "]")
        elif t == AttrType.STRINGS:
            self.w("[", ", ".join(quote(x) for x in v), "]")
        elif t == AttrType.TENSOR:
            self.tensor(v)
        elif t == AttrType.TENSORS:
            self._list(v, self.tensor)
        elif t == AttrType.GRAPH:
            self.indent += 3
            self.graph(v)
            self.indent -= 3
        elif t == AttrType.GRAPHS:
            self.indent += 3
            self._list(v, self.graph)
            self.indent -= 3
        elif t == AttrType.TYPE_PROTO:
            self.w(self.type(v))
        elif t == AttrType.TYPE_PROTOS:
            self.w("[", ", ".join(self.type(x) for x in v), "]")
        else:  # sparse tensors have no form in the syntax
            self.w("...")

    def _list(self, items, write) -> None:
        self.w("[")
        for i, item in enumerate(items):
            if i:
                self.w(", ")
            write(item)
        self.w("]")

    def attrs(self, attrs) -> None:
        self.w(" <")
        for i, a in enumerate(attrs):
            if i:
                self.w(", ")
            self.attr(a)
        self.w(">")

    def node(self, n: Node) -> None:
        self.w(" " * self.indent)
        if n.name:
            self.w("[", ident(n.name), "] ")
        self.w(", ".join(self.name(v) for v in n.outputs), " = ")
        if n.domain:
            self.w(n.domain, ".")
        self.w(n.op_type)
        if n.overload:
            self.w(":", n.overload)
        attrs = list(n.attributes.values())
        has_graph = any(a.type in (AttrType.GRAPH, AttrType.GRAPHS) for a in attrs)
        if attrs and not has_graph:
            self.attrs(attrs)
        self.w(" (", ", ".join(self.name(v) for v in n.inputs), ")")
        if attrs and has_graph:
            self.attrs(attrs)
        self.w("\n")

    def nodes(self, nodes) -> None:
        self.w("{\n")
        for n in nodes:
            self.node(n)
        self.w(" " * (self.indent - 3), "}")

    # -- graphs, functions, models --------------------------------------------------------
    def graph(self, g: Graph) -> None:
        self.w(ident(g.name) if g.name else '""', " (")
        self.w(", ".join(self.value_info(v) for v in g.inputs), ") => (")
        self.w(", ".join(self.value_info(v) for v in g.outputs), ") ")
        inits = list(g.initializers.values())
        if inits or g.value_info:
            self.w("\n", " " * self.indent, "<")
            for i, v in enumerate(inits):
                if i:
                    self.w(", ")
                self.tensor(_named(v.const_value, v.name), initializer=True)
            for i, v in enumerate(g.value_info):
                if i or inits:
                    self.w(", ")
                self.w(self.value_info(v))
            self.w(">\n")
        self.nodes(g.nodes)

    def function(self, f: Function) -> None:
        self.w("<\n  domain: ", quote(f.domain), ",\n")
        if f.overload:
            self.w("  overload: ", quote(f.overload), ",\n")
        if f.doc_string:
            self.w("  doc_string: ", quote(f.doc_string), ",\n")
        self.w("  opset_import: ", _opsets(f.opset_imports), "\n>\n")
        self.w(ident(f.name), " ")
        if f.attributes or f.attribute_defaults:
            self.w("<", ",".join(f.attributes))
            for i, a in enumerate(f.attribute_defaults):
                self.w("," if i or f.attributes else "")
                self.attr(a)
            self.w(">")
        g = f.graph
        self.w("(", ", ".join(self.name(v) for v in g.inputs), ") => (")
        self.w(", ".join(self.name(v) for v in g.outputs), ")")
        typed = [v for v in (*g.inputs, *g.outputs, *g.value_info) if v.type is not None]
        if typed:
            unique = list({id(v): v for v in typed}.values())
            self.w("\n<", ", ".join(self.value_info(v) for v in unique), ">")
        self.w("\n")
        self.nodes(g.nodes)

    def model(self, m: Model) -> None:
        self.w("<\n   ir_version: ", str(m.ir_version))
        self.w(",\n   opset_import: ", _opsets(m.opset_imports))
        for key in ("producer_name", "producer_version", "domain"):
            if getattr(m, key):
                self.w(f",\n   {key}: ", quote(getattr(m, key)))
        if m.model_version:
            self.w(",\n   model_version: ", str(m.model_version))
        if m.doc_string:
            self.w(",\n   doc_string: ", quote(m.doc_string))
        if m.metadata_props:
            pairs = ", ".join(f"{quote(k)}: {quote(v)}" for k, v in m.metadata_props.items())
            self.w(",\n   metadata_props: [", pairs, "]")
        self.w("\n>\n")
        self.graph(m.graph)
        for f in m.functions.values():
            self.w("\n")
            self.function(f)


def _opsets(opsets: dict[str, int]) -> str:
    return "[" + ", ".join(f"{quote(d)} : {v}" for d, v in opsets.items()) + "]"


def _named(t: Tensor, name: str) -> Tensor:
    if t.name == name:
        return t
    c = Tensor.__new__(Tensor)
    for slot in Tensor.__slots__:
        setattr(c, slot, getattr(t, slot))
    c.name = name
    return c


def tensor_literals(t: Tensor) -> list[str]:
    """A tensor's elements as the syntax writes them (codes for narrow floats, packed bytes
    for 4- and 2-bit types, real/imaginary pairs for complex numbers)."""
    dt = t.dtype
    arr = t.numpy()
    if dt == DataType.STRING:
        return [quote(s) for s in arr.reshape(-1)]
    if dt in SUB_BYTE and 8 % bit_width(dt) == 0:
        return [str(b) for b in pack_sub_byte(arr, dt)]
    if dt in _CODE_VIEW:
        return [str(int(c)) for c in np.ascontiguousarray(arr).view(_CODE_VIEW[dt]).reshape(-1)]
    if dt in _FLOAT32_DATA or dt in _FLOAT64_DATA:
        single = dt in _FLOAT32_DATA
        flat = arr.reshape(-1)
        if dt in (DataType.COMPLEX64, DataType.COMPLEX128):
            flat = np.stack([flat.real, flat.imag], axis=-1).reshape(-1)
        return [format_float(float(x), single) for x in flat]
    if dt == DataType.BOOL:
        return ["1" if x else "0" for x in arr.reshape(-1)]
    return [str(int(x)) for x in arr.reshape(-1)]


# ============================================================================ parser


def parse_model(text: str) -> Model:
    """An ir.Model from ONNX's textual syntax (``<header> graph function*``)."""
    p = _Parser(text)
    m = p.model()
    p.expect_end()
    return m


def parse_graph(text: str) -> Graph:
    """An ir.Graph from ONNX's textual syntax (``name (inputs) => (outputs) {nodes}``)."""
    p = _Parser(text)
    g = _Builder().graph(p.graph(), [])
    p.expect_end()
    return g


def parse_function(text: str) -> Function:
    """An ir.Function from ONNX's textual syntax."""
    p = _Parser(text)
    f = _Builder().function(p.function())
    p.expect_end()
    return f


def parse_node(text: str) -> Node:
    """One ir.Node (its inputs and outputs are fresh Values named as written)."""
    p = _Parser(text)
    spec = p.node()
    p.expect_end()
    return _Builder().node(spec, [{}])


@dataclass
class _NodeSpec:
    name: str
    outputs: list[str]
    domain: str
    op: str
    overload: str
    attrs: list  # of (name, AttrType, value, ref) with values parsed (graphs as _GraphSpec)
    inputs: list[str]


@dataclass
class _GraphSpec:
    name: str
    inputs: list  # (type or None, name)
    outputs: list
    initializers: list[Tensor] = field(default_factory=list)
    value_info: list = field(default_factory=list)
    nodes: list[_NodeSpec] = field(default_factory=list)


_KEYWORD_TYPES = {"seq", "map", "optional", "sparse_tensor", "opaque"}


class _Parser:
    """Recursive descent over the text, following onnx's grammar (comments start with '#')."""

    def __init__(self, text: str):
        self.s = text
        self.i = 0

    # -- lexing ---------------------------------------------------------------------------
    def error(self, message: str):
        line = self.s.count("\n", 0, self.i) + 1
        col = self.i - (self.s.rfind("\n", 0, self.i) + 1) + 1
        start = self.s.rfind("\n", 0, self.i) + 1
        end = self.s.find("\n", self.i)
        context = self.s[start : end if end >= 0 else len(self.s)]
        return TextSyntaxError(f"line {line}, column {col}: {message}\n  {context}")

    def skip(self) -> None:
        s, n = self.s, len(self.s)
        while self.i < n:
            c = s[self.i]
            if c in " \t\r\n\v\f":
                self.i += 1
            elif c == "#":
                j = s.find("\n", self.i)
                self.i = n if j < 0 else j
            else:
                return

    def peek(self) -> str:
        self.skip()
        return self.s[self.i] if self.i < len(self.s) else ""

    def matches(self, ch: str) -> bool:
        if self.peek() == ch:
            self.i += 1
            return True
        return False

    def expect(self, ch: str) -> None:
        if not self.matches(ch):
            found = self.peek() or "the end of the text"
            raise self.error(f"expected {ch!r}, found {found!r}")

    def expect_end(self) -> None:
        if self.peek():
            raise self.error(f"unexpected {self.peek()!r} after the end")

    def optional_identifier(self) -> str:
        self.skip()
        m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(self.s, self.i)
        if not m:
            return ""
        self.i = m.end()
        return m.group()

    def identifier(self, what: str = "an identifier") -> str:
        ident_ = self.optional_identifier()
        if not ident_:
            raise self.error(f"expected {what}")
        return ident_

    def peek_identifier(self) -> str:
        saved = self.i
        ident_ = self.optional_identifier()
        self.i = saved
        return ident_

    def string(self) -> str:
        if self.peek() != '"':
            raise self.error("expected a quoted string")
        out = []
        i, s, n = self.i + 1, self.s, len(self.s)
        while i < n and s[i] != '"':
            if s[i] == "\\":
                i += 1
                if i >= n:
                    break
            out.append(s[i])
            i += 1
        if i >= n:
            raise self.error("unterminated string")
        self.i = i + 1
        return "".join(out)

    def quotable(self) -> str:
        return self.string() if self.peek() == '"' else self.identifier()

    _NUMBER = re.compile(
        r"-?(?:(?:[0-9]+\.?[0-9]*(?:[eE][+-]?[0-9]*)?)|(?:infinity|inf|nan)(?![A-Za-z0-9]))",
        re.IGNORECASE,
    )

    def literal(self):
        """('int' | 'float' | 'string', value)."""
        if self.peek() == '"':
            return "string", self.string()
        m = self._NUMBER.match(self.s, self.i)
        if not m:
            raise self.error("expected a number or a quoted string")
        self.i = m.end()
        tok = m.group()
        if re.fullmatch(r"-?[0-9]+", tok):
            return "int", int(tok)
        try:
            return "float", float(tok)
        except ValueError:
            raise self.error(f"bad number {tok!r}") from None

    def integer(self) -> int:
        kind, v = self.literal()
        if kind != "int":
            raise self.error(f"expected an integer, found {v!r}")
        return v

    def number(self) -> float:
        kind, v = self.literal()
        if kind == "string":
            raise self.error(f"expected a number, found {v!r}")
        return float(v)

    # -- types ----------------------------------------------------------------------------
    def next_is_type(self) -> bool:
        name = self.peek_identifier()
        return name in TYPE_BY_NAME or name in _KEYWORD_TYPES

    def type(self):
        name = self.identifier("a type")
        if name in TYPE_BY_NAME:
            return TensorType(TYPE_BY_NAME[name], self._shape_suffix())
        if name in ("seq", "optional"):
            self.expect("(")
            elem = self.type()
            self.expect(")")
            return SequenceType(elem) if name == "seq" else OptionalType(elem)
        if name == "map":
            self.expect("(")
            key = self.identifier("a map key type")
            if key not in TYPE_BY_NAME:
                raise self.error(f"{key!r} is not an element type")
            self.expect(",")
            value = self.type()
            self.expect(")")
            return MapType(TYPE_BY_NAME[key], value)
        if name == "sparse_tensor":
            self.expect("(")
            elem = self.identifier("an element type")
            if elem not in TYPE_BY_NAME:
                raise self.error(f"{elem!r} is not an element type")
            t = SparseTensorType(TYPE_BY_NAME[elem], self._shape_suffix())
            self.expect(")")
            return t
        if name == "opaque":
            self.expect("(")
            parts = []
            while self.peek() != ")":
                parts.append(self._qualified())
                if not self.matches(","):
                    break
            self.expect(")")
            return OpaqueType(*parts) if len(parts) == 2 else OpaqueType("", "".join(parts))
        raise self.error(f"unknown type {name!r}")

    def _qualified(self) -> str:
        parts = [self.identifier()]
        while self.matches("."):
            parts.append(self.identifier())
        return ".".join(parts)

    def _shape_suffix(self):
        """Scalar (no brackets), unknown rank ('[]') or the dims."""
        if not self.matches("["):
            return ()
        if self.matches("]"):
            return None
        dims = []
        while True:
            if self.matches("?"):
                dims.append(None)
            elif self.peek() == '"':
                dims.append(self.string())
            else:
                name = self.optional_identifier()
                dims.append(name if name else self.integer())
            if not self.matches(","):
                break
        self.expect("]")
        return tuple(dims)

    def value_info(self):
        ty = self.type() if self.next_is_type() else None
        return ty, self.quotable()

    # -- tensors --------------------------------------------------------------------------
    def tensor_data(self, ty, name: str) -> Tensor:
        if not isinstance(ty, TensorType):
            raise self.error(f"tensor {name!r} needs a tensor type, not {ty}")
        if ty.shape is None or not all(isinstance(d, int) for d in ty.shape):
            raise self.error(f"tensor {name!r} needs numeric dims")
        shape = tuple(ty.shape)
        if self.matches("["):
            entries = []
            while self.peek() != "]":
                k = self.string()
                self.expect(":")
                entries.append((k, self.string()))
                if not self.matches(","):
                    break
            self.expect("]")
            t = Tensor(name=name, dtype=ty.elem_type)
            t.shape = shape
            t.external = ExternalData(entries)
            return t
        items = []
        if self.matches("{"):
            if not self.matches("}"):
                while True:
                    items.append(self._element(ty.elem_type))
                    if not self.matches(","):
                        break
                self.expect("}")
        return self._make_tensor(items, ty.elem_type, shape, name)

    def _element(self, dt: DataType):
        if dt == DataType.STRING:
            return self.string()
        if dt in _FLOAT32_DATA or dt in _FLOAT64_DATA:
            return self.number()
        return self.integer()

    def _make_tensor(self, items: list, dt: DataType, shape, name: str) -> Tensor:
        count = math.prod(shape)
        if not items and count:
            t = Tensor(name=name, dtype=dt)  # no data written: zeros of its shape
            t.shape = shape
            return t
        try:
            arr = _array_from_literals(items, dt, count)
            return Tensor(arr.reshape(shape), name=name, dtype=dt)
        except ValueError as e:
            raise self.error(f"tensor {name!r} of shape {list(shape)}: {e}") from None

    # -- attributes -----------------------------------------------------------------------
    def attribute(self, name: str):
        """(name, AttrType, value, ref) after the name."""
        expected = AttrType.UNDEFINED
        if self.matches(":"):
            tname = self.identifier("an attribute type")
            if tname not in ATTR_TYPE_BY_NAME:
                raise self.error(f"unknown attribute type {tname!r}")
            expected = ATTR_TYPE_BY_NAME[tname]
        self.expect("=")
        if self.peek() == "[":
            self.i += 1
            values, kind = [], _SINGULAR.get(expected, AttrType.UNDEFINED)
            if self.peek() == "]":
                if expected == AttrType.UNDEFINED:
                    raise self.error(f"attribute {name!r}: an empty list needs ': type'")
                if expected not in _SINGULAR:
                    raise self.error(f"attribute {name!r}: a single value cannot be a list")
            else:
                while True:
                    kind_i, v, _ = self.single_attr(name, _SINGULAR.get(expected, expected))
                    kind = kind_i
                    values.append(v)
                    if not self.matches(","):
                        break
            self.expect("]")
            plural = _PLURAL.get(kind, expected)
            return name, plural, values, ""
        kind, value, ref = self.single_attr(name, expected)
        return name, kind, value, ref

    def single_attr(self, name: str, expected: AttrType):
        """(AttrType, value, ref_attr_name) of one value."""
        c = self.peek()
        ref = ""
        value = None
        if c.isalpha() or c == "_":
            word = self.peek_identifier()
            if self.next_is_type():
                ty = self.type()
                nxt = self.peek()
                if nxt in ("{", "=", '"', "[") or self.peek_identifier():
                    tname = self.string() if nxt == '"' else self.optional_identifier()
                    self.matches("=")
                    kind, value = AttrType.TENSOR, self.tensor_data(ty, tname)
                else:
                    kind, value = AttrType.TYPE_PROTO, ty
            elif word.lower() in ("inf", "infinity", "nan"):
                kind, value = AttrType.FLOAT, self.number()
            else:
                kind, value = AttrType.GRAPH, self.graph()
        elif self.matches("@"):
            ref = self.quotable()
            kind = expected
        else:
            lit, v = self.literal()
            kind = {"int": AttrType.INT, "float": AttrType.FLOAT, "string": AttrType.STRING}[lit]
            value = v
        if expected not in (AttrType.UNDEFINED, kind):
            if expected == AttrType.FLOAT and kind == AttrType.INT:
                return AttrType.FLOAT, float(value), ref
            raise self.error(
                f"attribute {name!r}: declared {ATTR_TYPE_NAMES.get(expected)}, "
                f"written as {ATTR_TYPE_NAMES.get(kind)}"
            )
        return kind, value, ref

    def attr_list(self) -> list:
        attrs = []
        if self.matches("<"):
            while True:
                attrs.append(self.attribute(self.identifier("an attribute name")))
                if not self.matches(","):
                    break
            self.expect(">")
        return attrs

    # -- nodes, graphs, functions, models -------------------------------------------------
    def id_list(self) -> list[str]:
        """Names separated by commas; an empty name is '""' or nothing before a comma
        ('Op(,x)'), and a trailing comma adds nothing ('Op(x,)'), as onnx's parser reads them."""
        names: list[str] = []
        while True:
            if self.peek() == '"':
                names.append(self.string())
            else:
                name = self.optional_identifier()
                if not name and self.peek() != ",":
                    return names
                names.append(name)
            if not self.matches(","):
                return names

    def node(self) -> _NodeSpec:
        name = ""
        if self.matches("["):
            name = self.string() if self.peek() == '"' else self.optional_identifier()
            self.expect("]")
        outputs = self.id_list()
        self.expect("=")
        parts = [self.identifier("an operator name")]
        while self.matches("."):
            parts.append(self.identifier("an operator name"))
        overload = self.identifier("an overload name") if self.matches(":") else ""
        attrs = self.attr_list()
        self.expect("(")
        inputs = self.id_list()
        self.expect(")")
        if not attrs:
            attrs = self.attr_list()
        return _NodeSpec(name, outputs, ".".join(parts[:-1]), parts[-1], overload, attrs, inputs)

    def node_list(self) -> list[_NodeSpec]:
        self.expect("{")
        nodes = []
        while not self.matches("}"):
            if not self.peek():
                raise self.error("expected '}' closing the node list")
            nodes.append(self.node())
        return nodes

    def graph(self) -> _GraphSpec:
        g = _GraphSpec(self.quotable(), [], [])
        self.expect("(")
        if not self.matches(")"):
            while True:
                ty, name = self.value_info()
                g.inputs.append((ty, name))
                if self.matches("="):
                    g.initializers.append(self.tensor_data(ty, name))
                if not self.matches(","):
                    break
            self.expect(")")
        self.expect("=")
        self.expect(">")
        self.expect("(")
        if not self.matches(")"):
            while True:
                g.outputs.append(self.value_info())
                if not self.matches(","):
                    break
            self.expect(")")
        if self.matches("<") and not self.matches(">"):
            while True:
                ty, name = self.value_info()
                if self.matches("="):
                    g.initializers.append(self.tensor_data(ty, name))
                else:
                    g.value_info.append((ty, name))
                if not self.matches(","):
                    break
            self.expect(">")
        g.nodes = self.node_list()
        return g

    def header(self, allowed: set[str]) -> dict:
        fields: dict = {}
        if not self.matches("<"):
            return fields
        while True:
            key = self.identifier("a keyword")
            if key not in allowed:
                raise self.error(f"unexpected keyword {key!r} (one of {sorted(allowed)})")
            self.expect(":")
            if key == "opset_import":
                fields[key] = self.opsets()
            elif key == "metadata_props":
                fields[key] = self.string_pairs()
            elif key in ("ir_version", "model_version"):
                fields[key] = self.integer()
            else:
                fields[key] = self.string()
            if not self.matches(","):
                break
        self.expect(">")
        return fields

    def opsets(self) -> dict[str, int]:
        self.expect("[")
        out: dict[str, int] = {}
        if not self.matches("]"):
            while True:
                domain = self.string()
                self.expect(":")
                out[domain] = self.integer()
                if not self.matches(","):
                    break
            self.expect("]")
        return out

    def string_pairs(self) -> dict[str, str]:
        self.expect("[")
        out: dict[str, str] = {}
        if not self.matches("]"):
            while True:
                k = self.string()
                self.expect(":")
                out[k] = self.string()
                if not self.matches(","):
                    break
            self.expect("]")
        return out

    def function(self) -> dict:
        spec = self.header({"opset_import", "doc_string", "domain", "overload"})
        spec["name"] = self.quotable()
        spec["attributes"], spec["defaults"] = [], []
        if self.matches("<"):
            while True:
                name = self.identifier("an attribute name")
                if self.peek() in (":", "="):
                    spec["defaults"].append(self.attribute(name))
                else:
                    spec["attributes"].append(name)
                if not self.matches(","):
                    break
            self.expect(">")
        value_info: list = []
        spec["inputs"] = self._function_io(value_info)
        self.expect("=")
        self.expect(">")
        spec["outputs"] = self._function_io(value_info)
        if self.matches("<") and not self.matches(">"):
            while True:
                value_info.append(self.value_info())
                if not self.matches(","):
                    break
            self.expect(">")
        spec["value_info"] = value_info
        spec["nodes"] = self.node_list()
        return spec

    def _function_io(self, value_info: list) -> list[str]:
        self.expect("(")
        names: list[str] = []
        if not self.matches(")"):
            while True:
                ty, name = self.value_info()
                names.append(name)
                if ty is not None:
                    value_info.append((ty, name))
                if not self.matches(","):
                    break
            self.expect(")")
        return names

    def model(self) -> Model:
        head = self.header(
            {"ir_version", "opset_import", "producer_name", "producer_version", "domain"}
            | {"model_version", "doc_string", "metadata_props"}
        )
        b = _Builder()
        graph = b.graph(self.graph(), [])
        m = Model(graph, opset_imports=head.get("opset_import") or {}, ir_version=0)
        m.opset_imports = dict(head.get("opset_import", {}))
        m.ir_version = head.get("ir_version", 0)
        m.producer_name = head.get("producer_name", "")
        m.producer_version = head.get("producer_version", "")
        m.domain = head.get("domain", "")
        m.model_version = head.get("model_version", 0)
        m.doc_string = head.get("doc_string", "")
        m.metadata_props = head.get("metadata_props", {})
        while self.peek():
            f = b.function(self.function())
            m.functions[f.key] = f
        return m


def _array_from_literals(items: list, dt: DataType, count: int) -> np.ndarray:
    from ..ir.dtypes import to_numpy

    if dt == DataType.STRING:
        arr = np.array(items, dtype=object)
    elif dt in (DataType.COMPLEX64, DataType.COMPLEX128):
        pairs = np.array(items, dtype=np.float64).reshape(-1, 2)
        arr = (pairs[:, 0] + 1j * pairs[:, 1]).astype(to_numpy(dt))
    elif dt in SUB_BYTE and 8 % bit_width(dt) == 0 and len(items) != count:
        arr = unpack_sub_byte(np.array(items, dtype=np.uint8).tobytes(), dt, count)
    elif dt in _CODE_VIEW:
        arr = np.array(items, dtype=np.int64).astype(_CODE_VIEW[dt]).view(to_numpy(dt))
    elif dt in _FLOAT32_DATA or dt in _FLOAT64_DATA:
        arr = np.array(items, dtype=to_numpy(dt))
    else:
        arr = np.array(items, dtype=np.int64).astype(to_numpy(dt))
    if arr.size != count:
        raise ValueError(f"{arr.size} values given, {count} needed")
    return arr


class _Builder:
    """Turns parsed specs into IR objects, resolving names through the enclosing scopes."""

    def graph(self, spec: _GraphSpec, outer: list[dict]) -> Graph:
        scope: dict[str, Value] = {}
        scopes = [*outer, scope]
        g = Graph(name=spec.name)
        for ty, name in spec.inputs:
            v = Value(name, ty)
            scope[name] = v
            g.inputs.append(v)
        for t in spec.initializers:
            v = scope.get(t.name) if any(n == t.name for _, n in spec.inputs) else None
            if v is None:
                v = Value(t.name, TensorType(t.dtype, t.shape))
                scope[t.name] = v
            v.const_value = t
            g.initializers[t.name] = v
        self._nodes(g, spec.nodes, scopes)
        for ty, name in spec.outputs:
            v = _lookup(name, scopes)
            if ty is not None and v.type is None:
                v.type = ty
            g.outputs.append(v)
        for ty, name in spec.value_info:
            v = _lookup(name, scopes)
            if ty is not None:
                v.type = ty
            g.value_info.append(v)
        return g

    def _nodes(self, g: Graph, specs: list[_NodeSpec], scopes: list[dict]) -> None:
        scope = scopes[-1]
        outputs = []
        for spec in specs:  # outputs first: a node may read a value defined further down
            outs = [Value(n) for n in spec.outputs]
            for v in outs:
                if v.name:
                    scope[v.name] = v
            outputs.append(outs)
        for spec, outs in zip(specs, outputs):
            g.append(self.node(spec, scopes, outs))

    def node(self, spec: _NodeSpec, scopes: list[dict], outs=None) -> Node:
        if outs is None:
            outs = [Value(n) for n in spec.outputs]
        inputs = [_lookup(n, scopes) if n else None for n in spec.inputs]
        attrs = [self.attr(a, scopes) for a in spec.attrs]
        return Node(spec.op, inputs, outs, attrs, spec.domain, spec.name, spec.overload)

    def attr(self, a, scopes: list[dict]) -> Attr:
        name, kind, value, ref = a
        if kind == AttrType.GRAPH and value is not None:
            value = self.graph(value, scopes)
        elif kind == AttrType.GRAPHS:
            value = [self.graph(s, scopes) for s in value]
        return Attr(name, kind, value, ref_attr_name=ref)

    def function(self, spec: dict) -> Function:
        scope: dict[str, Value] = {}
        g = Graph()
        for name in spec["inputs"]:
            v = scope[name] = Value(name)
            g.inputs.append(v)
        self._nodes(g, spec["nodes"], [scope])
        g.outputs = [_lookup(n, [scope]) for n in spec["outputs"]]
        io = {id(v) for v in (*g.inputs, *g.outputs)}
        for ty, name in spec["value_info"]:
            v = _lookup(name, [scope])
            v.type = ty
            if id(v) not in io:
                g.value_info.append(v)
        defaults = [self.attr(a, []) for a in spec["defaults"]]
        f = Function(
            spec.get("domain", ""),
            spec["name"],
            g,
            spec["attributes"],
            defaults,
            spec.get("opset_import", {}),
            spec.get("overload", ""),
        )
        f.doc_string = spec.get("doc_string", "")
        return f


def _lookup(name: str, scopes: list[dict]) -> Value:
    for scope in reversed(scopes):
        v = scope.get(name)
        if v is not None:
            return v
    v = scopes[-1][name] = Value(name)  # defined nowhere (an outer value of a parsed subgraph)
    return v
