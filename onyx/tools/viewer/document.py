"""A model as the viewer's document: plain JSON-able data the page draws.

doc = {"model": {...metadata, opsets, inputs, outputs}, "graphs": [graph, ...]}; graph 0 is the
main graph, the others are subgraphs (If/Loop/Scan bodies) and model-local function bodies.
graph = {"name", "parent", "inputs", "outputs", "nodes": [node, ...], "values": {name: value}}
node = {"id": unique display name, "op", "domain", "version", "family", "attrs": [[name, type,
text]], "key": [short attribute lines], "inputs", "outputs", "subgraphs": [[label, graph index]]}
value = {"type", "shape", "init" (an initializer), "stats" (initializers only), "doc"}
Values of a subgraph that it captures from an enclosing graph are looked up in the parents.
"""

from __future__ import annotations

from typing import Any

from ...ir import AttrType, Graph, Model, Node, Tensor, Value, captured_values
from ...ir.dtypes import type_name
from ...ir.types import MapType, OptionalType, SequenceType, SparseTensorType, TensorType
from .stats import SMALL, tensor_stats

#: Op family of each op type (the node's colour in the page); anything else is "other".
FAMILIES: dict[str, tuple[str, ...]] = {
    "conv": ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "DeformConv", "NhwcConv"),
    "linear": (
        "MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "MatMulNBits", "FusedMatMul",
        "Einsum", "Attention", "MultiHeadAttention", "GroupQueryAttention", "DynamicQuantizeMatMul",
        "MatMulIntegerToFloat", "FusedGemm",
    ),
    "activation": (
        "Relu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "Tanh", "Softmax", "LogSoftmax",
        "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Elu", "Selu", "Celu", "Softplus", "Softsign",
        "HardSwish", "Mish", "ThresholdedRelu", "Hardmax", "Erf", "Clip",
    ),
    "norm": (
        "BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
        "LpNormalization", "MeanVarianceNormalization", "SkipLayerNormalization",
        "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "EmbedLayerNormalization",
        "RMSNormalization", "LRN",
    ),
    "pool": (
        "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool",
        "MaxRoiPool", "RoiAlign", "MaxUnpool", "QLinearGlobalAveragePool", "QLinearAveragePool",
    ),
    "math": (
        "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal",
        "Floor", "Ceil", "Round", "Sin", "Cos", "Tan", "Max", "Min", "Mean", "Sum", "Mod",
        "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not",
        "Where", "Sign", "IsNaN", "IsInf", "BitShift", "CumSum", "QLinearAdd", "QLinearMul",
    ),
    "reduce": (
        "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "TopK",
    ),
    "shape": (
        "Reshape", "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND",
        "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile", "Pad", "Shape", "Size", "Cast",
        "CastLike", "Identity", "ScatterND", "ScatterElements", "Resize", "Upsample", "Range",
        "DepthToSpace", "SpaceToDepth", "ConstantOfShape", "NonZero", "Trilu", "OneHot", "Compress",
    ),
    "quant": (
        "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QGemm",
    ),
    "control": ("If", "Loop", "Scan", "SequenceMap"),
    "constant": ("Constant",),
    "io": ("graph-input", "graph-output"),
}  # fmt: skip
_FAMILY = {op: fam for fam, ops in FAMILIES.items() for op in ops}

#: How many attribute lines a node shows on its face (the side panel shows all).
KEY_ATTRS = 3


def type_text(t) -> str:
    """'float32', 'seq(float32)', ... (short, for edge labels and the panel)."""
    if isinstance(t, TensorType | SparseTensorType):
        name = _dtype_name(t.elem_type)
        return name if isinstance(t, TensorType) else f"sparse({name})"
    if isinstance(t, SequenceType):
        return f"seq({type_text(t.elem)})"
    if isinstance(t, OptionalType):
        return f"optional({type_text(t.elem)})"
    if isinstance(t, MapType):
        return f"map({_dtype_name(t.key)},{type_text(t.value)})"
    return "" if t is None else str(t)


def _dtype_name(dt) -> str:
    try:
        return {"float": "float32", "double": "float64"}.get(type_name(dt), type_name(dt))
    except (ValueError, KeyError):
        return str(dt)


def shape_of(t) -> list | None:
    """Dims (int, symbolic name or None) of a tensor type; None when the rank is unknown."""
    shape = getattr(t, "shape", None)
    if shape is None:
        return None
    return [d if isinstance(d, int | str) else None for d in shape.dims]


def _short(items: list, limit: int = 8) -> str:
    text = ",".join(str(x) for x in items[:limit])
    return text + (f",…(+{len(items) - limit})" if len(items) > limit else "")


def attr_text(a, graph_names: dict[int, str]) -> str:
    """An attribute's value as the page shows it (tensors summarised, graphs named)."""
    v = a.value
    if a.is_ref:
        return f"@{a.ref_attr_name}"
    if a.type in (AttrType.FLOAT, AttrType.INT):
        return f"{v:.6g}" if a.type == AttrType.FLOAT else str(v)
    if a.type == AttrType.STRING:
        return v if isinstance(v, str) else repr(v)
    if a.type in (AttrType.FLOATS, AttrType.INTS, AttrType.STRINGS):
        return "[" + _short([f"{x:.4g}" if isinstance(x, float) else x for x in v], 32) + "]"
    if a.type == AttrType.TENSOR and isinstance(v, Tensor):
        return _tensor_text(v)
    if a.type == AttrType.GRAPH:
        return graph_names.get(id(v), "graph")
    if a.type == AttrType.GRAPHS:
        return ", ".join(graph_names.get(id(g), "graph") for g in v or [])
    if a.type == AttrType.TENSORS:
        return f"{len(v)} tensors"
    return str(v)


def _tensor_text(t: Tensor) -> str:
    head = f"{_dtype_name(t.dtype)}[{','.join(str(d) for d in t.shape)}]"
    if t.size <= SMALL:
        try:
            values = tensor_stats(t.numpy()).get("values", [])
            return f"{head} {_short(values, SMALL)}"
        except Exception:  # unreadable data: the header says enough
            return head
    return head


class _Builder:
    def __init__(self, model: Model, weight_stats: bool):
        self.model = model
        self.weight_stats = weight_stats
        self.graphs: list[dict[str, Any]] = []
        self.ids: set[str] = set()
        self.node_ids: dict[int, str] = {}
        self.graph_index: dict[int, int] = {}
        self.functions = {(f.domain, f.name): f for f in model.functions.values()}
        self.function_graph: dict[tuple[str, str], int] = {}

    def unique_id(self, node: Node, n: int) -> str:
        base = node.name or f"{node.op_type}_{n}"
        name, k = base, 1
        while name in self.ids:
            k += 1
            name = f"{base}#{k}"
        self.ids.add(name)
        return name

    def add_graph(self, g: Graph, name: str, parent: int | None) -> int:
        index = len(self.graphs)
        self.graph_index[id(g)] = index
        entry: dict[str, Any] = {"name": name, "parent": parent}
        self.graphs.append(entry)
        entry.update(self.graph_body(g, index))
        return index

    def graph_body(self, g: Graph, index: int) -> dict[str, Any]:
        values: dict[str, dict] = {}
        for v in g.values():
            values[v.name] = self.value_entry(v, g)
        for v in g.value_info:
            values.setdefault(v.name, self.value_entry(v, g))
        nodes = [self.node_entry(n, i, index) for i, n in enumerate(g)]
        inits = set(g.initializers)
        return {
            "inputs": [v.name for v in g.inputs if v.name not in inits],
            "outputs": [v.name for v in g.outputs],
            "nodes": nodes,
            "values": values,
        }

    def value_entry(self, v: Value, g: Graph) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": type_text(v.type), "shape": shape_of(v.type)}
        if v.doc_string:
            entry["doc"] = v.doc_string
        if v.name in g.initializers:
            entry["init"] = 1
            t = v.const_value
            if t is not None:
                entry["type"] = _dtype_name(t.dtype)
                entry["shape"] = list(t.shape)
                if t.external is not None:
                    entry["external"] = 1
                if self.weight_stats:
                    entry["stats"] = self.safe_stats(t)
        return entry

    @staticmethod
    def safe_stats(t: Tensor) -> dict[str, Any]:
        try:
            return tensor_stats(t.numpy())
        except Exception as e:  # missing external file, undecodable data: say so in the panel
            return {"error": f"data not readable: {e}"}

    def node_entry(self, node: Node, n: int, graph: int) -> dict[str, Any]:
        nid = self.unique_id(node, n)
        self.node_ids[id(node)] = nid
        subgraphs = []
        # If's branches read then | else, left to right, whatever the file's attribute order
        attrs_in_order = sorted(node.attributes.values(), key=lambda a: a.name != "then_branch")
        for a in attrs_in_order:
            if a.type not in (AttrType.GRAPH, AttrType.GRAPHS) or a.value is None:
                continue
            graphs = [a.value] if a.type == AttrType.GRAPH else list(a.value)
            for k, sub in enumerate(graphs):
                label = a.name if len(graphs) == 1 else f"{a.name}[{k}]"
                subgraphs.append([label, self.add_graph(sub, f"{nid}.{label}", graph)])
        fn = self.functions.get((node.domain, node.op_type))
        if fn is not None:
            subgraphs.append([f"function {fn.name}", self.function_body(fn, graph)])
        graph_names = {
            id(a.value): self.graphs[i]["name"]
            for (_, i), a in zip(subgraphs, (a for a in attrs_in_order if a.type == AttrType.GRAPH))
        }
        attrs = [
            [a.name, a.type.name.lower(), attr_text(a, graph_names)]
            for a in node.attributes.values()
        ]
        key = [f"{name} = {text}" for name, kind, text in attrs if kind not in ("graph", "graphs")]
        entry: dict[str, Any] = {
            "id": nid,
            "op": node.op_type,
            "domain": node.domain,
            "version": self.model.opset(node.domain),
            "family": _FAMILY.get(node.op_type, "function" if fn else "other"),
            "attrs": attrs,
            "key": [k if len(k) <= 40 else k[:39] + "…" for k in key[:KEY_ATTRS]],
            "inputs": [v.name if v is not None else "" for v in node.inputs],
            "outputs": [v.name for v in node.outputs],
        }
        if node.name and node.name != nid:
            entry["name"] = node.name
        if subgraphs:
            entry["subgraphs"] = subgraphs
            own = set(entry["inputs"])
            captures = {v.name: 1 for g in node.subgraphs() for v in captured_values(g)}
            # outer values the bodies read: drawn as inputs of the node (If has no other)
            entry["captures"] = [name for name in captures if name not in own]
        if node.doc_string:
            entry["doc"] = node.doc_string
        return entry

    def function_body(self, fn, parent: int) -> int:
        # one copy per function, shared by every call (its values are the function's own)
        key = (fn.domain, fn.name)
        if key not in self.function_graph:
            self.function_graph[key] = -1  # a recursive call sees no body yet
            self.function_graph[key] = self.add_graph(fn.graph, f"{fn.domain}::{fn.name}", parent)
        return self.function_graph[key]


def model_metadata(model: Model) -> dict[str, Any]:
    g = model.graph
    return {
        "name": g.name,
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "domain": model.domain,
        "model_version": model.model_version,
        "doc": model.doc_string,
        "opsets": {d or "ai.onnx": v for d, v in model.opset_imports.items()},
        "metadata": dict(model.metadata_props),
        "functions": [f"{f.domain}::{f.name}" for f in model.functions.values()],
        "nodes": sum(1 for _ in g.all_nodes()),
        "initializers": len(g.initializers),
    }


def build_document(model: Model, weight_stats: bool = True) -> tuple[dict[str, Any], dict]:
    """The viewer's document of ``model`` (run shape inference first for edge shapes), and the
    page id of each node (keyed by ``id(node)``)."""
    b = _Builder(model, weight_stats)
    b.add_graph(model.graph, model.graph.name or "main", None)
    return {"model": model_metadata(model), "graphs": b.graphs}, b.node_ids
