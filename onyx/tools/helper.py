"""onnx.helper's authoring functions, producing onyx.ir objects.

    from onyx import helper
    from onyx.ir import DataType as T
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", T.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", T.FLOAT, ["N", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])

Nodes refer to values by name, as in onnx: ``make_node`` leaves its inputs as placeholders and
``make_graph`` links every name to the Value that defines it (a graph input, an initializer or
a node output), looking through enclosing graphs for the names a subgraph reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from ..ir import (
    Attr,
    AttrType,
    DataType,
    Function,
    Graph,
    MapType,
    Model,
    Node,
    OptionalType,
    SequenceType,
    SparseTensorType,
    Tensor,
    TensorType,
    Type,
    Value,
)
from ..ir.dtypes import to_numpy
from ..ir.graph import infer_attr_type

__all__ = [
    "OpsetId",
    "find_min_ir_version_for",
    "make_attribute",
    "make_function",
    "make_graph",
    "make_map_type_proto",
    "make_model",
    "make_node",
    "make_opsetid",
    "make_optional_type_proto",
    "make_sequence_type_proto",
    "make_sparse_tensor_value_info",
    "make_tensor",
    "make_tensor_sequence_value_info",
    "make_tensor_type_proto",
    "make_tensor_value_info",
    "make_value_info",
    "np_dtype_to_tensor_dtype",
    "tensor_dtype_to_np_dtype",
]

#: The IR version each ai.onnx opset came with (the first ONNX release that had it).
IR_VERSION_OF_OPSET = {
    **dict.fromkeys(range(1, 9), 3),
    9: 4,
    10: 5,
    11: 6,
    **dict.fromkeys((12, 13, 14), 7),
    **dict.fromkeys((15, 16, 17, 18), 8),
    19: 9,
    20: 9,
    21: 10,
    22: 10,
    23: 11,
    24: 12,
    **dict.fromkeys((25, 26, 27), 13),
    28: 14,
}


class _Unresolved:
    """Marks a Value made by make_node for a name no graph has linked yet."""


_PLACEHOLDER = _Unresolved()


@dataclass(frozen=True)
class OpsetId:
    domain: str
    version: int


def make_opsetid(domain: str, version: int) -> OpsetId:
    return OpsetId(domain, int(version))


def find_min_ir_version_for(opsetidlist: Iterable[OpsetId], ignore_unknown: bool = False) -> int:
    """The IR version a model needs for these opsets (ai.onnx's decides; others need 3)."""
    need = 3
    for o in opsetidlist:
        if o.domain in ("", "ai.onnx"):
            if o.version not in IR_VERSION_OF_OPSET and not ignore_unknown:
                raise InvalidArgument(f"unknown ai.onnx opset {o.version}")
            need = max(need, IR_VERSION_OF_OPSET.get(o.version, 3))
    return need


# -- types and value infos ----------------------------------------------------------------------


def np_dtype_to_tensor_dtype(dtype) -> DataType:
    from ..ir.dtypes import from_numpy

    return from_numpy(dtype)


def tensor_dtype_to_np_dtype(elem_type: int) -> np.dtype:
    return to_numpy(elem_type)


def _shape(shape):
    if shape is None:
        return None
    return tuple(
        None if d is None or d == "" else d if isinstance(d, str) else int(d) for d in shape
    )


def make_tensor_type_proto(elem_type: int, shape, shape_denotation=None) -> TensorType:
    t = TensorType(DataType(elem_type), _shape(shape))
    if shape_denotation is not None and t.shape is not None:
        from ..ir import Shape

        t = TensorType(t.elem_type, Shape(t.shape.dims, tuple(shape_denotation)))
    return t


def make_sequence_type_proto(inner: Type) -> SequenceType:
    return SequenceType(inner)


def make_optional_type_proto(inner: Type) -> OptionalType:
    return OptionalType(inner)


def make_map_type_proto(key_type: int, value_type: Type) -> MapType:
    return MapType(DataType(key_type), value_type)


def make_value_info(name: str, type_proto: Type | None, doc_string: str = "") -> Value:
    """A typed name for a graph's inputs, outputs or value_info (onnx's ValueInfoProto)."""
    v = Value(name, type_proto)
    v.doc_string = doc_string
    return v


def make_tensor_value_info(
    name: str, elem_type: int, shape, doc_string: str = "", shape_denotation=None
) -> Value:
    """``shape``: dims as ints, names ('N') or None (unknown); None itself: rank unknown."""
    return make_value_info(
        name, make_tensor_type_proto(elem_type, shape, shape_denotation), doc_string
    )


def make_sparse_tensor_value_info(name: str, elem_type: int, shape, doc_string: str = "") -> Value:
    return make_value_info(name, SparseTensorType(DataType(elem_type), _shape(shape)), doc_string)


def make_tensor_sequence_value_info(
    name: str, elem_type: int, shape, doc_string: str = ""
) -> Value:
    return make_value_info(name, SequenceType(make_tensor_type_proto(elem_type, shape)), doc_string)


# -- tensors and attributes ---------------------------------------------------------------------


def make_tensor(
    name: str, data_type: int, dims: Sequence[int], vals: Any, raw: bool = False
) -> Tensor:
    """A tensor of ``data_type`` and ``dims`` from values (or, with ``raw``, little-endian bytes)."""
    dt = DataType(data_type)
    dims = tuple(int(d) for d in dims)
    if raw:
        return Tensor.from_raw(bytes(vals), dt, dims, name=name)
    if dt == DataType.STRING:
        arr = np.array(list(vals), dtype=object)
    else:
        arr = np.asarray(vals)
        if dt in (DataType.COMPLEX64, DataType.COMPLEX128) and arr.dtype.kind != "c":
            pairs = arr.astype(np.float64).reshape(-1, 2)  # onnx's interleaved real/imag pairs
            arr = pairs[:, 0] + 1j * pairs[:, 1]
        arr = arr.astype(to_numpy(dt))
    expected = int(np.prod(dims, dtype=np.int64))
    if arr.size != expected:
        raise InvalidArgument(
            f"make_tensor {name!r}: {arr.size} values for dims {list(dims)} ({expected} needed)"
        )
    return Tensor(arr.reshape(dims), name=name, dtype=dt)


def make_attribute(
    key: str, value: Any, doc_string: str = "", attr_type: int | None = None
) -> Attr:
    """An attribute; its type is inferred from the value unless ``attr_type`` is given (needed
    for an empty list)."""
    if isinstance(value, np.ndarray) and attr_type is None:
        value = Tensor(value)
    if isinstance(value, bytes):
        value = _maybe_str(value)
    elif isinstance(value, list | tuple):
        value = [_maybe_str(v) if isinstance(v, bytes) else v for v in value]
    if attr_type is None:
        if isinstance(value, list) and not value:
            raise InvalidArgument(f"attribute {key!r}: an empty list needs attr_type")
        try:
            kind = infer_attr_type(value)
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"attribute {key!r}: {e}") from None
    else:
        kind = AttrType(attr_type)
    value = _coerce_attr(key, kind, value)
    return Attr(key, kind, value, doc_string)


def _maybe_str(b: bytes):
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b


def _coerce_attr(key: str, kind: AttrType, value):
    """Python values of the attribute type's kind (ints for INT, floats for FLOAT, ...)."""
    try:
        if kind == AttrType.INT:
            return int(value)
        if kind == AttrType.FLOAT:
            return float(value)
        if kind == AttrType.INTS:
            return [int(v) for v in value]
        if kind == AttrType.FLOATS:
            return [float(v) for v in value]
        if kind in (AttrType.STRINGS, AttrType.TENSORS, AttrType.GRAPHS, AttrType.TYPE_PROTOS):
            return [Tensor(v) if isinstance(v, np.ndarray) else v for v in value]
        if kind == AttrType.TENSOR and isinstance(value, np.ndarray):
            return Tensor(value)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"attribute {key!r}: not a {kind.name} value: {e}") from None
    return value


# -- nodes, graphs, functions, models -----------------------------------------------------------


def _placeholder(name: str) -> Value:
    v = Value(name)
    v.extras = _PLACEHOLDER
    return v


def make_node(
    op_type: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    name: str | None = None,
    doc_string: str | None = None,
    domain: str | None = None,
    overload: str | None = None,
    **kwargs: Any,
) -> Node:
    """A node reading and writing values by name; attributes from keyword arguments (sorted by
    name, as onnx does; None values are left out). '' in ``inputs`` is an absent input."""
    ins = [_placeholder(i) if i else None for i in inputs]
    attrs = [make_attribute(k, v) for k, v in sorted(kwargs.items()) if v is not None]
    node = Node(op_type, ins, list(outputs), attrs, domain or "", name or "", overload or "")
    if doc_string:
        node.doc_string = doc_string
    return node


def make_graph(
    nodes: Sequence[Node],
    name: str,
    inputs: Sequence[Value],
    outputs: Sequence[Value],
    initializer: Sequence[Tensor] | None = None,
    doc_string: str | None = None,
    value_info: Sequence[Value] | None = None,
    sparse_initializer: Sequence | None = None,
) -> Graph:
    """A graph whose node inputs are linked by name (names this graph does not define stay
    open for an enclosing graph to link: the outer values a subgraph reads)."""
    g = Graph(name=name)
    scope: dict[str, Value] = {}
    for vi in inputs:
        v = _fresh_value(vi)
        g.inputs.append(v)
        scope[v.name] = v
    for t in initializer or ():
        v = scope.get(t.name)
        if v is None:
            v = scope[t.name] = Value(t.name, TensorType(t.dtype, t.shape))
        v.const_value = t
        g.initializers[t.name] = v
    g.sparse_initializers.extend(sparse_initializer or ())
    for n in nodes:
        for v in n.outputs:
            if v.name:
                scope[v.name] = v
        g.append(n)
    _link(g, [scope])
    for vi in outputs:
        g.outputs.append(_declare(scope, vi))
    for vi in value_info or ():
        g.value_info.append(_declare(scope, vi))
    if doc_string:
        g.doc_string = doc_string
    return g


def _fresh_value(vi: Value) -> Value:
    v = Value(vi.name, vi.type)
    v.doc_string = vi.doc_string
    return v


def _declare(scope: dict[str, Value], vi: Value) -> Value:
    """The Value named like ``vi`` (a new placeholder if undefined), typed as ``vi`` says."""
    v = scope.get(vi.name)
    if v is None:
        v = scope[vi.name] = _placeholder(vi.name)
    if vi.type is not None:
        v.type = vi.type
    if vi.doc_string:
        v.doc_string = vi.doc_string
    return v


def _link(g: Graph, scopes: list[dict[str, Value]]) -> None:
    """Replace placeholder inputs by the Values their names have in the enclosing scopes."""
    for node in g:
        for i, v in enumerate(node.inputs):
            if v is not None and v.extras is _PLACEHOLDER:
                target = _find(v.name, scopes)
                if target is not None and target is not v:
                    node.set_input(i, target)
        for sub in node.subgraphs():
            inner: dict[str, Value] = {v.name: v for v in sub.inputs}
            inner.update(sub.initializers)
            for n in sub:
                inner.update((v.name, v) for v in n.outputs if v.name)
            _link(sub, [*scopes, inner])
            for j, v in enumerate(sub.outputs):
                if v.extras is _PLACEHOLDER:
                    target = _find(v.name, [*scopes, inner])
                    if target is not None and target is not v:
                        target.type = target.type or v.type
                        sub.outputs[j] = target


def _find(name: str, scopes: list[dict[str, Value]]) -> Value | None:
    for scope in reversed(scopes):
        v = scope.get(name)
        if v is not None and v.extras is not _PLACEHOLDER:
            return v
    return None


def make_function(
    domain: str,
    fname: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    nodes: Sequence[Node],
    opset_imports: Sequence[OpsetId],
    attributes: Sequence[str] | None = None,
    attribute_protos: Sequence[Attr] | None = None,
    doc_string: str | None = None,
    overload: str | None = None,
    value_info: Sequence[Value] | None = None,
) -> Function:
    """A model-local function: inputs and outputs are names, attributes are the names of its
    parameters (``attribute_protos``: parameters with defaults)."""
    body = make_graph(nodes, "", [Value(n) for n in inputs], [Value(n) for n in outputs])
    for vi in value_info or ():
        v = next((x for x in body.values() if x.name == vi.name), None)
        if v is not None:
            v.type = vi.type
            if v not in body.inputs and v not in body.outputs:
                body.value_info.append(v)
    f = Function(
        domain,
        fname,
        body,
        list(attributes or ()),
        list(attribute_protos or ()),
        _opset_dict(opset_imports),
        overload or "",
    )
    if doc_string:
        f.doc_string = doc_string
    return f


def _opset_dict(opsets) -> dict[str, int]:
    if opsets is None:
        return {}
    if isinstance(opsets, dict):
        return {k: int(v) for k, v in opsets.items()}
    out = {}
    for o in opsets:
        domain, version = (o.domain, o.version) if isinstance(o, OpsetId) else o
        out[domain] = int(version)
    return out


def make_model(graph: Graph, **kwargs: Any) -> Model:
    """A model of ``graph``. Keywords as onnx's: opset_imports (default: the newest ai.onnx
    opset), ir_version (default: the one the opsets need), producer_name, producer_version,
    domain, model_version, doc_string, functions, metadata_props (a dict)."""
    from ..defs import max_opset

    opsets = _opset_dict(kwargs.pop("opset_imports", None)) or {"": max_opset("")}
    functions = list(kwargs.pop("functions", None) or ())
    ir_version = kwargs.pop("ir_version", None)
    if ir_version is None:
        ids = [OpsetId(d, v) for d, v in opsets.items()]
        ir_version = find_min_ir_version_for(ids, ignore_unknown=True)
    m = Model(graph, opset_imports=opsets, ir_version=int(ir_version), producer_name="")
    for f in functions:
        m.functions[f.key] = f
    for key in ("producer_name", "producer_version", "domain", "model_version", "doc_string"):
        if key in kwargs:
            setattr(m, key, kwargs.pop(key))
    if "metadata_props" in kwargs:
        m.metadata_props = dict(kwargs.pop("metadata_props"))
    if kwargs:
        raise InvalidArgument(f"make_model: unknown keyword(s) {sorted(kwargs)}")
    return m
