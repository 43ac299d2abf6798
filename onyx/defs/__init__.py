"""Operator schemas: every operator of every standard domain with its full version history.

The data (``schemas.json``, one line of JSON per operator, and ``schemas.bin``, the same data
as a marshal blob per operator version, the form a session reads) is generated at dev time by
``scripts/gen_schemas.py`` and read lazily on first use; an operator version is decoded and
its schema built when it is first asked for, and cached.

    from onyx.defs import get_schema
    s = get_schema("Softmax", 13)          # the version in force at opset 13
    s.since_version, s.attributes["axis"].default
"""

from __future__ import annotations

import functools
import marshal
import os
from dataclasses import field
from typing import Any

from ..ir.attr import AttrType
from ..ir.frozen import FrozenValue, lazy_fields

__all__ = [
    "AttributeDef",
    "FormalParameter",
    "FunctionBody",
    "OpSchema",
    "TypeConstraint",
    "domains",
    "get_schema",
    "max_opset",
    "schema_versions",
    "schemas",
]

# (paths as strings: a first pathlib.Path and its with_name cost a cold start ~40 us)
_DATA = os.path.join(os.path.dirname(__file__), "schemas.json")
#: The data as a session reads it (scripts/gen_schemas.py writes it with the JSON).
_TABLE = os.path.join(os.path.dirname(__file__), "schemas.bin")
_DIFF = {0: "unknown", 1: "differentiable", 2: "non_differentiable"}
_NONE: dict = {}  # (a default that is copied, never used)


def _norm_domain(domain: str | None) -> str:
    return "" if domain in (None, "ai.onnx") else domain


# The schema classes are frozen values (ir/frozen.py: what @dataclass(frozen=True)
# gives, without compiling their methods when a session first checks a model).


@lazy_fields
class FormalParameter(FrozenValue):
    """One input or output of an operator."""

    name: str
    type_str: str  # a type parameter ("T") or a concrete type ("tensor(int64)")
    option: str  # "single" | "optional" | "variadic"
    homogeneous: bool = True
    differentiability: str = "unknown"  # "differentiable" | "non_differentiable" | "unknown"
    min_arity: int = 1

    def __init__(
        self,
        name: str,
        type_str: str,
        option: str,
        homogeneous: bool = True,
        differentiability: str = "unknown",
        min_arity: int = 1,
    ):
        self._set(
            name=name,
            type_str=type_str,
            option=option,
            homogeneous=homogeneous,
            differentiability=differentiability,
            min_arity=min_arity,
        )

    @property
    def is_optional(self) -> bool:
        return self.option == "optional"

    @property
    def is_variadic(self) -> bool:
        return self.option == "variadic"


@lazy_fields
class AttributeDef(FrozenValue):
    """One attribute of an operator."""

    name: str
    type: AttrType
    default: Any = None  # None when the attribute has no default
    required: bool = False

    def __init__(self, name: str, type: AttrType, default: Any = None, required: bool = False):  # noqa: A002
        self._set(name=name, type=type, default=default, required=required)


@lazy_fields
class TypeConstraint(FrozenValue):
    """The types a type parameter allows."""

    param: str
    allowed: tuple[str, ...]

    def __init__(self, param: str, allowed: tuple[str, ...]):
        self._set(param=param, allowed=allowed)


@lazy_fields
class FunctionBody(FrozenValue):
    """The standard's function definition of an operator, for one opset version.

    ``nodes`` are dicts ``{"op", "domain"?, "in", "out", "attrs"?}``; attribute values are
    ``[type, value]`` with ``value == {"ref": name}`` for references to the op's attributes and
    tensors as ``{"dtype", "dims", "data"}``. ``to_function`` builds an ``ir.Function``.
    """

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: tuple[str, ...]
    opsets: dict[str, int]
    nodes: tuple[dict, ...]

    def __init__(
        self,
        inputs: tuple[str, ...],
        outputs: tuple[str, ...],
        attributes: tuple[str, ...],
        opsets: dict[str, int],
        nodes: tuple[dict, ...],
    ):
        self._set(inputs=inputs, outputs=outputs, attributes=attributes, opsets=opsets, nodes=nodes)

    def to_function(self, domain: str, name: str, attribute_defaults=()):
        """The body as an ``ir.Function``; ``attribute_defaults`` (ir.Attr) give references to
        attributes a calling node leaves unset their values (the schema's defaults)."""
        from ..ir import Function

        graph = _graph_from_json(
            {"inputs": self.inputs, "outputs": self.outputs, "nodes": self.nodes}, {}, name
        )
        return Function(domain, name, graph, self.attributes, attribute_defaults, self.opsets)


def _graph_from_json(spec: dict, outer: dict, name: str = ""):
    """An ir.Graph from stored node specs; names not defined here resolve in ``outer``."""
    from ..ir import Attr, Graph, Node, Value

    values = {n: Value(n) for n in spec["inputs"]}
    scope = {**outer, **values}

    def value(n: str) -> Value | None:
        if not n:
            return None
        return scope.setdefault(n, Value(n))

    inputs = [values[n] for n in spec["inputs"]]
    nodes = []
    for node in spec["nodes"]:
        attrs = []
        for key, (atype, v) in node.get("attrs", {}).items():
            if atype == AttrType.GRAPH and isinstance(v, dict) and "nodes" in v:
                attrs.append(Attr(key, AttrType.GRAPH, _graph_from_json(v, scope, key)))
            else:
                attrs.append(_attr_from_json(key, atype, v))
        ins = [value(i) for i in node["in"]]
        outs = []
        for o in node["out"]:
            outs.append(Value(o))
            if o:
                scope[o] = outs[-1]
        nodes.append(Node(node["op"], ins, outs, attrs, domain=node.get("domain", "")))
    return Graph(inputs, [scope[o] for o in spec["outputs"]], nodes, name=name)


def _float(x):
    return float(x) if isinstance(x, str) else x  # "nan" / "inf" are stored as strings


def _tensor_from_json(t: dict):
    import numpy as np

    from ..ir import Tensor
    from ..ir.dtypes import DataType, to_numpy

    dtype = DataType(t["dtype"])
    data = [_float(x) for x in t["data"]] if dtype != DataType.STRING else t["data"]
    arr = np.array(data, dtype=to_numpy(dtype)).reshape(t["dims"])
    return Tensor(arr, dtype=dtype)


def _attr_value(atype: AttrType, v):
    if v is None:
        return None
    if atype == AttrType.FLOAT:
        return _float(v)
    if atype == AttrType.FLOATS:
        return [_float(x) for x in v]
    if atype == AttrType.TENSOR:
        return _tensor_from_json(v)
    return v


def _attr_from_json(name: str, atype: int, v):
    from ..ir import Attr

    atype = AttrType(atype)
    if isinstance(v, dict) and "ref" in v:
        return Attr(name, atype, None, ref_attr_name=v["ref"])
    return Attr(name, atype, _attr_value(atype, v))


@lazy_fields
class OpSchema(FrozenValue):
    """One version of an operator: its inputs, outputs, attributes and type constraints."""

    name: str
    domain: str
    since_version: int
    inputs: tuple[FormalParameter, ...]
    outputs: tuple[FormalParameter, ...]
    attributes: dict[str, AttributeDef]
    type_constraints: dict[str, TypeConstraint]
    min_input: int
    max_input: int
    min_output: int
    max_output: int
    deprecated: bool = False
    experimental: bool = False
    #: Function bodies keyed by the opset version they are written for.
    functions: dict[int, FunctionBody] = field(default_factory=dict)
    #: The standard builds this op's body from the node (types, attributes): not stored here.
    has_context_dependent_function: bool = False

    def __init__(
        self,
        name: str,
        domain: str,
        since_version: int,
        inputs: tuple[FormalParameter, ...],
        outputs: tuple[FormalParameter, ...],
        attributes: dict[str, AttributeDef],
        type_constraints: dict[str, TypeConstraint],
        min_input: int,
        max_input: int,
        min_output: int,
        max_output: int,
        deprecated: bool = False,
        experimental: bool = False,
        functions: dict[int, FunctionBody] = _NONE,
        has_context_dependent_function: bool = False,
    ):
        self._set(
            name=name,
            domain=domain,
            since_version=since_version,
            inputs=inputs,
            outputs=outputs,
            attributes=attributes,
            type_constraints=type_constraints,
            min_input=min_input,
            max_input=max_input,
            min_output=min_output,
            max_output=max_output,
            deprecated=deprecated,
            experimental=experimental,
            functions={} if functions is _NONE else functions,
            has_context_dependent_function=has_context_dependent_function,
        )

    @property
    def has_function(self) -> bool:
        return bool(self.functions)

    @property
    def function_body(self) -> FunctionBody | None:
        """The body written for the newest opset (see ``function_for`` for a given opset)."""
        return self.functions[max(self.functions)] if self.functions else None

    def function_for(self, opset: int) -> FunctionBody | None:
        """The body that applies at ``opset``: the newest one written for an opset <= it."""
        usable = [v for v in self.functions if v <= opset]
        return self.functions[max(usable)] if usable else None

    @functools.cached_property
    def defaults(self) -> dict[str, Any]:
        """Attribute name -> default value, for the attributes that have one."""
        return {a.name: a.default for a in self.attributes.values() if a.default is not None}

    @property
    def required_attributes(self) -> list[str]:
        return [a.name for a in self.attributes.values() if a.required]

    def allowed_types(self, type_str: str) -> tuple[str, ...] | None:
        """The type strings a formal parameter accepts (None: any)."""
        tc = self.type_constraints.get(type_str)
        if tc is not None:
            return tc.allowed
        return (type_str,) if "(" in type_str else None

    def __hash__(self) -> int:
        return hash((self.domain, self.name, self.since_version))

    def __repr__(self) -> str:
        dom = f"{self.domain}::" if self.domain else ""
        return f"OpSchema({dom}{self.name}-{self.since_version})"


# -- loading ----------------------------------------------------------------------------------


@functools.cache
def _data() -> bytes:
    """The data file: a JSON header line (each domain's opset range), then a line per operator,
    ``domain<TAB>op<TAB>`` and the JSON of its versions. Read (whole) only for every operator
    (``schemas()``) or where ``schemas.bin`` is not made for it: a session reads the table."""
    with open(_DATA, "rb") as f:
        return f.read()


def _read(start: int, end: int) -> bytes:
    """Bytes ``start:end`` of the table (schemas.bin)."""
    if not hasattr(os, "pread"):  # (Windows)
        with open(_TABLE, "rb") as f:
            f.seek(start)
            return f.read(end - start)
    return os.pread(_descriptor(_TABLE), end - start, start)


@functools.cache
def _descriptor(path: str) -> int:
    """A descriptor of the file ``path``, opened at its first read and held for the process
    (not inherited by a child it starts): a session reads the table's head and a blob per
    operator, and opening and closing the file for each was most of a read's cost."""
    return os.open(path, os.O_RDONLY)


@functools.cache
def _table_head() -> bytes | None:
    """The head of ``schemas.bin`` (scripts/gen_schemas.py's render_table: where each
    operator version's marshal blob lies, and the domains' opset ranges), or None where the
    table is missing, of another format or made for another JSON file (its size): the JSON
    is then read and scanned. A cold session reads its operators' versions through it: the
    JSON's scanner (the _json extension's import) and its lines, every version of an operator
    parsed to build one, were a millisecond of a small model's creation."""
    try:
        first = _read(0, 64).split(b"\n", 1)[0].split()
        if len(first) != 3 or first[0] != b"onyxdefs1" or int(first[1]) != os.stat(_DATA).st_size:
            return None
        head = _read(0, int(first[2]))
    except (OSError, ValueError):
        return None
    return head if len(head) == int(first[2]) and head.endswith(b"\n") else None


def _table_entries(op: str, domain: str) -> list[tuple[int, int, int]] | None:
    """(since, offset, length) of each of an operator's versions in the table, oldest first
    (empty: no such operator), or None where there is no table for the data."""
    head = _table_head()
    if head is None:
        return None
    try:
        key = b"\nop\t%s\t%s\t" % (domain.encode(), op.encode())
    except UnicodeEncodeError:  # (a lone surrogate: no operator's name)
        return []
    at = head.find(key)  # (a line holds three tabs: a name with one of its own matches none)
    if at < 0 or "\n" in op or "\n" in domain:
        return []
    at += len(key)
    row = head[at : head.index(b"\n", at)].split()
    base = len(head)
    return [(int(s), base + int(o), int(n)) for s, o, n in (e.split(b":") for e in row)]


def _table_version(offset: int, length: int) -> dict:
    """One operator version's dict (what the JSON holds for it), read from the table."""
    return marshal.loads(_read(offset, offset + length))


@functools.cache
def _max_opsets() -> dict:
    head = _table_head()
    if head is None:
        data = _data()
        return _json(data[: data.index(b"\n")])["max_opsets"]
    rows = head[: head.find(b"\nop\t")].split(b"\n")[1:]
    return {
        domain.decode(): [int(lo), int(hi)]
        for domain, lo, hi in (row.split(b"\t")[1:] for row in rows)
    }


@functools.cache
def _index() -> dict[tuple[bytes, bytes], tuple[int, int]]:
    """(domain, op) as bytes -> where the JSON of its versions starts and ends in the data:
    found by jumping from tab to tab and line to line (no split, no decoding of the rest)."""
    data, index = _data(), {}
    find, at = data.find, data.index(b"\n") + 1
    while at:
        end = find(b"\n", at)
        name_at = find(b"\t", at) + 1
        versions_at = find(b"\t", name_at) + 1
        key = (data[at : name_at - 1], data[name_at : versions_at - 1])
        index[key] = (versions_at, end if end >= 0 else len(data))
        at = end + 1 if end >= 0 else 0
    return index


def _versions_json(op: str, domain: str) -> bytes | None:
    """The JSON of an operator's versions (None: no such operator), from the data file."""
    span = _index().get((domain.encode(), op.encode()))
    return None if span is None else _data()[span[0] : span[1]]


def _json(text: bytes) -> Any:
    """JSON text parsed by the interpreter's C scanner, where it has one: importing the json
    package (which compiles its regular expressions) cost more than a small model's rows."""
    scan = _scanner()
    if scan is None:
        import json

        return json.loads(text)
    return scan(text.decode(), 0)[0]


@functools.cache
def _scanner():
    """_json's scanner with json.loads' settings, or None where there is no _json."""
    try:
        from _json import make_scanner
    except ImportError:  # (an interpreter without the C module)
        return None

    class Settings:  # (what the scanner reads: json.JSONDecoder's defaults)
        strict = True
        object_hook = object_pairs_hook = None
        parse_float, parse_int = float, int
        parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                          "NaN": float("nan")}.__getitem__  # fmt: skip

    return make_scanner(Settings())


def _versions(op: str, domain: str) -> list[dict]:
    """The raw versions of an operator, oldest first, parsed from the JSON (empty if the
    operator is unknown)."""
    versions = _versions_json(op, domain)
    if versions is None:
        return []
    return sorted(_json(versions), key=lambda s: s["since"])


def _param(p) -> FormalParameter:
    name, type_str, option, homogeneous, diff, min_arity = p
    return FormalParameter(name, type_str, option, homogeneous, _DIFF[diff], min_arity)


def _build(s: dict) -> OpSchema:
    attrs = {}
    for name, atype, default, required in s["attrs"]:
        atype = AttrType(atype)
        attrs[name] = AttributeDef(name, atype, _attr_value(atype, default), required)
    functions = {
        int(v): FunctionBody(
            tuple(f["inputs"]),
            tuple(f["outputs"]),
            tuple(f["attributes"]),
            dict(f["opsets"]),
            tuple(f["nodes"]),
        )
        for v, f in s.get("functions", {}).items()
    }
    return OpSchema(
        name=s["name"],
        domain=s["domain"],
        since_version=s["since"],
        inputs=tuple(_param(p) for p in s["inputs"]),
        outputs=tuple(_param(p) for p in s["outputs"]),
        attributes=attrs,
        type_constraints={p: TypeConstraint(p, tuple(a)) for p, a in s["types"]},
        min_input=s["min_input"],
        max_input=s["max_input"],
        min_output=s["min_output"],
        max_output=s["max_output"],
        deprecated=s.get("deprecated", False),
        experimental=s.get("experimental", False),
        functions=functions,
        has_context_dependent_function=s.get("context_function", False),
    )


@functools.cache
def _raw_versions(op: str, domain: str) -> tuple[tuple[int, ...], list]:
    """An operator's versions' since_version, oldest first, and a slot per version: where the
    table holds it (or its dict, read from the JSON), then its schema, built when first asked
    for (a model's check asks for one version of each of its operators)."""
    if op.__class__ is not str or domain.__class__ is not str:
        return (), []  # (a name that is not UTF-8, read as bytes: no operator's)
    entries = _table_entries(op, domain)
    if entries is not None:
        return tuple(e[0] for e in entries), [e[1:] for e in entries]
    raw = _versions(op, domain)
    return tuple(s["since"] for s in raw), raw


def _built(op: str, domain: str, i: int) -> OpSchema:
    _, slots = _raw_versions(op, domain)
    slot = slots[i]
    if slot.__class__ is not OpSchema:  # (two threads may both build it: either is right)
        slot = slots[i] = _build(slot if slot.__class__ is dict else _table_version(*slot))
    return slot


@functools.cache
def schema_versions(op: str, domain: str = "") -> tuple[OpSchema, ...]:
    """Every version of an operator, oldest first (empty if the operator is unknown)."""
    domain = _norm_domain(domain)
    sinces, _ = _raw_versions(op, domain)
    return tuple(_built(op, domain, i) for i in range(len(sinces)))


@functools.cache
def _lookup(op: str, max_version: int | None, domain: str) -> OpSchema | None:
    sinces, _ = _raw_versions(op, domain)
    found = None
    for i, since in enumerate(sinces):
        if max_version is not None and since > max_version:
            break
        found = i
    return None if found is None else _built(op, domain, found)


def get_schema(op: str, max_version: int | None = None, domain: str = "") -> OpSchema | None:
    """The schema of ``op`` in force at opset ``max_version`` of ``domain`` (None: newest).

    That is the version with the greatest ``since_version <= max_version``. Returns None when
    the operator does not exist in that domain at that opset.
    """
    return _lookup(op, max_version, _norm_domain(domain))


def schemas(domain: str | None = None) -> list[OpSchema]:
    """Every schema version of every operator (of one domain if given)."""
    want = None if domain is None else _norm_domain(domain)
    return [
        s
        for (dom, name) in sorted((d.decode(), n.decode()) for d, n in _index())
        if want is None or dom == want
        for s in schema_versions(name, dom)
    ]


def domains() -> dict[str, tuple[int, int]]:
    """Known domains and their (first, last) opset versions."""
    return {d: (lo, hi) for d, (lo, hi) in _max_opsets().items()}


def max_opset(domain: str = "") -> int | None:
    """The newest opset version known for a domain (None for an unknown domain)."""
    rng = _max_opsets().get(_norm_domain(domain))
    return rng[1] if rng else None


def is_known_domain(domain: str) -> bool:
    return _norm_domain(domain) in _max_opsets()
