"""float32 -> float16 / bfloat16 conversion of a model's computation.

    half = onyx.to_float16(model)                       # inputs and outputs stay float32
    half = onyx.to_float16(model, keep_io_types=False, op_block_list=["Softmax"])
    bf = onyx.to_bfloat16(model)

Every float32 value, initializer, Constant and Cast target becomes the narrow type, except
around the ops that must compute in float32: those of ``op_block_list`` (default
``DEFAULT_OP_BLOCK_LIST``), the nodes named in ``node_block_list``, ops of domains without
standard schemas (com.microsoft, custom ops, local functions) and the nodes reading a value
whose type inference could not tell (downstream of such ops). Such a node gets Casts to
float32 before it and back after it. An input or output of a kept op whose schema does not
accept the narrow type (Resize's scales, a pre-19 DequantizeLinear's output, ...) keeps
float32 the same way. Weights are clamped into the narrow type's range as
onnxconverter-common does (``min_positive_val``, ``max_finite_val``).
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Iterable

import numpy as np

from .. import defs
from ..ir import Attr, AttrType, DataType, Graph, Model, Node, Tensor, TensorType, Value
from ..ir.dtypes import to_numpy
from ._common import as_model, copy_model, put_after_output

__all__ = ["DEFAULT_OP_BLOCK_LIST", "to_bfloat16", "to_float16"]

#: Ops kept in float32: random generators and ranges (their float attributes and outputs
#: define values, not approximations), ops that select or count (TopK, NonMaxSuppression,
#: CumSum over long axes), geometry that indexes by computed coordinates (Resize, RoiAlign,
#: Upsample, GridSample), the ai.onnx.ml operators (float32 only in the standard), and the
#: recurrences (onnxruntime 1.32's CPU provider crashes on float16 LSTM / GRU / RNN).
DEFAULT_OP_BLOCK_LIST = frozenset(
    {
        "LSTM",
        "GRU",
        "RNN",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
        "Range",
        "TopK",
        "NonMaxSuppression",
        "RoiAlign",
        "Resize",
        "Upsample",
        "GridSample",
        "CumSum",
        "Min",
        "Max",
        "ArrayFeatureExtractor",
        "Binarizer",
        "CastMap",
        "CategoryMapper",
        "DictVectorizer",
        "FeatureVectorizer",
        "Imputer",
        "LabelEncoder",
        "LinearClassifier",
        "LinearRegressor",
        "Normalizer",
        "OneHotEncoder",
        "SVMClassifier",
        "SVMRegressor",
        "Scaler",
        "TreeEnsemble",
        "TreeEnsembleClassifier",
        "TreeEnsembleRegressor",
        "ZipMap",
    }
)

_STANDARD = ("", "ai.onnx")
F32 = DataType.FLOAT


def to_float16(
    model,
    keep_io_types: bool = True,
    op_block_list: Iterable[str] | None = None,
    node_block_list: Iterable[str] | None = None,
    min_positive_val: float = 1e-7,
    max_finite_val: float = 1e4,
) -> Model:
    """A copy of ``model`` computing in float16 (see the module's notes)."""
    return _convert(
        as_model(model),
        DataType.FLOAT16,
        keep_io_types,
        op_block_list,
        node_block_list,
        min_positive_val,
        max_finite_val,
    )


def to_bfloat16(
    model,
    keep_io_types: bool = True,
    op_block_list: Iterable[str] | None = None,
    node_block_list: Iterable[str] | None = None,
) -> Model:
    """A copy of ``model`` computing in bfloat16 (float32's range: no clamping needed)."""
    return _convert(
        as_model(model), DataType.BFLOAT16, keep_io_types, op_block_list, node_block_list, 0.0, None
    )


# ---------------------------------------------------------------------------------- the pass


class _Converter:
    def __init__(self, m: Model, target: DataType, block_ops, block_nodes, lo: float, hi):
        self.m = m
        self.target = target
        self.block_ops = set(DEFAULT_OP_BLOCK_LIST if block_ops is None else block_ops)
        self.block_nodes = set(block_nodes or ())
        self.lo, self.hi = lo, hi
        self.names = {v.name for g in _graphs(m.graph) for v in g.values() if v.name}
        self._serial = itertools.count()
        self.created: set[int] = set()  # ids of the Casts this pass made

    def fresh(self, base: str) -> str:
        while True:
            name = f"{base}_{next(self._serial)}"
            if name not in self.names:
                self.names.add(name)
                return name

    def opset(self, node: Node) -> int | None:
        return self.m.opset(node.domain)

    def schema(self, node: Node):
        if node.domain not in _STANDARD and node.domain != "ai.onnx.ml":
            return None
        version = self.opset(node)
        return defs.get_schema(node.op_type, version, node.domain) if version else None

    def blocked(self, node: Node) -> bool:
        if node.op_type in self.block_ops or (node.name and node.name in self.block_nodes):
            return True
        if any(v is not None and v.type is None for v in node.inputs):
            return True  # a value no rule typed (after a custom op): its precision stays
        if _is_accumulator_cast(node) or any(
            v is not None and v.producer is not None and _is_accumulator_cast(v.producer)
            for v in node.inputs
        ):
            return True  # an int32 sum (ConvInteger, MatMulInteger) overflows float16 until scaled
        s = self.schema(node)
        return s is None or node.domain == "ai.onnx.ml"

    # -- data ---------------------------------------------------------------------------------
    def narrow(self, arr: np.ndarray) -> np.ndarray:
        a = np.asarray(arr, dtype=np.float32)
        if self.hi is not None:
            tiny = (np.abs(a) < self.lo) & (a != 0)
            a = np.where(tiny, np.copysign(self.lo, a), a)
            a = np.clip(a, -self.hi, self.hi) if np.isfinite(a).all() else _clip_finite(a, self.hi)
        return a.astype(to_numpy(self.target))

    def narrow_tensor(self, t: Tensor) -> Tensor:
        out = Tensor(self.narrow(t.numpy()), name=t.name, dtype=self.target)
        out.doc_string = t.doc_string
        return out

    # -- casts --------------------------------------------------------------------------------
    def cast(
        self, g: Graph, before: Node | None, src: Value, to: DataType, out: Value | None = None
    ):
        """A Cast of ``src`` to ``to`` inserted before ``before`` (at the end if None)."""
        if out is None:
            out = Value(self.fresh(f"{src.name or 'v'}_{to.name.lower()}"))
        out.type = _with_elem(src.type, to)
        node = Node("Cast", [src], [out], {"to": int(to)}, name=self.fresh("cast"))
        if before is None:
            g.append(node)
        else:
            g.insert_before(before, node)
        self.created.add(id(node))
        return node.outputs[0]


def _convert(m: Model, target, keep_io, block_ops, block_nodes, lo, hi) -> Model:
    m = copy_model(m)
    from ..inference import infer_shapes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        infer_shapes(m)
    c = _Converter(m, target, block_ops, block_nodes, lo, hi)
    main = m.graph
    graphs = list(_graphs(main))
    blocked = {id(n) for g in graphs for n in g if c.blocked(n)}
    # values that stay float32: initializers only blocked nodes read, inputs/outputs kept
    keep32 = _initializers_only_blocked(graphs, blocked) | _between_blocked(graphs, blocked)
    io_in = (
        [v for v in main.inputs if _is_f32(v) and v.name not in main.initializers]
        if keep_io
        else []
    )
    io_out = [v for v in main.outputs if _is_f32(v)] if keep_io else []
    # 1. retype every other float32 value, converting the weights
    for g in graphs:
        for v in _all_values(g):
            if _is_f32(v) and id(v) not in keep32:
                v.type = _with_elem(v.type, target)
                if v.const_value is not None and v.const_value.dtype == F32:
                    v.const_value = c.narrow_tensor(v.const_value)
        for node in g:
            if id(node) not in blocked:
                _retype_attributes(node, c)
    # 2. graph inputs and outputs kept float32: a Cast at each border
    first = next(iter(main), None)
    for v in io_in:
        narrow = Value(c.fresh(f"{v.name}_{target.name.lower()}"))
        for node, i in v.uses():
            node.set_input(i, narrow)
        v.type = _with_elem(v.type, F32)
        c.cast(main, first, v, target, out=narrow)
    for v in io_out:
        if v.producer is None:
            continue  # an input passed straight through: it stays as it is
        narrow_type = v.type
        name = v.name
        v.name = c.fresh(f"{name}_{target.name.lower()}")
        out = Value(name, _with_elem(narrow_type, F32))
        node = Node("Cast", [v], [out], {"to": int(F32)}, name=c.fresh("cast"))
        main.outputs = [out if o is v else o for o in main.outputs]
        if v.producer.graph is main:
            main.insert_after(v.producer, node)
        else:
            main.append(node)
        c.created.add(id(node))
    # 3. float32 islands: blocked nodes, and inputs/outputs a kept op cannot take narrow
    for g in graphs:
        for node in list(g):
            if id(node) in c.created:
                continue
            _wrap(c, g, node, id(node) in blocked)
    m.graph.topological_sort()
    # (the inferred types stay: onnxruntime 1.32's optimizer crashes on some float16 graphs
    # without them, e.g. bert_ort_extended)
    return m


def _wrap(c: _Converter, g: Graph, node: Node, blocked: bool) -> None:
    target = c.target
    schema = None if blocked else c.schema(node)
    narrow_name = f"tensor({'float16' if target == DataType.FLOAT16 else 'bfloat16'})"
    for i, v in enumerate(node.inputs):
        if v is None or not _is_elem(v, target):
            continue
        if blocked or not _accepts(schema, i, narrow_name, inputs=True):
            node.set_input(i, c.cast(g, node, v, F32))
    for j, v in enumerate(node.outputs):
        if not _is_elem(v, target) or not v.name:
            continue
        if blocked or not _accepts(schema, j, narrow_name, inputs=False):
            narrow_type = v.type
            v.type = _with_elem(narrow_type, F32)
            new = put_after_output(
                g, v, functools.partial(_cast_node, int(target), c.fresh("cast"))
            )
            new.type = narrow_type
            c.created.add(id(new.producer))


def _cast_node(to: int, name: str, src: Value) -> Node:
    return Node("Cast", [src], [""], {"to": to}, name=name)


def _is_accumulator_cast(node: Node) -> bool:
    """A Cast of int32 values to float32: dynamic quantization's integer sums."""
    if node.op_type != "Cast" or node.attr("to") != F32 or not node.inputs:
        return False
    src = node.inputs[0]
    return src is not None and _is_elem(src, DataType.INT32)


def _accepts(schema, i: int, type_name: str, inputs: bool) -> bool:
    if schema is None:
        return False
    params = schema.inputs if inputs else schema.outputs
    if not params:
        return True
    p = params[min(i, len(params) - 1)]
    allowed = schema.allowed_types(p.type_str)
    return allowed is None or type_name in allowed


def _retype_attributes(node: Node, c: _Converter) -> None:
    """Constant values, Cast targets and similar float32 attributes of a converted node."""
    for key, a in list(node.attributes.items()):
        if a.is_ref:
            continue
        if a.type == AttrType.TENSOR and a.value is not None and a.value.dtype == F32:
            node.attributes[key] = Attr(key, a.type, c.narrow_tensor(a.value))
        elif key == "to" and node.op_type == "Cast" and a.value == F32:
            node.attributes[key] = Attr(key, a.type, int(c.target))
        elif key == "dtype" and a.type == AttrType.INT and a.value == F32:
            node.attributes[key] = Attr(key, a.type, int(c.target))
    if node.op_type == "Constant" and "value_float" in node.attributes:
        f = node.attributes.pop("value_float").value
        node.attributes["value"] = Attr(
            "value", AttrType.TENSOR, c.narrow_tensor(Tensor(np.float32(f)))
        )
    if node.op_type == "Constant" and "value_floats" in node.attributes:
        f = node.attributes.pop("value_floats").value
        arr = np.array(f, np.float32)
        node.attributes["value"] = Attr("value", AttrType.TENSOR, c.narrow_tensor(Tensor(arr)))


# ---------------------------------------------------------------------------------- helpers


def _graphs(g: Graph):
    yield g
    for node in g:
        for sub in node.subgraphs():
            yield from _graphs(sub)


def _all_values(g: Graph):
    seen: set[int] = set()
    for v in itertools.chain(g.values(), g.outputs, g.value_info):
        if id(v) not in seen:
            seen.add(id(v))
            yield v


def _is_f32(v: Value) -> bool:
    return _is_elem(v, F32)


def _is_elem(v: Value, dt: DataType) -> bool:
    return isinstance(v.type, TensorType) and v.type.elem_type == dt


def _with_elem(t, dt: DataType):
    if isinstance(t, TensorType):
        return TensorType(dt, t.shape, t.denotation)
    return TensorType(dt)


def _initializers_only_blocked(graphs: list[Graph], blocked: set[int]) -> set[int]:
    keep = set()
    for g in graphs:
        for v in g.initializers.values():
            uses = v.uses()
            if uses and all(id(n) in blocked for n, _ in uses):
                keep.add(id(v))
    return keep


def _between_blocked(graphs: list[Graph], blocked: set[int]) -> set[int]:
    """Values a blocked node makes and only blocked nodes read: no round trip through the
    narrow type between two float32 nodes (an int32 sum would overflow float16 there)."""
    keep = set()
    for g in graphs:
        outputs = {id(v) for v in g.outputs}
        for n in g:
            if id(n) not in blocked:
                continue
            for v in n.outputs:
                uses = v.uses()
                if uses and id(v) not in outputs and all(id(u) in blocked for u, _ in uses):
                    keep.add(id(v))
    return keep


def _clip_finite(a: np.ndarray, hi: float) -> np.ndarray:
    finite = np.isfinite(a)
    out = a.copy()
    out[finite] = np.clip(a[finite], -hi, hi)
    return out
