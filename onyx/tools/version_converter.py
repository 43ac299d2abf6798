"""The ai.onnx opset version converter: ``onyx.convert_version(model, target_opset)``.

Each node is checked against its operator's schema at the target opset. Where the operator's
signature or meaning changed between the model's opset and the target, an adapter rewrites
the node (attributes that became inputs and back: Reduce* / Squeeze / Unsqueeze axes, Split,
Pad, Clip, Slice, TopK, Dropout; Softmax's 2-D coercion before 13; Resize's coordinate
default before 11; Upsample <-> Resize; the legacy ``broadcast`` attribute before 7; ...).
An operator newer than the target is replaced by its standard function body (LayerNormalization,
Gelu, HardSwish, ...), itself converted. Anything else that the target cannot express
exactly raises ``VersionConversionError`` naming the node and the reason: nothing is
approximated silently.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable

import numpy as np

from .. import defs
from ..errors import OnyxError
from ..ir import Attr, AttrType, DataType, Graph, Model, Node, Tensor, TensorType, Value
from ._common import as_model, copy_model, put_after_output
from .helper import IR_VERSION_OF_OPSET

__all__ = ["VersionConversionError", "convert_version"]


class VersionConversionError(OnyxError, ValueError):
    """A node that cannot be expressed exactly at the target opset."""


def convert_version(model, target_opset: int) -> Model:
    """A copy of ``model`` whose ai.onnx nodes are written for ``target_opset``."""
    m = copy_model(as_model(model))
    src = m.opset("")
    lo, hi = defs.domains()[""]
    if src is None:
        raise VersionConversionError("the model imports no ai.onnx opset")
    if not lo <= target_opset <= hi:
        raise VersionConversionError(f"target opset {target_opset} is not in {lo}..{hi}")
    if src == target_opset:
        return m
    from ..inference import infer_shapes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            infer_shapes(m)
        except OnyxError:
            pass  # ranks help some adapters; the rest work without them
    original = {id(n) for n in _all_nodes(m.graph)}
    conv = _Converter(target_opset)
    conv.graph(m.graph, src)
    for f in m.functions.values():
        fsrc = f.opset_imports.get("", f.opset_imports.get("ai.onnx"))
        if fsrc is not None and fsrc != target_opset:
            conv.graph(f.graph, fsrc)
            f.opset_imports[""] = target_opset
            f.opset_imports.pop("ai.onnx", None)
    m.opset_imports.pop("ai.onnx", None)
    m.opset_imports[""] = target_opset
    _check_new_nodes(m, original, target_opset)
    need = IR_VERSION_OF_OPSET.get(target_opset, m.ir_version)
    m.ir_version = max(need, 8) if m.functions else need
    return m


def _all_nodes(g: Graph):
    for n in g:
        yield n
        for sub in n.subgraphs():
            yield from _all_nodes(sub)


def _check_new_nodes(m: Model, original: set[int], target: int) -> None:
    """The nodes the conversion made (bodies, adapters' helpers) checked against the target's
    schemas once inference has typed them: a function body's step may not take an element
    type at the target that the expanded node took (Elu and bfloat16 before 22, ...)."""
    from ..inference import infer_shapes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            infer_shapes(m)
        except OnyxError:
            return
    for n in _all_nodes(m.graph):
        if id(n) in original or n.domain not in ("", "ai.onnx"):
            continue
        t = defs.get_schema(n.op_type, target)
        problem = _mismatch(n, t) if t is not None else f"no {n.op_type} at opset {target}"
        if problem:
            raise _err(n, f"{problem} at opset {target} (made by the conversion)")


# ---------------------------------------------------------------------------------- helpers


def _err(node: Node, message: str) -> VersionConversionError:
    label = f"node {node.name!r} ({node.op_type})" if node.name else f"a {node.op_type} node"
    return VersionConversionError(f"{label}: {message}")


def _const_array(v: Value | None) -> np.ndarray | None:
    """The value of an initializer or Constant output, else None."""
    if v is None:
        return None
    if v.const_value is not None:
        return v.const_value.numpy()
    p = v.producer
    if p is not None and p.op_type == "Constant" and not p.attributes_have_refs():
        a = p.attributes.get("value")
        if a is not None and a.value is not None:
            return a.value.numpy()
        for key, cast in (
            ("value_ints", np.int64),
            ("value_int", np.int64),
            ("value_floats", np.float32),
            ("value_float", np.float32),
        ):
            if key in p.attributes:
                return np.array(p.attributes[key].value, cast)
    return None


def _rank(v: Value | None) -> int | None:
    t = v.type if v is not None else None
    if isinstance(t, TensorType) and t.shape is not None:
        return t.shape.rank
    return None


def _dims(v: Value | None):
    t = v.type if v is not None else None
    if isinstance(t, TensorType) and t.shape is not None:
        return t.shape.dims
    return None


_SERIAL = itertools.count()


class _Edit:
    """Inserts helper nodes before a node, naming their outputs uniquely."""

    def __init__(self, g: Graph, node: Node, target: int = 0):
        self.g, self.node = g, node
        #: The opset the model is converted to (adapters see schema versions).
        self.target = target

    def name(self, what: str) -> str:
        base = self.node.name or self.node.op_type
        return f"{base}_{what}_v{next(_SERIAL)}"

    def add(self, op: str, inputs, attrs=None, n_out: int = 1, after: bool = False) -> list[Value]:
        outs = [self.name(f"{op.lower()}{i}") for i in range(n_out)]
        new = Node(op, inputs, outs, attrs or {})
        if after:
            self.g.insert_after(self.node, new)
        else:
            self.g.insert_before(self.node, new)
        return list(new.outputs)

    def one(self, op: str, inputs, attrs=None) -> Value:
        """A helper node with one output; returns that output."""
        return self.add(op, inputs, attrs)[0]

    def need(self, opset: int, what: str) -> None:
        """Refuse (naming the node) when the target opset is below ``opset``."""
        if self.target < opset:
            raise _err(
                self.node,
                f"{what} needs opset {opset} or later once expanded (target {self.target})",
            )

    def const(self, array) -> Value:
        arr = np.asarray(array)
        (v,) = self.add("Constant", [], {"value": Tensor(arr)})
        v.type = TensorType(Tensor(arr).dtype, arr.shape)
        return v


def _attr_to_input(edit: _Edit, name: str, index: int, dtype=np.int64, required=False) -> None:
    """Move attribute ``name`` to input ``index`` (a Constant); absent stays absent."""
    n = edit.node
    a = n.attributes.pop(name, None)
    if a is None:
        if required:
            raise _err(n, f"attribute {name!r} is missing")
        return
    while len(n.inputs) < index:
        n.append_input(None)
    value = edit.const(np.array(a.value, dtype))
    if len(n.inputs) == index:
        n.append_input(value)
    else:
        n.set_input(index, value)


def _input_to_attr(edit: _Edit, name: str, index: int, convert=lambda a: [int(x) for x in a]):
    """Move constant input ``index`` to attribute ``name`` (the input must be a constant)."""
    n = edit.node
    if index >= len(n.inputs) or n.inputs[index] is None:
        return
    arr = _const_array(n.inputs[index])
    if arr is None:
        raise _err(
            n,
            f"input {index} ({name}) is computed at run time; the target opset "
            f"needs it as a constant attribute",
        )
    n.set_attr(name, convert(arr.reshape(-1)))
    n.set_input(index, None)
    _trim(n)


def _set_inputs(n: Node, inputs: list) -> None:
    n.set_inputs(inputs)


def _trim(n: Node) -> None:
    """Drop trailing absent inputs."""
    ins = list(n.inputs)
    while ins and ins[-1] is None:
        ins.pop()
    if len(ins) != len(n.inputs):
        _set_inputs(n, ins)


# ---------------------------------------------------------------------------------- adapters

#: op -> adapter(edit, src_since, dst_since) -> None, or EXPAND: the node is to be replaced
#: by its body (written out in version_bodies) instead.
ADAPTERS: dict[str, Callable] = {}
EXPAND = "expand"


def adapter(*ops: str):
    def deco(fn):
        for op in ops:
            ADAPTERS[op] = fn
        return fn

    return deco


def _crosses(src: int, dst: int, boundary: int) -> int:
    """+1 when going up over ``boundary`` (src < boundary <= dst), -1 going down, else 0."""
    if src < boundary <= dst:
        return 1
    if dst < boundary <= src:
        return -1
    return 0


_REDUCE = (
    "ReduceMax",
    "ReduceMin",
    "ReduceMean",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
)


@adapter(*_REDUCE, "ReduceSum")
def _reduce(edit: _Edit, src: int, dst: int) -> None:
    boundary = 13 if edit.node.op_type == "ReduceSum" else 18
    step = _crosses(src, dst, boundary)
    if step > 0:
        _attr_to_input(edit, "axes", 1)
    elif step < 0:
        n = edit.node
        if n.attr("noop_with_empty_axes", 0) and (len(n.inputs) < 2 or n.inputs[1] is None):
            raise _err(
                n, f"noop_with_empty_axes=1 without axes has no form before opset {boundary}"
            )
        n.attributes.pop("noop_with_empty_axes", None)
        _input_to_attr(edit, "axes", 1)


@adapter("Squeeze", "Unsqueeze")
def _squeeze(edit: _Edit, src: int, dst: int) -> None:
    step = _crosses(src, dst, 13)
    if step > 0:
        _attr_to_input(edit, "axes", 1)
    elif step < 0:
        _input_to_attr(edit, "axes", 1)
    if dst < 11 and any(a < 0 for a in edit.node.attr("axes", []) or []):
        rank = _rank(edit.node.inputs[0])
        if rank is None:
            raise _err(edit.node, "negative axes need the input's rank before opset 11")
        if edit.node.op_type == "Unsqueeze":
            rank += len(edit.node.attr("axes"))
        edit.node.set_attr("axes", [a + rank if a < 0 else a for a in edit.node.attr("axes")])


@adapter("Split")
def _split(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    step = _crosses(src, dst, 13)
    if step > 0:
        _attr_to_input(edit, "split", 1)
    if _crosses(src, dst, 18) > 0 and (len(n.inputs) < 2 or n.inputs[1] is None):
        n.set_attr("num_outputs", len(n.outputs))
    if _crosses(src, dst, 18) < 0:
        k = n.attributes.pop("num_outputs", None)
        if k is not None:
            dims = _dims(n.inputs[0])
            axis = n.attr("axis", 0)
            size = dims[axis] if dims is not None and -len(dims) <= axis < len(dims) else None
            if not isinstance(size, int):
                raise _err(n, "num_outputs with an unknown split dim has no form before 18")
            chunk = -(-size // k.value)
            sizes = [min(chunk, size - i * chunk) for i in range(k.value)]
            if sizes != [size // k.value] * k.value:
                n.append_input(edit.const(np.array(sizes, np.int64)))
    if step < 0:
        _input_to_attr(edit, "split", 1)


def _axes_full_rank(edit: _Edit, axes, what: str) -> tuple[int, list[int]]:
    """The input's rank and ``axes`` made non-negative (the rank must be known)."""
    n = edit.node
    rank = _rank(n.inputs[0])
    if rank is None:
        raise _err(n, f"{what} over some axes needs the input's rank before opset 18")
    axes = [int(a) + rank if a < 0 else int(a) for a in axes]
    if sorted(set(axes)) != sorted(axes) or not all(0 <= a < rank for a in axes):
        raise _err(n, f"axes {axes} are not distinct axes of a rank-{rank} input")
    return rank, axes


def _scatter_full(edit: _Edit, base: np.ndarray, where: Value, part: Value) -> Value:
    """``base`` with ``part`` written at the indices ``where`` (a ScatterElements, from 11)."""
    if edit.target < 11:
        raise _err(edit.node, "computed values over some axes have no form before opset 11")
    return edit.one("ScatterElements", [edit.const(base), where, part], {"axis": 0})


def _begin_end_indices(edit: _Edit, axes: Value, rank: int) -> Value:
    """[axes, axes + rank] with negative axes counted from the end (computed axes)."""
    r = edit.const(np.array(rank, np.int64))
    wrapped = edit.one(
        "Where",
        [
            edit.one("Less", [axes, edit.const(np.array(0, np.int64))]),
            edit.one("Add", [axes, r]),
            axes,
        ],
    )
    return edit.one("Concat", [wrapped, edit.one("Add", [wrapped, r])], {"axis": 0})


def _pads_full_rank(edit: _Edit) -> None:
    """Pad-18's ``axes`` input folded into full-rank pads (zeros on the other axes)."""
    n = edit.node
    axes, pads = _const_array(n.inputs[3]), _const_array(n.inputs[1])
    rank = _rank(n.inputs[0])
    if axes is not None and pads is not None:
        rank, axes = _axes_full_rank(edit, axes.reshape(-1), "padding")
        full = np.zeros(2 * rank, np.int64)
        for i, a in enumerate(axes):
            full[a], full[a + rank] = pads[i], pads[i + len(axes)]
        n.set_input(1, edit.const(full))
    elif rank is None:
        raise _err(n, "padding over some axes needs the input's rank before opset 18")
    else:  # computed pads or axes: scattered into zeros at run time
        where = _begin_end_indices(edit, n.inputs[3], rank)
        pads = n.inputs[1]
        if pads.dtype not in (None, DataType.INT64):
            pads = edit.one("Cast", [pads], {"to": int(DataType.INT64)})
        n.set_input(1, _scatter_full(edit, np.zeros(2 * rank, np.int64), where, pads))
    n.set_input(3, None)
    _trim(n)


@adapter("Pad")
def _pad(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    if n.attr("mode", "constant") == "wrap" and dst < 19:
        raise _err(n, "mode 'wrap' exists from opset 19")
    if dst < 18 and len(n.inputs) > 3 and n.inputs[3] is not None:
        _pads_full_rank(edit)
    step = _crosses(src, dst, 11)
    if step > 0:
        pads = n.attributes.pop("pads" if "pads" in n.attributes else "paddings", None)
        value = n.attributes.pop("value", None)
        n.append_input(edit.const(np.array(pads.value, np.int64)))
        if value is not None and value.value != 0.0:
            dt = n.inputs[0].dtype or DataType.FLOAT
            n.append_input(edit.const(np.array(value.value).astype(_np(dt))))
    elif step < 0:
        if len(n.inputs) > 3 and n.inputs[3] is not None:
            raise _err(n, "the axes input has no form before opset 18")
        value = _const_array(n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] is not None else None
        if len(n.inputs) > 2 and n.inputs[2] is not None and value is None:
            raise _err(n, "a computed constant_value has no form before opset 11")
        _input_to_attr(edit, "pads", 1)
        if value is not None:
            n.set_input(2, None)
            _trim(n)
            n.set_attr("value", float(value.reshape(-1)[0]))
    if _crosses(src, dst, 2) < 0:
        n.attributes["paddings"] = n.attributes.pop("pads")


@adapter("Clip")
def _clip(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    step = _crosses(src, dst, 11)
    if step > 0:
        lo, hi = n.attributes.pop("min", None), n.attributes.pop("max", None)
        dt = _np(n.inputs[0].dtype or DataType.FLOAT)
        n.append_input(edit.const(np.array(lo.value, dt)) if lo is not None else None)
        if hi is not None:
            n.append_input(edit.const(np.array(hi.value, dt)))
        _trim(n)
    elif step < 0:
        for i, key in ((1, "min"), (2, "max")):
            if len(n.inputs) > i and n.inputs[i] is not None:
                arr = _const_array(n.inputs[i])
                if arr is None:
                    raise _err(n, f"a computed {key} has no form before opset 11")
                n.set_attr(key, float(arr.reshape(-1)[0]))
        for i in (2, 1):
            if len(n.inputs) > i:
                n.set_input(i, None)
        _trim(n)


@adapter("Slice")
def _slice(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    step = _crosses(src, dst, 10)
    if step > 0:
        axes = n.attributes.get("axes")
        for i, key in ((1, "starts"), (2, "ends")):
            _attr_to_input(edit, key, i)
        if axes is not None:
            _attr_to_input(edit, "axes", 3)
    elif step < 0:
        if len(n.inputs) > 4 and n.inputs[4] is not None:
            steps = _const_array(n.inputs[4])
            if steps is None or (steps != 1).any():
                raise _err(n, "steps other than 1 have no form before opset 10")
            n.set_input(4, None)
        for i, key in ((3, "axes"), (2, "ends"), (1, "starts")):
            _input_to_attr(edit, key, i)


@adapter("TopK")
def _topk(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    step = _crosses(src, dst, 10)
    if step > 0:
        k = n.attributes.pop("k")
        n.append_input(edit.const(np.array([k.value], np.int64)))
    elif step < 0:
        if n.attr("largest", 1) != 1 or n.attr("sorted", 1) != 1:
            raise _err(n, "largest=0 / sorted=0 exist from opset 11")
        n.attributes.pop("largest", None)
        n.attributes.pop("sorted", None)
        _input_to_attr(edit, "k", 1, convert=lambda a: int(a[0]))


@adapter("Dropout")
def _dropout(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    step = _crosses(src, dst, 12)
    if step > 0:
        ratio = n.attributes.pop("ratio", None)
        if ratio is not None:
            n.append_input(edit.const(np.array(ratio.value, np.float32)))
    elif step < 0:
        if len(n.inputs) > 2 and n.inputs[2] is not None:
            arr = _const_array(n.inputs[2])
            if arr is None or bool(arr):
                raise _err(n, "training_mode has no form before opset 12")
            n.set_input(2, None)
        _input_to_attr(edit, "ratio", 1, convert=lambda a: float(a[0]))
    if _crosses(src, dst, 7) > 0:
        n.attributes.pop("is_test", None)


def _softmax(edit: _Edit, src: int, dst: int) -> None:
    """Before 13, softmax coerced the input to 2-D at ``axis`` (default 1); from 13 it runs
    along ``axis`` (default -1)."""
    n = edit.node
    step = _crosses(src, dst, 13)
    if step == 0:
        return
    rank = _rank(n.inputs[0])
    axis = n.attr("axis", 1 if step > 0 else -1)
    if rank is not None and axis < 0:
        axis += rank
    last = rank is not None and axis == rank - 1
    if last or (axis == -1):
        n.set_attr("axis", -1 if dst >= 11 else (rank - 1 if rank is not None else -1))
        if axis == -1 and dst < 11 and rank is None:
            raise _err(n, "axis -1 needs the input's rank before opset 11")
        return
    if rank is None:
        raise _err(n, "softmax over an axis that is not the last needs the input's rank")
    if step > 0:  # the old 2-D semantics: flatten, softmax over the last axis, reshape back
        x = n.inputs[0]
        (flat,) = edit.add("Flatten", [x], {"axis": axis})
        (shape,) = edit.add("Shape", [x])
        n.set_input(0, flat)
        n.set_attr("axis", -1)
        out = n.outputs[0]
        kept_type, out.type = out.type, None
        new = put_after_output(edit.g, out, lambda inner: Node("Reshape", [inner, shape], [""]))
        new.type = kept_type
    else:  # one axis: move it last, run the old semantics there, move it back
        perm = [i for i in range(rank) if i != axis] + [axis]
        back = [perm.index(i) for i in range(rank)]
        x = n.inputs[0]
        (moved,) = edit.add("Transpose", [x], {"perm": perm})
        n.set_input(0, moved)
        n.set_attr("axis", rank - 1)
        out = n.outputs[0]
        kept_type, out.type = out.type, None
        new = put_after_output(
            edit.g, out, lambda inner: Node("Transpose", [inner], [""], {"perm": back})
        )
        new.type = kept_type


for _op in ("Softmax", "LogSoftmax", "Hardmax"):
    ADAPTERS[_op] = _softmax


def _resize_full_rank(edit: _Edit) -> None:
    """Resize-18's ``axes``: roi, scales or sizes given for those axes only, made full rank
    (roi 0..1, scale 1, the input's own size on the other axes)."""
    n = edit.node
    rank, axes = _axes_full_rank(edit, n.attributes.pop("axes").value, "resizing")
    ins = list(n.inputs) + [None] * (4 - len(n.inputs))
    roi, scales, sizes = ins[1], ins[2], ins[3]
    if roi is not None and (_const_array(roi) is None or _const_array(roi).size):
        ins[1] = _full_roi(edit, roi, rank, axes)
    if scales is not None and (_const_array(scales) is None or _const_array(scales).size):
        part = _const_array(scales)
        if part is not None:
            full = np.ones(rank, np.float32)
            full[axes] = part.reshape(-1)
            ins[2] = edit.const(full)
        else:
            where = edit.const(np.array(axes, np.int64))
            ins[2] = _scatter_full(edit, np.ones(rank, np.float32), where, scales)
    if sizes is not None:
        ins[3] = _full_sizes(edit, sizes, rank, axes)
    _set_inputs(n, ins)
    _trim(n)


def _full_roi(edit: _Edit, roi: Value, rank: int, axes: list[int]) -> Value:
    """roi starts and ends on ``axes`` spread over the whole rank (0 .. 1 elsewhere)."""
    part = _const_array(roi)
    dt = _np(roi.dtype or DataType.FLOAT)
    base = np.array([0.0] * rank + [1.0] * rank, dt)
    if part is not None:
        part = part.reshape(-1)
        for i, a in enumerate(axes):
            base[a], base[a + rank] = part[i], part[i + len(axes)]
        return edit.const(base)
    where = edit.const(np.array(axes + [a + rank for a in axes], np.int64))
    return _scatter_full(edit, base, where, roi)


def _full_sizes(edit: _Edit, sizes: Value, rank: int, axes: list[int]) -> Value:
    """Output sizes on ``axes`` spread over the input's own dims (constant when they are
    static, else a ScatterElements into the input's Shape)."""
    part, dims = _const_array(sizes), _dims(edit.node.inputs[0])
    if part is not None and dims is not None:
        full = [d for d in dims]
        for i, a in enumerate(axes):
            full[a] = int(part.reshape(-1)[i])
        if all(isinstance(d, int) for d in full):
            return edit.const(np.array(full, np.int64))
    (shape,) = edit.add("Shape", [edit.node.inputs[0]])
    where = edit.const(np.array(axes, np.int64))
    (full,) = edit.add("ScatterElements", [shape, where, sizes], {"axis": 0})
    return full


@adapter("Resize")
def _resize(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    if dst < 18 and n.attr("axes") is not None:
        _resize_full_rank(edit)
    step = _crosses(src, dst, 11)
    if step > 0:  # Resize-10: asymmetric coordinates, nearest rounds down
        n.set_attr("coordinate_transformation_mode", "asymmetric")
        if n.attr("mode", "nearest") == "nearest":
            n.set_attr("nearest_mode", "floor")
        _set_inputs(n, [n.inputs[0], None, n.inputs[1]])  # roi (none) at 1, scales at 2
    elif step < 0:
        if n.attr("coordinate_transformation_mode", "half_pixel") != "asymmetric":
            raise _err(n, "coordinate modes other than 'asymmetric' exist from opset 11")
        if n.attr("mode", "nearest") == "cubic":
            raise _err(n, "cubic mode exists from opset 11")
        if (
            n.attr("mode", "nearest") == "nearest"
            and n.attr("nearest_mode", "round_prefer_floor") != "floor"
        ):
            raise _err(n, "nearest rounding other than 'floor' exists from opset 11")
        scales = n.inputs[2] if len(n.inputs) > 2 else None
        if scales is None or (len(n.inputs) > 3 and n.inputs[3] is not None):
            raise _err(n, "output sizes (not scales) exist from opset 11")
        for key in (
            "coordinate_transformation_mode",
            "nearest_mode",
            "cubic_coeff_a",
            "exclude_outside",
            "extrapolation_value",
        ):
            n.attributes.pop(key, None)
        _set_inputs(n, [n.inputs[0], scales])
    if _crosses(src, dst, 18) < 0:
        for key, default in (
            ("antialias", 0),
            ("axes", None),
            ("keep_aspect_ratio_policy", "stretch"),
        ):
            if key in n.attributes and n.attr(key) != default:
                raise _err(n, f"attribute {key!r} exists from opset 18")
            n.attributes.pop(key, None)
    if (
        _crosses(src, dst, 19) < 0
        and n.attr("coordinate_transformation_mode") == "half_pixel_symmetric"
    ):
        raise _err(n, "half_pixel_symmetric exists from opset 19")
    if dst in (11, 12):  # roi and scales are required inputs there (empty when unused)
        ins = list(n.inputs) + [None] * (3 - len(n.inputs))
        for i in (1, 2):
            if ins[i] is None:
                ins[i] = edit.const(np.zeros((0,), np.float32))
        _set_inputs(n, ins)
    elif dst >= 13 and src in (11, 12):
        ins = list(n.inputs)
        for i in (1, 2):
            if i < len(ins) and ins[i] is not None:
                arr = _const_array(ins[i])
                if arr is not None and arr.size == 0:
                    ins[i] = None
        _set_inputs(n, ins)


@adapter("BatchNormalization")
def _batchnorm(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    if dst >= 7:
        n.attributes.pop("is_test", None)
        n.attributes.pop("consumed_inputs", None)
    if dst >= 9:
        if n.attr("spatial", 1) != 1:
            raise _err(n, "spatial=0 has no form from opset 9")
        n.attributes.pop("spatial", None)
    if dst < 14 and n.attr("training_mode", 0):
        raise _err(n, "training_mode exists from opset 14")
    if dst < 14:
        n.attributes.pop("training_mode", None)
    if _crosses(src, dst, 7) < 0:
        n.set_attr("is_test", 1)
    if dst < 6:
        n.set_attr("consumed_inputs", [0, 0, 0, 1, 1])


@adapter("Upsample")
def _upsample(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    if src < 9 <= dst:
        scales = n.attributes.pop("scales")
        n.append_input(edit.const(np.array(scales.value, np.float32)))
    if dst >= 10:  # Upsample is deprecated from 10: Resize-10 does the same
        n.op_type = "Resize"
        _resize(edit, 10, dst)


@adapter("Scatter")
def _scatter(edit: _Edit, src: int, dst: int) -> None:
    if dst >= 11:
        edit.node.op_type = "ScatterElements"


@adapter("ScatterElements")
def _scatter_elements(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    if dst < 18 and n.attr("reduction", "none") not in ("none",):
        if dst < 16 or n.attr("reduction") in ("max", "min"):
            raise _err(n, f"reduction {n.attr('reduction')!r} has no form at opset {dst}")
    if dst < 16:
        n.attributes.pop("reduction", None)
    if dst < 11:
        n.op_type = "Scatter"


_BROADCAST_OPS = (
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "And",
    "Or",
    "Xor",
    "Equal",
    "Greater",
    "Less",
    "PRelu",
)


def _broadcast(edit: _Edit, src: int, dst: int) -> None:
    """Before 7 these ops broadcast only with ``broadcast=1`` (B's dims aligned at ``axis``)."""
    n = edit.node
    if src < 7 <= dst:
        b = n.attributes.pop("broadcast", None)
        axis = n.attributes.pop("axis", None)
        n.attributes.pop("consumed_inputs", None)
        if b is not None and b.value and axis is not None:
            ra, rb = _rank(n.inputs[0]), _rank(n.inputs[1])
            if ra is None or rb is None:
                raise _err(n, "legacy broadcasting with an axis needs the inputs' ranks")
            trailing = ra - axis.value - rb
            if trailing > 0:
                axes = list(range(rb, rb + trailing))
                if edit.target >= 13:
                    (reshaped,) = edit.add("Unsqueeze", [n.inputs[1], edit.const(np.array(axes))])
                else:
                    (reshaped,) = edit.add("Unsqueeze", [n.inputs[1]], {"axes": axes})
                n.set_input(1, reshaped)
    elif dst < 7 <= src:
        da, db = _dims(n.inputs[0]), _dims(n.inputs[1])
        if da is None or db is None:
            raise _err(n, "opset < 7 needs known shapes to decide on broadcasting")
        if tuple(da) != tuple(db):
            if len(db) <= len(da) and tuple(da[len(da) - len(db) :]) == tuple(db) or len(db) == 0:
                n.set_attr("broadcast", 1)
            else:
                raise _err(n, f"broadcasting {list(da)} with {list(db)} has no form before 7")


for _op in _BROADCAST_OPS:
    ADAPTERS[_op] = _broadcast


@adapter("Cast")
def _cast(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    to = n.attributes.get("to")
    if dst < 6 <= src and to is not None:
        n.attributes["to"] = Attr("to", AttrType.STRING, DataType(to.value).name)
    elif src < 6 <= dst and to is not None and to.type == AttrType.STRING:
        n.attributes["to"] = Attr("to", AttrType.INT, int(DataType[str(to.value).upper()]))
    if dst < 19 and n.attr("saturate", 1) != 1:
        raise _err(n, "saturate=0 exists from opset 19")
    if dst < 19:
        n.attributes.pop("saturate", None)
    if dst < 24:
        n.attributes.pop("round_mode", None)


@adapter("Gemm")
def _gemm(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    if dst >= 7:
        n.attributes.pop("broadcast", None)
    if dst < 11 and (len(n.inputs) < 3 or n.inputs[2] is None):
        dt = n.inputs[0].dtype or DataType.FLOAT
        if len(n.inputs) < 3:
            n.append_input(edit.const(np.array(0, _np(dt))))
        else:
            n.set_input(2, edit.const(np.array(0, _np(dt))))
    if dst < 7:
        n.set_attr("broadcast", 1)


@adapter("Reshape")
def _reshape(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    if _crosses(src, dst, 5) > 0:
        _attr_to_input(edit, "shape", 1)
    elif _crosses(src, dst, 5) < 0:
        _input_to_attr(edit, "shape", 1)
    if dst < 14 and n.attr("allowzero", 0):
        shape = _const_array(n.inputs[1]) if len(n.inputs) > 1 else None
        if shape is None or (shape == 0).any():
            raise _err(n, "allowzero=1 with a zero (or computed) shape exists from opset 14")
    if dst < 14:
        n.attributes.pop("allowzero", None)


@adapter("Shape")
def _shape(edit: _Edit, src: int, dst: int) -> None:
    """start / end (from 15) become a Slice of the whole shape before."""
    n = edit.node
    if _crosses(src, dst, 15) >= 0:
        return
    start, end = n.attributes.pop("start", None), n.attributes.pop("end", None)
    if start is None and end is None:
        return
    ends = end.value if end is not None else np.iinfo(np.int64).max
    starts_v = edit.const(np.array([start.value if start is not None else 0], np.int64))
    ends_v = edit.const(np.array([ends], np.int64))
    out = n.outputs[0]
    kept_type, out.type = out.type, None
    new = put_after_output(
        edit.g, out, lambda whole: Node("Slice", [whole, starts_v, ends_v], [""])
    )
    new.type = kept_type
    slicer = new.producer
    if edit.target < 10:  # Slice takes attributes there
        _slice(_Edit(edit.g, slicer, edit.target), 10, 1)


@adapter("Constant")
def _constant(edit: _Edit, src: int, dst: int) -> None:
    """value_float(s) / value_int(s) / value_string(s) (from 12) become a tensor value."""
    n = edit.node
    if _crosses(src, dst, 12) >= 0:
        return
    kinds = {
        "value_float": np.float32,
        "value_floats": np.float32,
        "value_int": np.int64,
        "value_ints": np.int64,
        "value_string": object,
        "value_strings": object,
    }
    for key, dtype in kinds.items():
        a = n.attributes.pop(key, None)
        if a is not None:
            if a.is_ref:
                raise _err(n, f"{key} refers to a function attribute; no form before 12")
            n.set_attr("value", Tensor(np.array(a.value, dtype=dtype)))
    if "sparse_value" in n.attributes and dst < 11:
        raise _err(n, "sparse_value exists from opset 11")


@adapter("Flatten")
def _flatten(edit: _Edit, src: int, dst: int) -> None:
    """A negative axis exists from opset 11."""
    n = edit.node
    axis = n.attr("axis", 1)
    if dst < 11 and axis < 0:
        rank = _rank(n.inputs[0])
        if rank is None:
            raise _err(n, "a negative axis needs the input's rank before opset 11")
        n.set_attr("axis", axis + rank)


def _per_axis(edit: _Edit, scale: Value) -> bool:
    """Whether a (De)QuantizeLinear scale has more than one element (per-axis, from 13)."""
    arr = _const_array(scale)
    if arr is not None:
        return arr.size > 1
    dims = _dims(scale)
    if dims is None:
        raise _err(edit.node, "before opset 13 it needs the scale's shape (per-tensor only)")
    return len(dims) > 0 and dims != (1,) and dims != [1]


@adapter("QuantizeLinear")
def _quantize(edit: _Edit, src: int, dst: int):
    if dst < 13 and _per_axis(edit, edit.node.inputs[1]):
        raise _err(edit.node, "a per-axis scale exists from opset 13")
    if dst < 13:
        edit.node.attributes.pop("axis", None)  # (meaningless for a per-tensor scale)


@adapter("DequantizeLinear")
def _dequantize(edit: _Edit, src: int, dst: int):
    """A per-axis scale before 13: the arithmetic written out."""
    if dst < 13 and _per_axis(edit, edit.node.inputs[1]):
        return EXPAND
    if dst < 13:
        edit.node.attributes.pop("axis", None)  # (meaningless for a per-tensor scale)
    return None


@adapter("OneHot")
def _onehot(edit: _Edit, src: int, dst: int) -> None:
    """OneHot-11 counts negative indices from the end; OneHot-9 makes them off rows: below 11
    they are wrapped first."""
    if _crosses(src, dst, 11) >= 0:
        return
    n = edit.node
    indices, depth = n.inputs[0], n.inputs[1]
    known = _const_array(indices)
    if known is not None and (known >= 0).all():
        return
    dtype = _element_type(indices)
    if dtype is None:
        raise _err(n, "negative indices before opset 11 need the indices' element type")
    size = edit.one("Cast", [depth], {"to": int(dtype)})
    zero = edit.const(np.zeros((), _np(dtype)))
    wrapped = edit.one(
        "Where", [edit.one("Less", [indices, zero]), edit.one("Add", [indices, size]), indices]
    )
    # below -depth: depth, off in every reading (onnxruntime's OneHot-9 wraps negatives too)
    off = edit.one("Where", [edit.one("Less", [wrapped, zero]), size, wrapped])
    n.set_input(0, off)


@adapter("Mod")
def _mod(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    floats = (DataType.FLOAT, DataType.DOUBLE, DataType.FLOAT16, DataType.BFLOAT16)
    if dst < 28 and not n.attr("fmod", 0) and n.inputs[0].dtype in floats:
        raise _err(n, "fmod=0 (a floored remainder) on floating-point inputs exists from 28")


@adapter("ArgMax", "ArgMin")
def _argmax(edit: _Edit, src: int, dst: int) -> None:
    n = edit.node
    if dst < 12 and n.attr("select_last_index", 0):
        raise _err(n, "select_last_index=1 exists from opset 12")
    if dst < 11 and n.attr("axis", 0) < 0:
        rank = _rank(n.inputs[0])
        if rank is None:
            raise _err(n, "a negative axis needs the input's rank before opset 11")
        n.set_attr("axis", n.attr("axis") + rank)


#: Ops whose output has their first input's element type (a fallback where inference did not
#: type a value, e.g. inside a Loop body).
_SAME_TYPE = frozenset(
    (
        "Identity",
        "Gather",
        "GatherElements",
        "Slice",
        "Reshape",
        "Transpose",
        "Squeeze",
        "Unsqueeze",
        "Flatten",
        "Expand",
        "Concat",
        "Neg",
        "Abs",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "MatMul",
        "Relu",
        "Exp",
        "Log",
        "Sqrt",
        "Tile",
        "Pad",
        "Max",
        "Min",
    )
)


def _element_type(v: Value, depth: int = 0):
    """``v``'s element type, or that of the first input of a chain of type-keeping ops."""
    if v.dtype or depth > 32:
        return v.dtype
    p = v.producer
    if p is not None and p.op_type == "Cast" and not p.attributes_have_refs():
        to = p.attributes.get("to")
        return DataType(to.value) if to is not None and to.type == AttrType.INT else None
    if p is None or p.op_type not in _SAME_TYPE or p.domain not in ("", "ai.onnx"):
        return None
    if not p.inputs or p.inputs[0] is None:
        return None
    return _element_type(p.inputs[0], depth + 1)


@adapter("CastLike")
def _castlike(edit: _Edit, src: int, dst: int) -> None:
    """Before 15: a Cast to the second input's element type (when inference knows it)."""
    n = edit.node
    if dst >= 15:
        return
    target = _element_type(n.inputs[1]) if n.inputs[1] is not None else None
    if not target:
        raise _err(n, "CastLike before opset 15 needs the target input's element type")
    saturate = n.attributes.pop("saturate", None)
    n.op_type = "Cast"
    _set_inputs(n, [n.inputs[0]])
    n.set_attr("to", int(target))
    if saturate is not None:
        n.attributes["saturate"] = saturate
    _cast(edit, 19, dst)


@adapter("RoiAlign")
def _roialign(edit: _Edit, src: int, dst: int) -> None:
    """Opset 16 added coordinate_transformation_mode (default half_pixel); RoiAlign-10
    computes as 'output_half_pixel'."""
    n = edit.node
    step = _crosses(src, dst, 16)
    if step > 0:
        n.set_attr("coordinate_transformation_mode", "output_half_pixel")
    elif step < 0:
        mode = n.attr("coordinate_transformation_mode", "half_pixel")
        if mode != "output_half_pixel":
            raise _err(n, f"coordinate_transformation_mode {mode!r} exists from opset 16")
        n.attributes.pop("coordinate_transformation_mode", None)


@adapter("GridSample")
def _gridsample(edit: _Edit, src: int, dst: int) -> None:
    """Opset 20 renamed the modes (bilinear -> linear, bicubic -> cubic) and allowed N-D."""
    n = edit.node
    step = _crosses(src, dst, 20)
    renames = {"bilinear": "linear", "bicubic": "cubic"} if step > 0 else {}
    if step < 0:
        renames = {"linear": "bilinear", "cubic": "bicubic"}
        if _rank(n.inputs[0]) not in (None, 4):
            raise _err(n, "GridSample before opset 20 takes 4-D input only")
    mode = n.attr("mode", "bilinear" if src < 20 else "linear")
    if step and mode in renames:
        n.set_attr("mode", renames[mode])
    elif step > 0 and "mode" not in n.attributes:
        n.set_attr("mode", "linear")  # (the default changed name, not meaning)


@adapter("DFT")
def _dft(edit: _Edit, src: int, dst: int) -> None:
    """Opset 20 made ``axis`` (default 1) an input (default -2)."""
    n = edit.node
    step = _crosses(src, dst, 20)
    if step > 0:
        axis = n.attributes.pop("axis", None)
        value = axis.value if axis is not None else 1
        ins = list(n.inputs) + [None] * (2 - len(n.inputs))
        _set_inputs(n, ins[:2] + [edit.const(np.array(value, np.int64))])
    elif step < 0:
        axis = -2
        if len(n.inputs) > 2 and n.inputs[2] is not None:
            arr = _const_array(n.inputs[2])
            if arr is None:
                raise _err(n, "a computed axis has no form before opset 20")
            axis = int(arr.reshape(-1)[0])
        _set_inputs(n, list(n.inputs)[:2])
        _trim(n)
        n.set_attr("axis", axis)


def _with_leading_dim(t):
    """The type of a stack of ``t`` values (one more leading dim, of unknown size)."""
    if isinstance(t, TensorType):
        return TensorType(t.elem_type, None if t.shape is None else (None, *t.shape.dims))
    return None


@adapter("Scan")
def _scan(edit: _Edit, src: int, dst: int) -> None:
    """Scan-8 runs its body over a leading batch axis of every input and state (with
    optional sequence_lens); from 9 there is no batch axis. Up: an outer Scan over the batch
    axis whose body is the old Scan at the new opset. Down: a batch of one (Unsqueeze in,
    Squeeze out)."""
    step = _crosses(src, dst, 9)
    if step > 0:
        _scan_up(edit)
    elif step < 0:
        _scan_down(edit)


def _scan_up(edit: _Edit) -> None:
    n = edit.node
    if n.inputs and n.inputs[0] is not None:
        raise _err(n, "sequence_lens (per-batch lengths) has no form from opset 9")
    body = n.attributes["body"].value
    k = n.attr("num_scan_inputs")
    inputs = list(n.inputs)[1:]
    n_states = len(inputs) - k
    base = n.name or "scan"
    slices = []
    for i in range(len(inputs)):
        inner_t = body.inputs[i].type if i < len(body.inputs) else None
        slices.append(
            Value(f"{base}_batch_in{i}", inner_t if i < n_states else _with_leading_dim(inner_t))
        )
    attrs = {"body": Attr("body", AttrType.GRAPH, body), "num_scan_inputs": k}
    directions = n.attributes.pop("directions", None)
    if directions is not None:
        attrs["scan_input_directions"] = list(directions.value)
    inner = Node("Scan", slices, [f"{base}_batch_out{i}" for i in range(len(n.outputs))], attrs)
    for i, out in enumerate(inner.outputs):
        t = body.outputs[i].type if i < len(body.outputs) else None
        out.type = t if i < n_states else _with_leading_dim(t)
    outer = Graph(slices, list(inner.outputs), [inner], name=f"{base}_over_batch")
    _set_inputs(n, inputs)
    n.attributes["body"] = Attr("body", AttrType.GRAPH, outer)
    n.set_attr("num_scan_inputs", len(inputs))


def _scan_down(edit: _Edit) -> None:
    n = edit.node
    for key in ("scan_input_axes", "scan_output_axes"):
        if any(a != 0 for a in n.attr(key, []) or []):
            raise _err(n, f"{key} other than 0 has no form before opset 9")
    if any(n.attr("scan_output_directions", []) or []):
        raise _err(n, "reversed scan outputs have no form before opset 9")
    n.attributes.pop("scan_output_axes", None)
    n.attributes.pop("scan_output_directions", None)
    n.attributes.pop("scan_input_axes", None)
    directions = n.attributes.pop("scan_input_directions", None)
    if directions is not None:
        n.set_attr("directions", list(directions.value))
    batched = [edit.one("Unsqueeze", [v], {"axes": [0]}) for v in n.inputs]
    _set_inputs(n, [None, *batched])
    for out in list(n.outputs):
        kept_type, out.type = out.type, None
        new = put_after_output(
            edit.g, out, lambda inner: Node("Squeeze", [inner], [""], {"axes": [0]})
        )
        new.type = kept_type


def _type_body_inputs(node: Node) -> None:
    """Give a Scan or Loop body's untyped inputs the element type of what feeds them (the
    adapters of the body's nodes look at element types; inference may leave them open)."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in ("Scan", "Loop"):
        return
    body = node.attributes.get("body")
    if body is None or body.is_ref or body.value is None:
        return
    if node.op_type == "Scan":
        outer = [v for v in node.inputs if v is not None][-len(body.value.inputs) :]
    else:  # Loop: iteration number, condition (scalars: onnxruntime wants their shape), then
        # the carried values
        outer = [None, None, *list(node.inputs)[2:]]
        for inner, dt in zip(body.value.inputs, (DataType.INT64, DataType.BOOL)):
            if inner.type is None:
                inner.type = TensorType(dt, ())
    for inner, v in zip(body.value.inputs, outer):
        if inner.type is None and v is not None and isinstance(v.type, TensorType):
            inner.type = TensorType(v.type.elem_type)


def _np(dt) -> np.dtype:
    from ..ir.dtypes import to_numpy

    return to_numpy(DataType(dt))


# ---------------------------------------------------------------------------------- the walk


class _Converter:
    def __init__(self, target: int):
        self.target = target

    def graph(self, g: Graph, src: int) -> None:
        for node in list(g):
            _type_body_inputs(node)
            for sub in node.subgraphs():
                self.graph(sub, src)
            if node.domain in ("", "ai.onnx"):
                self.node(g, node, src)

    def node(self, g: Graph, n: Node, src: int, depth: int = 0) -> None:
        dst = self.target
        s = defs.get_schema(n.op_type, src)
        if s is None:
            raise _err(n, f"no operator {n.op_type!r} at opset {src}")
        t = defs.get_schema(n.op_type, dst)
        usable = t is not None and not t.deprecated
        if usable and t.since_version == s.since_version:
            return
        fn = ADAPTERS.get(n.op_type)
        if fn is not None:
            if fn(_Edit(g, n, dst), s.since_version, t.since_version if usable else dst) == EXPAND:
                self.expand(g, n, s, src, depth)
                return
            t = defs.get_schema(n.op_type, dst)  # (an adapter may rename the op)
            usable = t is not None and not t.deprecated
        if not usable:
            self.expand(g, n, s, src, depth)
            return
        _drop_defaults(n, s, t)
        problem = _mismatch(n, t)
        if problem:
            if dst < src and ((fn is None and s.functions) or _has_expansion(n.op_type)):
                self.expand(g, n, s, src, depth)
                return
            raise _err(n, f"{problem} at opset {dst} ({n.op_type}-{t.since_version})")

    def expand(self, g: Graph, n: Node, s, src: int, depth: int) -> None:
        """Replace the node by its standard function body, converted in turn."""
        from .version_bodies import EXPANSIONS

        body = s.function_for(src)
        if body is None and n.op_type in EXPANSIONS and depth <= 8:
            made = EXPANSIONS[n.op_type](_Edit(g, n, self.target))
            for new in made:
                if new.graph is g:
                    self.node(g, new, 13, depth + 1)
            return
        if body is None or depth > 8:
            why = (
                "its body depends on the node (no stored function)"
                if s.has_context_dependent_function
                else "the standard gives it no function body"
            )
            reach = "newer than" if self.target < src else "removed by"
            raise _err(n, f"{n.op_type} is {reach} opset {self.target} and {why}")
        from .compose import _clone_nodes

        f = body.to_function("", n.op_type)
        attrs = {a.name: a for a in f.attribute_defaults}
        for name, default in s.defaults.items():
            attrs.setdefault(name, Attr(name, s.attributes[name].type, default))
        attrs.update(n.attributes)
        vmap = {
            id(v): (n.inputs[i] if i < len(n.inputs) else None)
            for i, v in enumerate(f.graph.inputs)
        }
        prefix = f"{n.name or n.op_type}_{id(n) % 100000}/"
        nodes = _clone_nodes(f.graph, vmap, prefix, attrs)
        for new in nodes:
            g.insert_before(n, new)
        for out, body_out in zip(n.outputs, f.graph.outputs):
            produced = vmap.get(id(body_out))
            if produced is None or not out.name:
                continue
            if produced.producer is None or produced.producer not in nodes:
                ident = Node("Identity", [produced], [Value(out.name + "_id")])
                g.insert_before(n, ident)
                produced = ident.outputs[0]
            produced.type = produced.type or out.type
            out.replace_all_uses_with(produced)
            g.outputs = [produced if v is out else v for v in g.outputs]
            produced.name = out.name
        g.remove(n, safe=False)
        body_src = body.opsets.get("", src)
        for new in nodes:
            if new.graph is g:
                _type_body_inputs(new)
                for sub in new.subgraphs():  # (a body's Loop: its own body too)
                    self.graph(sub, body_src)
                self.node(g, new, body_src, depth + 1)


def _has_expansion(op: str) -> bool:
    from .version_bodies import EXPANSIONS

    return op in EXPANSIONS


def _drop_defaults(n: Node, s, t) -> None:
    """Attributes the target lacks but that hold the source schema's default: leaving them out
    means the same (select_last_index=0, saturate=1, ...)."""
    for key in list(n.attributes):
        if key in t.attributes:
            continue
        spec = s.attributes.get(key)
        a = n.attributes[key]
        if (
            spec is not None
            and spec.default is not None
            and not a.is_ref
            and a.value == spec.default
        ):
            del n.attributes[key]


def _mismatch(n: Node, t) -> str:
    """What keeps ``n`` from being a valid ``t`` node ('' when nothing)."""
    for key in n.attributes:
        if key not in t.attributes:
            return f"attribute {key!r} does not exist"
    missing = [a for a in t.required_attributes if a not in n.attributes]
    if missing:
        return f"required attribute(s) {missing} missing"
    k = len(n.inputs)
    while k and n.inputs[k - 1] is None:
        k -= 1
    if not t.min_input <= k <= t.max_input:
        return f"{k} inputs where it takes {t.min_input}..{t.max_input}"
    if not t.min_output <= len(n.outputs) <= t.max_output:
        return f"{len(n.outputs)} outputs where it has {t.min_output}..{t.max_output}"
    from ..checker import type_string

    for i, v in enumerate(n.inputs):
        if v is None or not t.inputs:
            continue
        p = t.inputs[min(i, len(t.inputs) - 1)]
        allowed = t.allowed_types(p.type_str)
        ts = type_string(v.type) if v.type is not None else None
        if allowed is not None and ts is not None and ts not in allowed:
            return f"input {i} ({p.name}) of type {ts} is not accepted"
    return ""
