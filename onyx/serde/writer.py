"""IR -> protobuf messages: the inverse of reader.py, restoring what ``extras`` kept."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir.attr import Attr, AttrType
from ..ir.graph import Function, Graph, Model, Node, Value
from ..ir.tensor import SparseTensor, Tensor
from ..ir.types import (
    MapType,
    OpaqueType,
    OptionalType,
    SequenceType,
    SparseTensorType,
    TensorType,
)
from .reader import ATTR_FIELD
from .tensors import tensor_to_proto, write_props
from .text import extend_text, set_text

A = AttrType


def _restore(msg, extras: dict) -> None:
    """Put back the fields kept aside at load: unknown/unmodeled ones first."""
    residual = extras.get("residual")
    if residual:
        msg.MergeFromString(residual)


def _mark_present(msg, extras: dict) -> None:
    for f in extras.get("present", ()):
        if not msg.HasField(f):
            setattr(msg, f, getattr(msg, f))


def _write_pairs(field, current: dict, original, key: str, value: str) -> None:
    """A dict as repeated key/value messages; the original entries if it is unchanged."""
    if original:
        entries = [field.add() for _ in original]
        for e, b in zip(entries, original):
            e.ParseFromString(b)
        if {getattr(e, key): getattr(e, value) for e in entries} == current:
            return
        del field[:]
    for k, v in current.items():
        e = field.add()
        set_text(e, key, k)
        set_text(e, value, v)


class Writer:
    """Writes IR objects into messages.

    ``placement(tensor, tensor_proto, top_level)`` may store a tensor's data elsewhere (external
    file, streamed bytes) and return True; ``top_level`` is True for main-graph initializers.
    """

    def __init__(self, placement: Callable | None = None):
        self.placement = placement
        self._fresh: dict[int, str] = {}
        self._top_graph: Graph | None = None

    # -- names --------------------------------------------------------------------------------
    def name(self, v: Value) -> str:
        if v.name:
            return v.name
        name = self._fresh.get(id(v))
        if name is None:
            name = self._fresh[id(v)] = f"_onyx_{len(self._fresh)}"
        return name

    # -- types --------------------------------------------------------------------------------
    def type(self, ty, tp) -> None:
        if ty.denotation is not None:
            set_text(tp, "denotation", ty.denotation)
        if isinstance(ty, TensorType | SparseTensorType):
            t = tp.tensor_type if isinstance(ty, TensorType) else tp.sparse_tensor_type
            t.SetInParent()
            if ty.elem_type:
                t.elem_type = ty.elem_type
            if ty.shape is not None:
                s = t.shape
                s.SetInParent()
                dens = ty.shape.denotations
                for i, d in enumerate(ty.shape.dims):
                    dim = s.dim.add()
                    if isinstance(d, str | bytes):  # (bytes: a param that is not UTF-8)
                        set_text(dim, "dim_param", d)
                    elif d is not None:
                        dim.dim_value = int(d)
                    if dens is not None and dens[i] is not None:
                        set_text(dim, "denotation", dens[i])
        elif isinstance(ty, SequenceType | OptionalType):
            t = tp.sequence_type if isinstance(ty, SequenceType) else tp.optional_type
            t.SetInParent()
            if ty.elem is not None:
                self.type(ty.elem, t.elem_type)
        elif isinstance(ty, MapType):
            tp.map_type.key_type = ty.key
            if ty.value is not None:
                self.type(ty.value, tp.map_type.value_type)
        elif isinstance(ty, OpaqueType):
            t = tp.opaque_type
            t.SetInParent()
            if ty.domain:
                set_text(t, "domain", ty.domain)
            if ty.name:
                set_text(t, "name", ty.name)

    def value_info(self, v: Value, vi) -> None:
        extras = v.extras if isinstance(v.extras, dict) else {}
        _restore(vi, extras)
        name = self.name(v)
        if name:
            set_text(vi, "name", name)
        kept = extras.get("type")
        if kept is not None and kept[0] is v.type:
            vi.type.ParseFromString(kept[1])
        elif v.type is not None:
            self.type(v.type, vi.type)
        if v.doc_string:
            set_text(vi, "doc_string", v.doc_string)
        write_props(vi.metadata_props, v.metadata_props, extras.get("props"))
        _mark_present(vi, extras)

    # -- tensors and attributes ---------------------------------------------------------------
    def tensor(self, t, tp, name: str | None = None, top_level: bool = False):
        if isinstance(t, np.ndarray):
            t = Tensor(t)
        place = None
        if self.placement is not None:

            def place(tensor, proto):
                return self.placement(tensor, proto, top_level)

        return tensor_to_proto(t, tp, name, place)

    def sparse(self, s: SparseTensor, sp) -> None:
        extras = s.extras or {}
        _restore(sp, extras)
        absent = extras.get("absent", ())
        if "values" not in absent:
            self.tensor(s.values, sp.values)
        if "indices" not in absent:
            self.tensor(s.indices, sp.indices)
        sp.dims.extend(s.dims)

    def attribute(self, a: Attr, ap) -> None:
        extras = a.extras or {}
        _restore(ap, extras)
        set_text(ap, "name", a.name)
        if a.ref_attr_name:
            set_text(ap, "ref_attr_name", a.ref_attr_name)
        if a.doc_string:
            set_text(ap, "doc_string", a.doc_string)
        if not extras.get("absent_type"):
            ap.type = a.type
        _mark_present(ap, extras)
        array = a.array  # (a long FLOATS attribute read from a file: its list never made)
        value = a.value if array is None else array
        field = ATTR_FIELD.get(a.type)
        if field is None or value is None:
            return
        if extras.get("absent_value") and not value and a.type in (A.FLOAT, A.INT, A.STRING):
            return
        k = a.type
        if k == A.FLOAT:
            ap.f = float(value)
        elif k == A.INT:
            ap.i = int(value)
        elif k == A.STRING:
            ap.s = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        elif k == A.TENSOR:
            self.tensor(value, ap.t)
        elif k == A.GRAPH:
            self.graph(value, ap.g)
        elif k == A.SPARSE_TENSOR:
            self.sparse(value, ap.sparse_tensor)
        elif k == A.TYPE_PROTO:
            kept = extras.get("tp")
            if kept is not None and kept[0] is value:
                ap.tp.ParseFromString(kept[1])
            else:
                self.type(value, ap.tp)
        elif k == A.FLOATS:
            ap.floats.extend(value.tolist() if array is not None else [float(x) for x in value])
        elif k == A.INTS:
            ap.ints.extend(value.tolist() if array is not None else [int(x) for x in value])
        elif k == A.STRINGS:
            if array is not None:  # (its bytes as read)
                ap.strings.extend(value.tolist())
            else:
                ap.strings.extend([s.encode("utf-8") if isinstance(s, str) else s for s in value])
        elif k == A.TENSORS:
            for t in value:
                self.tensor(t, ap.tensors.add())
        elif k == A.GRAPHS:
            for g in value:
                self.graph(g, ap.graphs.add())
        elif k == A.SPARSE_TENSORS:
            for s in value:
                self.sparse(s, ap.sparse_tensors.add())
        elif k == A.TYPE_PROTOS:
            for ty in value:
                self.type(ty, ap.type_protos.add())

    # -- graphs -------------------------------------------------------------------------------
    def node(self, n: Node, np_, graph_outputs: set[int]) -> None:
        extras = n.extras or {}
        _restore(np_, extras)
        name = self.name
        extend_text(np_, "input", ["" if v is None else name(v) for v in n.inputs])
        extend_text(
            np_,
            "output",
            [
                name(v)
                if v.name or v.has_uses() or id(v) in graph_outputs or id(v) in self._fresh
                else ""
                for v in n.outputs
            ],
        )
        if n.name:
            set_text(np_, "name", n.name)
        if n.op_type:
            set_text(np_, "op_type", n.op_type)
        if n.domain:
            set_text(np_, "domain", n.domain)
        if n.overload:
            set_text(np_, "overload", n.overload)
        if n.doc_string:
            set_text(np_, "doc_string", n.doc_string)
        _mark_present(np_, extras)
        for a in n.attributes.values():
            self.attribute(a, np_.attribute.add())
        if n.metadata_props or "props" in extras:
            write_props(np_.metadata_props, n.metadata_props, extras.get("props"))

    def graph(self, g: Graph, gp, initializers: bool = True) -> None:
        extras = g.extras or {}
        top = self._top_graph is None
        if top:
            self._top_graph = g
        _restore(gp, extras)
        if g.name:
            set_text(gp, "name", g.name)
        if g.doc_string:
            set_text(gp, "doc_string", g.doc_string)
        _mark_present(gp, extras)
        for v in g.inputs:
            self.value_info(v, gp.input.add())
        if initializers:
            self.initializers(g, gp.initializer, top)
        for s in g.sparse_initializers:
            self.sparse(s, gp.sparse_initializer.add())
        outs = {id(v) for v in g.outputs}
        for n in g:
            self.node(n, gp.node.add(), outs)
        overrides = extras.get("overrides", {})
        for kind, values, field in (
            ("output", g.outputs, gp.output),
            ("value_info", g.value_info, gp.value_info),
        ):
            for i, v in enumerate(values):
                kept = overrides.get((kind, i))
                if kept is not None and kept[0] is v and kept[1] is v.type:
                    field.add().ParseFromString(kept[2])
                else:
                    self.value_info(v, field.add())
        write_props(gp.metadata_props, g.metadata_props, extras.get("props"))

    def initializers(self, g: Graph, field, top: bool) -> None:
        for v in g.initializers.values():
            if v.const_value is not None:
                self.tensor(v.const_value, field.add(), v.name, top)

    # -- functions and models -----------------------------------------------------------------
    def function(self, f: Function, fp) -> None:
        extras = f.extras or {}
        _restore(fp, extras)
        if f.name:
            set_text(fp, "name", f.name)
        if f.domain:
            set_text(fp, "domain", f.domain)
        if f.overload:
            set_text(fp, "overload", f.overload)
        if f.doc_string:
            set_text(fp, "doc_string", f.doc_string)
        _mark_present(fp, extras)
        g = f.graph
        extend_text(fp, "input", [self.name(v) for v in g.inputs])
        extend_text(fp, "output", [self.name(v) for v in g.outputs])
        extend_text(fp, "attribute", f.attributes)
        for a in f.attribute_defaults:
            self.attribute(a, fp.attribute_proto.add())
        outs = {id(v) for v in g.outputs}
        for n in g:
            self.node(n, fp.node.add(), outs)
        _write_pairs(fp.opset_import, f.opset_imports, extras.get("opsets"), "domain", "version")
        for v in g.value_info:
            self.value_info(v, fp.value_info.add())
        write_props(fp.metadata_props, f.metadata_props, extras.get("props"))

    def model_header(self, m: Model, mp) -> None:
        """Every field of ModelProto but the graph."""
        extras = m.extras if isinstance(m.extras, dict) else {}
        _restore(mp, extras)
        if m.ir_version:
            mp.ir_version = m.ir_version
        _write_pairs(mp.opset_import, m.opset_imports, extras.get("opsets"), "domain", "version")
        for f in ("producer_name", "producer_version", "domain", "doc_string"):
            value = getattr(m, f)
            if value:
                set_text(mp, f, value)
        if m.model_version:
            mp.model_version = m.model_version
        _mark_present(mp, extras)
        write_props(mp.metadata_props, m.metadata_props, extras.get("props"))
        for f in m.functions.values():
            self.function(f, mp.functions.add())
