"""Function bodies the standard builds per node (its "context-dependent" functions), written
out for the version converter: LayerNormalization, RMSNormalization, Gelu, Attention,
NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Each expansion emits opset-13 forms of ordinary operators before the node, hands the node's
outputs to them and removes the node; the converter then converts those nodes to the target
like any other (so an Unsqueeze gets its attribute form below 13, a Softmax its 2-D
coercion). Where a step needs an operator the target lacks and no exact replacement exists,
the expansion refuses up front with an error naming the original node.

Half-precision inputs of Attention and the losses are computed in float32 and cast back, as
onyx's kernels (and onnxruntime's) do, so the expansion gives the kernel's numbers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir import DataType, Node, TensorType, Value
from .version_converter import _const_array, _dims, _Edit, _err, _np, _rank

_HALF = (DataType.FLOAT16, DataType.BFLOAT16)


def _typed_const(edit: _Edit, value: float, like: Value | DataType) -> Value:
    dt = like if isinstance(like, DataType) else (like.dtype or DataType.FLOAT)
    return edit.const(np.array(value, _np(dt)))


def _ints(values) -> np.ndarray:
    return np.array(values, np.int64)


def _with_rank(v: Value, dtype: DataType, rank: int) -> Value:
    """Give a made value a type of known rank (adapters below 13 need the rank)."""
    v.type = TensorType(dtype, (None,) * rank)
    return v


def _finish(edit: _Edit, before: int, produced: list[Value | None]) -> list[Node]:
    """Hand the node's outputs to ``produced`` (made by the expansion) and remove the node."""
    g, n = edit.g, edit.node
    start = g.nodes.index(n) - (len(g) - before)
    made = list(g.nodes[start : g.nodes.index(n)])
    for out, new in zip(n.outputs, produced):
        if not out.name or new is None:
            continue
        new.type = new.type or out.type
        out.replace_all_uses_with(new)
        g.outputs = [new if v is out else v for v in g.outputs]
        new.name = out.name
    g.remove(n, safe=False)
    outputs = {id(v) for v in g.outputs}
    for node in reversed(made):  # helpers the chosen path left unread
        if not any(v.uses() or id(v) in outputs for v in node.outputs):
            g.remove(node, safe=False)
    return [node for node in made if node.graph is g]


def _shape_part(edit: _Edit, x: Value, start: int, end: int) -> Value:
    """Shape(x)[start:end] as a 1-D int64 tensor (Slice of Shape: every opset has it)."""
    shape = edit.one("Shape", [x])
    return edit.one("Slice", [shape, edit.const(_ints([start])), edit.const(_ints([end]))])


# -- normalizations and Gelu ------------------------------------------------------------------


def _norm_axes(edit: _Edit, axis: int) -> list[int]:
    rank = _rank(edit.node.inputs[0])
    if rank is None:
        raise _err(edit.node, "expanding it needs the input's rank")
    axis = axis + rank if axis < 0 else axis
    return list(range(axis, rank))


def _expand_layernorm(edit: _Edit) -> list[Node]:
    n = edit.node
    x, scale = n.inputs[0], n.inputs[1]
    bias = n.inputs[2] if len(n.inputs) > 2 else None
    axes = _norm_axes(edit, n.attr("axis", -1))
    before = len(edit.g)
    mean = edit.one("ReduceMean", [x], {"axes": axes, "keepdims": 1})
    d = edit.one("Sub", [x, mean])
    sq = edit.one("Mul", [d, d])
    var = edit.one("ReduceMean", [sq], {"axes": axes, "keepdims": 1})
    ve = edit.one("Add", [var, _typed_const(edit, n.attr("epsilon", 1e-5), x)])
    std = edit.one("Sqrt", [ve])
    inv = edit.one("Reciprocal", [std])
    normed = edit.one("Mul", [d, inv])
    y = edit.one("Mul", [normed, scale])
    if bias is not None:
        y = edit.one("Add", [y, bias])
    return _finish(edit, before, [y, mean, inv])


def _expand_rmsnorm(edit: _Edit) -> list[Node]:
    n = edit.node
    x, scale = n.inputs[0], n.inputs[1]
    axes = _norm_axes(edit, n.attr("axis", -1))
    before = len(edit.g)
    sq = edit.one("Mul", [x, x])
    ms = edit.one("ReduceMean", [sq], {"axes": axes, "keepdims": 1})
    me = edit.one("Add", [ms, _typed_const(edit, n.attr("epsilon", 1e-5), x)])
    rms = edit.one("Sqrt", [me])
    normed = edit.one("Div", [x, rms])
    y = edit.one("Mul", [normed, scale])
    return _finish(edit, before, [y])


def _expand_gelu(edit: _Edit) -> list[Node]:
    n = edit.node
    x = n.inputs[0]
    before = len(edit.g)
    half = edit.one("Mul", [x, _typed_const(edit, 0.5, x)])
    if n.attr("approximate", "none") == "tanh":
        x2 = edit.one("Mul", [x, x])
        x3 = edit.one("Mul", [x2, x])
        c3 = edit.one("Mul", [x3, _typed_const(edit, 0.044715, x)])
        inner = edit.one("Add", [x, c3])
        scaled = edit.one("Mul", [inner, _typed_const(edit, float(np.sqrt(2 / np.pi)), x)])
        t = edit.one("Tanh", [scaled])
    else:
        scaled = edit.one("Div", [x, _typed_const(edit, float(np.sqrt(2.0)), x)])
        t = edit.one("Erf", [scaled])
    one = edit.one("Add", [t, _typed_const(edit, 1.0, x)])
    y = edit.one("Mul", [half, one])
    return _finish(edit, before, [y])


# -- losses -----------------------------------------------------------------------------------


def _compute_type(edit: _Edit, x: Value) -> DataType:
    dt = x.dtype
    if dt is None:
        raise _err(edit.node, "expanding it needs the input's element type")
    return DataType.DOUBLE if dt == DataType.DOUBLE else DataType.FLOAT


def _pick_class(edit: _Edit, x: Value, target: Value) -> Value:
    """x[n, target[n, 1, d...], d...] as [N, 1, d...]: GatherElements from 11; before, a
    Gather from the flattened input when its shape is static, else (from 9) a one-hot
    selection summed over the classes (adding zeros: exact)."""
    if edit.target >= 11:
        return edit.one("GatherElements", [x, target], {"axis": 1})
    dims = _dims(edit.node.inputs[0])
    if dims is None or not all(isinstance(d, int) for d in dims):
        edit.need(9, "an input of unknown shape (a OneHot)")
        depth = _shape_part(edit, x, 1, 2)
        labels = edit.one(
            "Cast",
            [edit.one("Squeeze", [target, edit.const(_ints([1]))])],
            {"to": int(DataType.INT64)},
        )
        # int64 one-hot values, then a Cast: onnxruntime has no OneHot with bool values
        hot = edit.one("OneHot", [labels, depth, edit.const(_ints([0, 1]))], {"axis": 1})
        hot = edit.one("Cast", [hot], {"to": int(DataType.BOOL)})
        chosen = edit.one("Where", [hot, x, _typed_const(edit, 0.0, x.dtype)])
        return edit.one("ReduceSum", [chosen, edit.const(_ints([1]))], {"keepdims": 1})
    n, c, rest = dims[0], dims[1], list(dims[2:])
    inner = int(np.prod(rest, dtype=np.int64))
    base = np.arange(n)[:, None] * (c * inner) + np.arange(inner)[None, :]
    base = base.reshape([n, 1, *rest]).astype(np.int64)
    t64 = edit.one("Cast", [target], {"to": int(DataType.INT64)})
    offset = edit.one("Add", [edit.const(base), edit.one("Mul", [t64, edit.const(_ints(inner))])])
    flat = edit.one("Reshape", [x, edit.const(_ints([-1]))])
    return edit.one("Gather", [flat, offset], {"axis": 0})


def _nll_body(edit: _Edit, log_prob: Value, target: Value, weight, ignore, reduction) -> Value:
    """The negative log-likelihood loss of ``log_prob`` (compute type) as a value. Ignored
    entries read class 0 and weigh 0: from 9 a Where zeroes them as the standard's body does;
    before, the weight's 0 multiplies them, as onyx's kernel computes (the same numbers but
    where the input at class 0 is infinite)."""
    ct = log_prob.dtype
    if reduction not in ("none", "sum", "mean"):
        raise _err(edit.node, f"unknown reduction {reduction!r}")
    axis1 = edit.const(_ints([1]))
    t1 = edit.one("Unsqueeze", [target, axis1])
    ignored = kept = None
    if ignore is not None:
        tdt = target.dtype or DataType.INT64
        ignored = edit.one("Equal", [t1, edit.const(np.array(ignore, _np(tdt)))])
        if edit.target >= 9:
            t1 = edit.one("Where", [ignored, edit.const(np.array(0, _np(tdt))), t1])
        else:
            kept = edit.one("Not", [ignored])
            t1 = edit.one("Mul", [t1, edit.one("Cast", [kept], {"to": int(tdt)})])
    picked = _pick_class(edit, log_prob, t1)
    if ignored is not None and kept is None:
        picked = edit.one("Where", [ignored, _typed_const(edit, 0.0, ct), picked])
    loss = edit.one("Squeeze", [edit.one("Neg", [picked]), axis1])
    w = None
    if weight is not None:
        w = edit.one("Gather", [weight, edit.one("Squeeze", [t1, axis1])], {"axis": 0})
        if weight.dtype is not None and weight.dtype != ct:
            w = edit.one("Cast", [w], {"to": int(ct)})
    if kept is not None:
        weigh = edit.one("Cast", [edit.one("Squeeze", [kept, axis1])], {"to": int(ct)})
        w = weigh if w is None else edit.one("Mul", [w, weigh])
    elif ignored is not None:
        keep = w if w is not None else _typed_const(edit, 1.0, ct)
        w = edit.one(
            "Where", [edit.one("Squeeze", [ignored, axis1]), _typed_const(edit, 0.0, ct), keep]
        )
    if w is not None:
        loss = edit.one("Mul", [loss, w])
    if reduction == "none":
        return loss
    total = edit.one("ReduceSum", [loss], {"keepdims": 0})
    if reduction == "sum":
        return total
    if w is None:
        return edit.one("ReduceMean", [loss], {"keepdims": 0})
    return edit.one("Div", [total, edit.one("ReduceSum", [w], {"keepdims": 0})])


def _loss_inputs(edit: _Edit):
    n = edit.node
    ins = list(n.inputs) + [None] * (3 - len(n.inputs))
    x, target, weight = ins[:3]
    ct = _compute_type(edit, x)
    rank = _rank(x)
    if rank is None:
        raise _err(n, "expanding it needs the input's rank")
    if x.dtype != ct:
        x = _with_rank(edit.one("Cast", [x], {"to": int(ct)}), ct, rank)
    return x, target, weight, ct


def _back(edit: _Edit, v: Value, like: Value) -> Value:
    """``v`` cast back to the element type of ``like`` where the body computed wider."""
    if like.dtype is not None and v.dtype != like.dtype:
        return edit.one("Cast", [v], {"to": int(like.dtype)})
    return v


def _expand_nll(edit: _Edit) -> list[Node]:
    n = edit.node
    before = len(edit.g)
    x, target, weight, ct = _loss_inputs(edit)
    loss = _nll_body(edit, x, target, weight, n.attr("ignore_index"), n.attr("reduction", "mean"))
    loss.type = TensorType(ct)
    return _finish(edit, before, [_back(edit, loss, n.inputs[0])])


def _expand_sce(edit: _Edit) -> list[Node]:
    n = edit.node
    before = len(edit.g)
    x, target, weight, ct = _loss_inputs(edit)
    log_prob = _with_rank(edit.one("LogSoftmax", [x], {"axis": 1}), ct, _rank(x))
    loss = _nll_body(
        edit, log_prob, target, weight, n.attr("ignore_index"), n.attr("reduction", "mean")
    )
    loss.type = TensorType(ct)
    outs = [_back(edit, loss, n.inputs[0])]
    if len(n.outputs) > 1 and n.outputs[1].name:
        outs.append(_back(edit, log_prob, n.inputs[0]))
    return _finish(edit, before, outs)


# -- Attention --------------------------------------------------------------------------------


def _heads(edit: _Edit, x: Value, count: str) -> tuple[Value, list]:
    """[B, S, H*D] -> [B, H, S, D] (3-D input; 4-D passes), with the static dims known."""
    n = edit.node
    dims = _dims(x)
    if dims is None or len(dims) not in (3, 4):
        raise _err(n, f"expanding it needs the rank (3 or 4) of input {x.name!r}")
    if len(dims) == 4:
        return x, list(dims)
    h = n.attr(count)
    if h is None:
        raise _err(n, f"3-D inputs need the {count} attribute")
    r = edit.one("Reshape", [x, edit.const(_ints([0, 0, h, -1]))])
    hidden = dims[2]
    size = hidden // h if isinstance(hidden, int) else None
    return edit.one("Transpose", [r], {"perm": [0, 2, 1, 3]}), [dims[0], h, dims[1], size]


def _positions(edit: _Edit, length, x: Value, axis: int) -> Value | np.ndarray:
    """0..length-1 (int64): a constant when static, else a Range over x's dim ``axis``."""
    if isinstance(length, int):
        return np.arange(length, dtype=np.int64)
    edit.need(11, "a dynamic sequence length (a Range)")
    size = edit.one("Squeeze", [_shape_part(edit, x, axis, axis + 1), edit.const(_ints([0]))])
    return edit.one(
        "Range", [edit.const(np.array(0, np.int64)), size, edit.const(np.array(1, np.int64))]
    )


def _reshape_pos(edit: _Edit, pos, shape: list[int]):
    if isinstance(pos, np.ndarray):
        return pos.reshape(shape)
    return edit.one("Reshape", [pos, edit.const(_ints(shape))])


class _Allowed:
    """A boolean mask built from constants while it can be (numpy), from nodes after."""

    def __init__(self, edit: _Edit):
        self.edit, self.value = edit, None

    def op(self, op: str, a, b):
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            return {
                "Less": np.less,
                "Greater": np.greater,
                "Add": np.add,
                "Sub": np.subtract,
                "And": np.logical_and,
            }[op](a, b)
        self.edit.need(9, "a causal, windowed or padded-key mask on dynamic positions")
        a = self.edit.const(a) if isinstance(a, np.ndarray) else a
        b = self.edit.const(b) if isinstance(b, np.ndarray) else b
        return self.edit.one(op, [a, b])

    def add(self, cond) -> None:
        self.value = cond if self.value is None else self.op("And", self.value, cond)

    def not_greater(self, a, b) -> None:  # a <= b
        g = self.op("Greater", a, b)
        self.add(~g if isinstance(g, np.ndarray) else self.edit.one("Not", [g]))

    def not_less(self, a, b) -> None:  # a >= b
        lt = self.op("Less", a, b)
        self.add(~lt if isinstance(lt, np.ndarray) else self.edit.one("Not", [lt]))


def _structural_bias(edit: _Edit, q_len, total, k_all: Value, q: Value, past, nonpad, ct):
    """-inf where the causal frontier, the sliding window or the key padding forbids a key:
    a [1 or B, 1, q, total] bias (None when nothing is forbidden)."""
    n = edit.node
    causal = bool(n.attr("is_causal", 0))
    left, right = n.attr("left_window_size", -1), n.attr("right_window_size", -1)
    if not (causal or left >= 0 or right >= 0 or nonpad is not None):
        return None
    # (rank 4 throughout: the bias's rank decides the axis of the fully-masked-row check)
    i = _reshape_pos(edit, _positions(edit, q_len, q, 2), [1, 1, -1, 1])
    j = _reshape_pos(edit, _positions(edit, total, k_all, 2), [1, 1, 1, -1])
    allowed = _Allowed(edit)
    valid = None
    if nonpad is not None:
        valid = edit.one("Cast", [nonpad], {"to": int(DataType.INT64)})
        valid = _reshape_pos(edit, valid, [-1, 1, 1, 1])
    if past is not None or nonpad is None:  # the query block follows the cached keys
        past_len = (_dims(past) or [None] * 3)[2] if past is not None else 0
        if not isinstance(past_len, int):
            past_len = _shape_part(edit, past, 2, 3)
        else:
            past_len = np.array(past_len, np.int64)
        pos = allowed.op("Add", i, past_len)
    else:  # an external cache: the nonpad_kv_seqlen valid keys end at the last query
        q_count = np.array(q_len, np.int64) if isinstance(q_len, int) else None
        start = allowed.op(
            "Sub", valid, q_count if q_count is not None else _shape_part(edit, q, 2, 3)
        )
        pos = allowed.op("Add", i, start)
    if causal:
        allowed.not_greater(j, pos)
    if left >= 0:
        allowed.not_less(j, allowed.op("Sub", pos, np.array(left, np.int64)))
    if right >= 0:
        allowed.not_greater(j, allowed.op("Add", pos, np.array(right, np.int64)))
    if valid is not None:
        allowed.add(allowed.op("Less", j, valid))
    value = allowed.value
    if isinstance(value, np.ndarray):
        return edit.const(np.where(value, 0.0, -np.inf).astype(_np(ct)))
    zero, ninf = _typed_const(edit, 0.0, ct), _typed_const(edit, -np.inf, ct)
    return edit.one("Where", [value, zero, ninf])


def _mask_bias(edit: _Edit, mask: Value, total, k_all: Value, ct: DataType) -> Value:
    """attn_mask as an additive bias in the compute type, padded with -inf to the key count
    when shorter (opset 24's rule; onyx's kernel applies it at 23 too)."""
    if mask.dtype == DataType.BOOL:
        edit.need(9, "a boolean attn_mask (a Where)")
        zero, ninf = _typed_const(edit, 0.0, ct), _typed_const(edit, -np.inf, ct)
        bias = edit.one("Where", [mask, zero, ninf])
    elif mask.dtype is None:
        raise _err(edit.node, "expanding it needs attn_mask's element type")
    elif mask.dtype != ct:
        bias = edit.one("Cast", [mask], {"to": int(ct)})
    else:
        bias = mask
    dims = _dims(mask)
    if dims is None:
        raise _err(edit.node, "expanding it needs attn_mask's rank")
    last = dims[-1]
    if isinstance(last, int) and isinstance(total, int):
        if last >= total:
            return bias
        pads = _ints([0] * (2 * len(dims) - 1) + [total - last])
        return edit.one("Pad", [bias, edit.const(pads), _typed_const(edit, -np.inf, ct)])
    if last is not None and last == total:
        return bias
    edit.need(11, "an attn_mask of unknown length (a computed Pad)")
    keys = _shape_part(edit, k_all, 2, 3)
    short = edit.one("Sub", [keys, _shape_part(edit, mask, len(dims) - 1, len(dims))])
    pads = edit.one("Concat", [edit.const(_ints([0] * (2 * len(dims) - 1))), short], {"axis": 0})
    return edit.one("Pad", [bias, pads, _typed_const(edit, -np.inf, ct)])


def _repeat_heads(edit: _Edit, x: Value, dims: list, q_heads: int) -> Value:
    """[B, Hkv, T, D] -> [B, Hq, T, D], each kv head serving Hq/Hkv query heads in turn."""
    group = q_heads // dims[1]
    u = edit.one("Unsqueeze", [x, edit.const(_ints([2]))])
    rep = edit.one("Concat", [u] * group, {"axis": 2})
    if isinstance(dims[3], int):
        shape = edit.const(_ints([0, q_heads, -1, dims[3]]))
    else:
        shape = edit.one(
            "Concat", [edit.const(_ints([0, q_heads, -1])), _shape_part(edit, x, 3, 4)], {"axis": 0}
        )
    return edit.one("Reshape", [rep, shape])


def _cast(edit: _Edit, v: Value, dt: DataType) -> Value:
    return v if v.dtype == dt else edit.one("Cast", [v], {"to": int(dt)})


def _expand_attention(edit: _Edit) -> list[Node]:
    n = edit.node
    ins = list(n.inputs) + [None] * (7 - len(n.inputs))
    Q, K, V, mask, past_k, past_v, nonpad = ins[:7]
    if Q.dtype is None:
        raise _err(n, "expanding it needs Q's element type")
    ct = DataType.DOUBLE if Q.dtype == DataType.DOUBLE else DataType.FLOAT
    before = len(edit.g)
    q, qd = _heads(edit, Q, "q_num_heads")
    k, kd = _heads(edit, K, "kv_num_heads")
    v, vd = _heads(edit, V, "kv_num_heads")
    for a, b in ((Q, q), (K, k), (V, v)):
        if b is not a:
            b.type = TensorType(a.dtype, (None,) * 4)
    total = kd[2]
    if past_k is not None:
        pk = _dims(past_k)
        total = pk[2] + kd[2] if pk and isinstance(pk[2], int) and isinstance(kd[2], int) else None
        k = edit.one("Concat", [past_k, _cast(edit, k, past_k.dtype or K.dtype)], {"axis": 2})
        v = edit.one("Concat", [past_v, _cast(edit, v, past_v.dtype or V.dtype)], {"axis": 2})
    present_k = k if k is not K else edit.one("Identity", [k])
    present_v = v if v is not V else edit.one("Identity", [v])
    k_all = k
    q, k, v = _cast(edit, q, ct), _cast(edit, k, ct), _cast(edit, v, ct)
    q_heads, kv_heads = qd[1], kd[1]
    if not (isinstance(q_heads, int) and isinstance(kv_heads, int)):
        raise _err(n, "expanding it needs the head counts (static dim 1 of 4-D inputs)")
    if q_heads != kv_heads:
        if q_heads % kv_heads:
            raise _err(n, f"{q_heads} query heads do not group over {kv_heads} kv heads")
        k = _repeat_heads(edit, k, [kd[0], kv_heads, total, kd[3]], q_heads)
        v = _repeat_heads(edit, v, [vd[0], kv_heads, total, vd[3]], q_heads)
    # Q and K are each scaled by sqrt(scale) before their product, as the standard's body does
    scale = n.attr("scale")
    if scale is None and isinstance(qd[3], int):
        scale = 1 / np.sqrt(qd[3])
    if scale is not None:
        root = _typed_const(edit, float(np.sqrt(scale)), ct)
    else:
        size = edit.one("Cast", [_shape_part(edit, q, 3, 4)], {"to": int(ct)})
        root = edit.one("Sqrt", [edit.one("Reciprocal", [edit.one("Sqrt", [size])])])
    kt = edit.one("Transpose", [k], {"perm": [0, 1, 3, 2]})
    qk = edit.one("MatMul", [edit.one("Mul", [q, root]), edit.one("Mul", [kt, root])])
    stages = [qk]
    softcap = n.attr("softcap", 0.0)
    if softcap > 0:
        cap = _typed_const(edit, softcap, ct)
        qk = edit.one("Mul", [edit.one("Tanh", [edit.one("Div", [qk, cap])]), cap])
    stages.append(qk)
    biases = []
    if mask is not None:
        biases.append(_mask_bias(edit, mask, total, k_all, ct))
    structural = _structural_bias(edit, qd[2], total, k_all, q, past_k, nonpad, ct)
    if structural is not None:
        biases.append(structural)
    bias = biases[0] if biases else None
    for more in biases[1:]:
        bias = edit.one("Add", [bias, more])
    scores = edit.one("Add", [qk, bias]) if bias is not None else qk
    stages.append(scores)
    probs = _softmax(edit, scores, ct)
    if _may_mask_whole_rows(mask, structural):
        edit.need(9, "zeroing fully masked rows (a Where)")
        rank = _rank(bias) if bias.type is not None else None
        rank = rank if rank is not None else (4 if structural is not None else _rank(mask))
        top = edit.one("ReduceMax", [bias], {"axes": [rank - 1], "keepdims": 1})
        lowest = _typed_const(edit, float(np.finfo(_np(ct)).min), ct)
        dead = edit.one("Less", [top, lowest])  # (only -inf is below the lowest finite)
        probs = edit.one("Where", [dead, _typed_const(edit, 0.0, ct), probs])
    stages.append(probs)
    y = edit.one("MatMul", [probs, v])
    if _rank(Q) == 3:
        y = edit.one("Transpose", [y], {"perm": [0, 2, 1, 3]})
        y = edit.one("Reshape", [y, edit.const(_ints([0, 0, -1]))])
    y = _cast(edit, y, Q.dtype)
    extra = _cast(edit, stages[n.attr("qk_matmul_output_mode", 0)], Q.dtype)
    return _finish(edit, before, [y, present_k, present_v, extra])


def _may_mask_whole_rows(mask: Value | None, structural: Value | None) -> bool:
    if mask is not None:
        return True
    if structural is None:
        return False
    const = structural.producer.attributes.get("value") if structural.producer else None
    if structural.producer.op_type != "Constant" or const is None:
        return True
    return bool(np.isneginf(const.value.numpy()).all(axis=-1).any())


def _softmax(edit: _Edit, scores: Value, ct: DataType) -> Value:
    """Softmax over the keys; ``softmax_precision`` rounds the scores and the probabilities to
    that type (as onyx's kernel does) when it differs from the compute type."""
    precision = edit.node.attr("softmax_precision")
    if precision is not None and DataType(precision) != ct:
        to = {"to": int(precision)}
        scores = edit.one("Cast", [edit.one("Cast", [scores], to)], {"to": int(ct)})
    probs = edit.one("Softmax", [_with_rank(scores, ct, 4)], {"axis": -1})
    if precision is not None and DataType(precision) != ct:
        probs = edit.one("Cast", [edit.one("Cast", [probs], to)], {"to": int(ct)})
    return probs


# -- operators newer than the target with an exact older form (not standard functions) -----


def _expand_constant_of_shape(edit: _Edit) -> list[Node]:
    """A Constant when the shape is constant; else Expand (from 8) or Tile (from 6) of the
    one-element value."""
    n = edit.node
    a = n.attributes.get("value")
    value = a.value.numpy().reshape(()) if a is not None else np.array(0, np.float32)
    shape, before = _const_array(n.inputs[0]), len(edit.g)
    if shape is not None:
        return _finish(edit, before, [edit.const(np.full(shape.astype(np.int64), value))])
    if edit.target >= 8:
        return _finish(edit, before, [edit.one("Expand", [edit.const(value), n.inputs[0]])])
    length = (_dims(n.inputs[0]) or [None])[0]
    if not isinstance(length, int):
        raise _err(n, "a computed shape of unknown length has no form before opset 8")
    edit.need(6, "a computed shape (a Tile)")
    one = edit.const(value.reshape((1,) * length))
    return _finish(edit, before, [edit.one("Tile", [one, n.inputs[0]])])


def _expand_expand(edit: _Edit) -> list[Node]:
    """Expand before 8: a Tile of the input (its static shape padded to the result's rank)
    repeating the dims of size 1 by the target shape's."""
    n = edit.node
    x, shape = n.inputs[0], n.inputs[1]
    dims, length = _dims(x), (_dims(shape) or [None])[0]
    if dims is None or not all(isinstance(d, int) for d in dims) or not isinstance(length, int):
        raise _err(n, "before opset 8 it needs the input's static shape and the shape's length")
    edit.need(6, "broadcasting to a computed shape (a Tile)")
    rank = max(len(dims), length)
    padded = [1] * (rank - len(dims)) + list(dims)
    before = len(edit.g)
    x = edit.one("Reshape", [x, edit.const(_ints(padded))]) if rank != len(dims) else x
    wanted = _const_array(shape)
    if wanted is not None:
        full = [1] * (rank - length) + [int(w) for w in wanted.reshape(-1)]
        reps = _ints([f if d == 1 else 1 for d, f in zip(padded, full)])
        return _finish(edit, before, [edit.one("Tile", [x, edit.const(reps)])])
    if rank != length:
        shape = edit.one("Concat", [edit.const(_ints([1] * (rank - length))), shape], {"axis": 0})
    ones = _ints([1 if d == 1 else 0 for d in padded])  # repeat by the shape where dim is 1
    reps = edit.one("Add", [edit.one("Mul", [shape, edit.const(ones)]), edit.const(1 - ones)])
    return _finish(edit, before, [edit.one("Tile", [x, reps])])


def _expand_gather_elements(edit: _Edit) -> list[Node]:
    """GatherElements before 11: a Gather from the flattened data at flat offsets computed
    from the static shapes; a negative index picks its wrap-around correction from a table
    (Gather again) rather than a comparison, which has no int form before 9."""
    n = edit.node
    data, idx = n.inputs[0], n.inputs[1]
    dd, di = _dims(data), _dims(idx)
    if not (dd and di and all(isinstance(d, int) for d in [*dd, *di]) and len(dd) == len(di)):
        raise _err(n, "before opset 11 it needs the static shapes of data and indices")
    axis = n.attr("axis", 0)
    axis += len(dd) if axis < 0 else 0
    strides = np.cumprod([1, *dd[::-1]])[:-1][::-1].astype(np.int64)
    grid = np.indices(di, dtype=np.int64)
    base = sum(grid[k] * strides[k] for k in range(len(dd)) if k != axis)
    size, stride = dd[axis], int(strides[axis])
    before = len(edit.g)
    i64 = edit.one("Cast", [idx], {"to": int(DataType.INT64)})
    table = edit.const(_ints([size * stride] * size + [0] * size))
    wrap = edit.one("Gather", [table, edit.one("Add", [i64, edit.const(_ints(size))])])
    scaled = edit.one("Mul", [i64, edit.const(_ints(stride))])
    offset = edit.one("Add", [edit.one("Add", [scaled, wrap]), edit.const(np.asarray(base))])
    flat = edit.one("Reshape", [data, edit.const(_ints([-1]))])
    return _finish(edit, before, [edit.one("Gather", [flat, offset], {"axis": 0})])


def _expand_trilu(edit: _Edit) -> list[Node]:
    """Trilu before 14: a Where (from 9) choosing the input inside the triangle, zero outside;
    the triangle compares the constant j - i of the static last two dims with k."""
    n = edit.node
    x = n.inputs[0]
    dims = _dims(x)
    if dims is None or len(dims) < 2 or not all(isinstance(d, int) for d in dims[-2:]):
        raise _err(n, "before opset 14 it needs the static sizes of the input's last two dims")
    edit.need(9, "Trilu's triangle (a Where)")
    rows, cols = dims[-2:]
    diagonal = np.arange(cols)[None, :] - np.arange(rows)[:, None]  # j - i
    upper = bool(n.attr("upper", 1))
    k = n.inputs[1] if len(n.inputs) > 1 else None
    before = len(edit.g)
    if k is None or _const_array(k) is not None:
        kv = 0 if k is None else int(_const_array(k).reshape(-1)[0])
        keep = edit.const(diagonal >= kv if upper else diagonal <= kv)
    else:  # upper: j - i >= k; lower: j - i <= k
        outside = edit.one("Less" if upper else "Greater", [edit.const(diagonal), k])
        keep = edit.one("Not", [outside])
    zero = edit.const(np.zeros((), _np(x.dtype or DataType.FLOAT)))
    return _finish(edit, before, [edit.one("Where", [keep, x, zero])])


def _expand_causal_conv(edit: _Edit) -> list[Node]:
    """CausalConvWithState (27): the past state (zeros when absent) before the input, a
    depthwise Conv over it, the activation; the present state is the last k-1 steps."""
    n = edit.node
    ins = list(n.inputs) + [None] * (4 - len(n.inputs))
    x, w, bias, past = ins[:4]
    wd = _dims(w)
    if _rank(x) != 3 or wd is None or not all(isinstance(d, int) for d in wd):
        raise _err(n, "expanding it needs a 3-D input and the weight's static shape")
    channels, k = wd[0], wd[-1]
    activation = n.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise _err(n, f"unknown activation {activation!r}")
    ct = _compute_type(edit, x)
    before = len(edit.g)
    xc, wc = _cast(edit, x, ct), _cast(edit, w, ct)
    if past is None:
        pads = edit.const(_ints([0, 0, k - 1, 0, 0, 0]))
        seq = edit.one("Pad", [xc, pads, _typed_const(edit, 0.0, ct)])
    else:
        seq = edit.one("Concat", [_cast(edit, past, ct), xc], {"axis": 2})
    conv_in = [seq, wc] + ([_cast(edit, bias, ct)] if bias is not None else [])
    y = edit.one("Conv", conv_in, {"group": channels, "kernel_shape": [k]})
    if activation != "none":
        y = edit.one("Mul", [y, edit.one("Sigmoid", [y])])
    start = -(k - 1) if k > 1 else np.iinfo(np.int64).max  # (k = 1: an empty state)
    present = edit.one(
        "Slice",
        [
            seq,
            edit.const(_ints([start])),
            edit.const(_ints([np.iinfo(np.int64).max])),
            edit.const(_ints([2])),
        ],
    )
    return _finish(edit, before, [_cast(edit, y, x.dtype), _cast(edit, present, x.dtype)])


def _expand_center_crop_pad(edit: _Edit) -> list[Node]:
    """CenterCropPad (18) on static dims and a constant shape: a centered Slice where the
    input is larger, a centered zero Pad where it is smaller."""
    n = edit.node
    x, shape = n.inputs[0], _const_array(n.inputs[1])
    dims = _dims(x)
    if dims is None:
        raise _err(n, "expanding it needs the input's rank")
    rank = len(dims)
    axes = [a + rank if a < 0 else a for a in n.attr("axes", list(range(rank)))]
    if shape is None or not all(isinstance(d, int) for d in dims):
        return _center_crop_pad_at_run_time(edit, rank, axes)
    starts, ends, slice_axes, pads = [], [], [], [0] * (2 * rank)
    for a, want in zip(axes, shape.reshape(-1).tolist()):
        have = dims[a]
        if have > want:  # crop: the spec centres with the extra element at the end
            lo = (have - want) // 2
            starts, ends, slice_axes = starts + [lo], ends + [lo + want], slice_axes + [a]
        elif have < want:  # pad: the extra element at the end too
            pads[a] = (want - have) // 2
            pads[a + rank] = want - have - pads[a]
    before = len(edit.g)
    y = x
    if slice_axes:
        y = edit.one(
            "Slice",
            [y, edit.const(_ints(starts)), edit.const(_ints(ends)), edit.const(_ints(slice_axes))],
        )
    if any(pads):
        y = edit.one("Pad", [y, edit.const(_ints(pads))])
    if y is x:
        y = edit.one("Identity", [x])
    return _finish(edit, before, [y])


_EXACT_IN_FLOAT = (DataType.INT8, DataType.UINT8, DataType.INT16, DataType.UINT16)


def _expand_dequantize(edit: _Edit) -> list[Node]:
    """DequantizeLinear as (Cast(x) - Cast(zero_point)) * scale in float32 for the integer
    types whose values and differences float32 holds exactly (one rounding: the product, as
    the kernels round); per-axis parameters reshaped to broadcast along ``axis``."""
    n = edit.node
    ins = list(n.inputs) + [None] * (3 - len(n.inputs))
    x, scale, zp = ins[:3]
    out_type = n.attr("output_dtype", 0) or (scale.dtype if scale is not None else None)
    if n.attr("block_size", 0):
        raise _err(n, "blocked quantization has no form before opset 21")
    if out_type != DataType.FLOAT or scale.dtype != DataType.FLOAT:
        raise _err(n, "written out, it takes float32 scales and output only")
    exact = x.dtype in _EXACT_IN_FLOAT or (x.dtype == DataType.INT32 and _zero(zp))
    if not exact:
        raise _err(n, f"its arithmetic on {x.dtype and x.dtype.name} is not exact in float32")
    before = len(edit.g)
    scale, zp = _along_axis(edit, scale), _along_axis(edit, zp) if not _zero(zp) else None
    y = edit.one("Cast", [x], {"to": int(DataType.FLOAT)})
    if zp is not None:
        y = edit.one("Sub", [y, edit.one("Cast", [zp], {"to": int(DataType.FLOAT)})])
    return _finish(edit, before, [edit.one("Mul", [y, scale])])


def _zero(v: Value | None) -> bool:
    arr = _const_array(v) if v is not None else np.zeros(1)
    return arr is not None and not arr.any()


def _along_axis(edit: _Edit, v: Value) -> Value:
    """A 1-D per-axis parameter reshaped to broadcast along the node's ``axis``."""
    dims = _dims(v)
    arr = _const_array(v)
    size = arr.size if arr is not None else (dims[0] if dims and len(dims) == 1 else None)
    if dims is not None and len(dims) == 0 or size == 1:
        return v
    rank = _rank(edit.node.inputs[0])
    if rank is None:
        raise _err(edit.node, "a per-axis parameter needs the input's rank")
    axis = edit.node.attr("axis", 1)
    axis += rank if axis < 0 else 0
    return edit.one("Reshape", [v, edit.const(_ints([-1] + [1] * (rank - axis - 1)))])


def _expand_rotary(edit: _Edit) -> list[Node]:
    """RotaryEmbedding (23): the rotation of each (x1, x2) pair of the first rotary_dim
    features by the cached angles, as onyx's kernel computes it (halves, or interleaved pairs
    taken by a Reshape to [..., rot/2, 2] rather than strided Slices, which need opset 10)."""
    n = edit.node
    ins = list(n.inputs) + [None] * (4 - len(n.inputs))
    X, cos, sin, positions = ins[:4]
    dims = _dims(X)
    if dims is None or len(dims) not in (3, 4):
        raise _err(n, "expanding it needs the input's rank (3 or 4)")
    heads = n.attr("num_heads", 0)
    if len(dims) == 3 and not heads:
        raise _err(n, "a 3-D input needs num_heads")
    size = dims[3] if len(dims) == 4 else (dims[2] // heads if isinstance(dims[2], int) else None)
    rot = n.attr("rotary_embedding_dim", 0) or size
    if not isinstance(rot, int) or not isinstance(size, int):
        raise _err(n, "expanding it needs the static head size")
    before = len(edit.g)
    x = edit.one("Reshape", [X, edit.const(_ints([0, 0, heads, -1]))]) if len(dims) == 3 else X
    head_axis = 2 if len(dims) == 3 else 1
    if positions is not None:  # the caches indexed by position: [batch, seq, rot/2]
        cos = edit.one("Gather", [cos, positions], {"axis": 0})
        sin = edit.one("Gather", [sin, positions], {"axis": 0})
    cos = edit.one("Unsqueeze", [cos, edit.const(_ints([head_axis]))])
    sin = edit.one("Unsqueeze", [sin, edit.const(_ints([head_axis]))])
    half = rot // 2
    x_rot = _slice_axis(edit, x, 0, rot, 3) if rot < size else x
    if n.attr("interleaved", 0):
        pairs = edit.one("Reshape", [x_rot, edit.const(_ints([0, 0, 0, half, 2]))])
        four = edit.const(_ints([4]))
        x1 = edit.one("Squeeze", [_slice_axis(edit, pairs, 0, 1, 4), four])
        x2 = edit.one("Squeeze", [_slice_axis(edit, pairs, 1, 2, 4), four])
    else:
        x1, x2 = _slice_axis(edit, x_rot, 0, half, 3), _slice_axis(edit, x_rot, half, rot, 3)
    real = edit.one("Sub", [edit.one("Mul", [cos, x1]), edit.one("Mul", [sin, x2])])
    imag = edit.one("Add", [edit.one("Mul", [sin, x1]), edit.one("Mul", [cos, x2])])
    if n.attr("interleaved", 0):
        four = edit.const(_ints([4]))
        both = [edit.one("Unsqueeze", [real, four]), edit.one("Unsqueeze", [imag, four])]
        rotated = edit.one("Concat", both, {"axis": 4})
        rotated = edit.one("Reshape", [rotated, edit.const(_ints([0, 0, 0, rot]))])
    else:
        rotated = edit.one("Concat", [real, imag], {"axis": 3})
    if rot < size:
        rotated = edit.one("Concat", [rotated, _slice_axis(edit, x, rot, size, 3)], {"axis": 3})
    if len(dims) == 3:
        rotated = edit.one("Reshape", [rotated, edit.const(_ints([0, 0, -1]))])
    return _finish(edit, before, [rotated])


def _slice_axis(edit: _Edit, v: Value, start: int, end: int, axis: int) -> Value:
    return edit.one(
        "Slice",
        [v, edit.const(_ints([start])), edit.const(_ints([end])), edit.const(_ints([axis]))],
    )


def _center_crop_pad_at_run_time(edit: _Edit, rank: int, axes: list[int]) -> list[Node]:
    """CenterCropPad with a computed shape or dynamic dims (from 11): per axis the surplus
    is cropped (a Slice from half of it) and the shortfall padded (half before, the rest
    after), both computed from Shape."""
    edit.need(11, "a computed shape or dynamic dims (a computed Slice and Pad)")
    n = edit.node
    x = n.inputs[0]
    before = len(edit.g)
    where = edit.const(_ints(axes))
    have = edit.one("Gather", [edit.one("Shape", [x]), where], {"axis": 0})
    want = _cast(edit, n.inputs[1], DataType.INT64)
    zero, two = edit.const(_ints(0)), edit.const(_ints(2))
    diff = edit.one("Sub", [have, want])
    surplus = edit.one("Where", [edit.one("Greater", [diff, zero]), diff, zero])
    short = edit.one("Where", [edit.one("Less", [diff, zero]), edit.one("Neg", [diff]), zero])
    start = edit.one("Div", [surplus, two])
    end = edit.one("Add", [start, edit.one("Sub", [have, surplus])])
    cropped = edit.one("Slice", [x, start, end, where])
    lo = edit.one("Div", [short, two])
    hi = edit.one("Sub", [short, lo])
    spots = edit.const(_ints(axes + [a + rank for a in axes]))
    amounts = edit.one("Concat", [lo, hi], {"axis": 0})
    pads = edit.one(
        "ScatterElements", [edit.const(np.zeros(2 * rank, np.int64)), spots, amounts], {"axis": 0}
    )
    return _finish(edit, before, [edit.one("Pad", [cropped, pads])])


#: Longest static axis CumProd is unrolled along (one Mul per element).
MAX_UNROLLED_PRODUCTS = 256


def _expand_cumprod(edit: _Edit) -> list[Node]:
    """CumProd (26) unrolled along its static axis: one running Mul per element, in the
    kernel's order (half precision in float32); exclusive shifts in ones, reverse runs from
    the end. The axis must be constant, or the input 1-D."""
    n = edit.node
    x, axis_in = n.inputs[0], n.inputs[1]
    dims = _dims(x)
    if dims is None or not all(isinstance(d, int) for d in dims):
        raise _err(n, "unrolling it needs the input's static shape")
    axis = _const_array(axis_in)
    if axis is None and len(dims) != 1:
        raise _err(n, "unrolling it needs a constant axis (or a 1-D input)")
    axis = 0 if axis is None else int(axis.reshape(-1)[0])
    axis += len(dims) if axis < 0 else 0
    length = dims[axis]
    if length > MAX_UNROLLED_PRODUCTS or length == 0:
        raise _err(n, f"an axis of {length} elements is not unrolled (1..{MAX_UNROLLED_PRODUCTS})")
    ct = x.dtype if x.dtype not in _HALF else DataType.FLOAT
    before = len(edit.g)
    xc = _cast(edit, x, ct)
    order = range(length - 1, -1, -1) if n.attr("reverse", 0) else range(length)
    running, out = None, {}
    exclusive = bool(n.attr("exclusive", 0))
    for i in order:
        if exclusive:
            shape = list(dims)
            shape[axis] = 1
            out[i] = running if running is not None else edit.const(np.ones(shape, _np(ct)))
        step = _slice_axis(edit, xc, i, i + 1, axis)
        running = step if running is None else edit.one("Mul", [running, step])
        if not exclusive:
            out[i] = running
    parts = [out[i] for i in range(length)]
    y = parts[0] if length == 1 else edit.one("Concat", parts, {"axis": axis})
    if y is x:
        y = edit.one("Identity", [x])
    return _finish(edit, before, [_cast(edit, y, x.dtype)])


#: Longest static sequence LinearAttention's recurrence is unrolled over (one block per step).
MAX_UNROLLED_STEPS = 128


def _per_head(edit: _Edit, x: Value, heads: int, size: int, ct: DataType) -> Value:
    """A packed gate [B, T, H*size], [B, T, H] or [B, T, 1] as [B, T, H or 1, size or 1]."""
    last = (_dims(x) or [None])[-1]
    shape = [0, 0, heads, size] if last == heads * size else [0, 0, -1, 1]
    return edit.one("Reshape", [_cast(edit, x, ct), edit.const(_ints(shape))])


def _expand_linear_attention(edit: _Edit) -> list[Node]:
    """LinearAttention (27): its recurrence unrolled over the static sequence length, step by
    step as onyx's kernel computes it (decay, delta correction, state update, readout)."""
    n = edit.node
    ins = list(n.inputs) + [None] * (6 - len(n.inputs))
    query, key, value, past, decay, beta = ins[:6]
    rule = n.attr("update_rule", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise _err(n, f"unknown update_rule {rule!r}")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    hq, hkv = n.attr("q_num_heads"), n.attr("kv_num_heads")
    qd, kd, vd = _dims(query), _dims(key), _dims(value)
    steps = qd[1] if qd and len(qd) == 3 else None
    if not (
        isinstance(steps, int)
        and qd
        and kd
        and vd
        and isinstance(qd[2], int)
        and isinstance(vd[2], int)
    ):
        raise _err(n, "unrolling its recurrence needs the static sequence length and sizes")
    if steps > MAX_UNROLLED_STEPS:
        raise _err(n, f"{steps} steps: unrolled only up to {MAX_UNROLLED_STEPS}")
    if (gated and decay is None) or (delta and beta is None):
        raise _err(n, f"update_rule {rule!r} needs its decay / beta input")
    dk, dv = qd[2] // hq, vd[2] // hkv
    ct = _compute_type(edit, query)
    before = len(edit.g)
    q = edit.one("Reshape", [_cast(edit, query, ct), edit.const(_ints([0, 0, hkv, hq // hkv, dk]))])
    k = edit.one("Reshape", [_cast(edit, key, ct), edit.const(_ints([0, 0, hkv, dk]))])
    v = edit.one("Reshape", [_cast(edit, value, ct), edit.const(_ints([0, 0, hkv, dv]))])
    g = _per_head(edit, decay, hkv, dk, ct) if gated else None
    g = edit.one("Exp", [g]) if gated else None
    rate = _per_head(edit, beta, hkv, 1, ct) if delta else None
    scale = n.attr("scale", 0.0) or 1 / np.sqrt(dk)
    scale = _typed_const(edit, float(scale), ct)
    state = _cast(edit, past, ct) if past is not None else None  # None: zeros
    outs = []
    for t in range(steps):
        at = edit.const(np.array(t, np.int64))
        k_t = edit.one("Gather", [k, at], {"axis": 1})  # [B, H, dk]
        v_t = edit.one("Gather", [v, at], {"axis": 1})  # [B, H, dv]
        if gated and state is not None:  # the state's rows decay by exp(g)
            g_t = edit.one("Gather", [g, at], {"axis": 1})
            state = edit.one("Mul", [edit.one("Unsqueeze", [g_t, edit.const(_ints([3]))]), state])
        if delta:  # v - S^T k: what the state predicts for k, corrected at rate beta
            if state is not None:
                k_row = edit.one("Unsqueeze", [k_t, edit.const(_ints([2]))])
                predicted = edit.one("MatMul", [k_row, state])
                predicted = edit.one("Squeeze", [predicted, edit.const(_ints([2]))])
                v_t = edit.one("Sub", [v_t, predicted])
            v_t = edit.one("Mul", [edit.one("Gather", [rate, at], {"axis": 1}), v_t])
        outer = edit.one(
            "Mul",
            [
                edit.one("Unsqueeze", [k_t, edit.const(_ints([3]))]),
                edit.one("Unsqueeze", [v_t, edit.const(_ints([2]))]),
            ],
        )
        state = outer if state is None else edit.one("Add", [state, outer])
        q_t = edit.one("Gather", [q, at], {"axis": 1})  # [B, H, G, dk]
        read = edit.one("Mul", [scale, edit.one("MatMul", [q_t, state])])
        outs.append(edit.one("Unsqueeze", [read, edit.const(_ints([1]))]))
    y = outs[0] if len(outs) == 1 else edit.one("Concat", outs, {"axis": 1})
    y = edit.one("Reshape", [y, edit.const(_ints([0, 0, hq * dv]))])
    state_type = past.dtype if past is not None and past.dtype else query.dtype
    return _finish(edit, before, [_cast(edit, y, query.dtype), _cast(edit, state, state_type)])


EXPANSIONS: dict[str, Callable[[_Edit], list[Node]]] = {
    "LayerNormalization": _expand_layernorm,
    "RMSNormalization": _expand_rmsnorm,
    "Gelu": _expand_gelu,
    "Attention": _expand_attention,
    "NegativeLogLikelihoodLoss": _expand_nll,
    "SoftmaxCrossEntropyLoss": _expand_sce,
    "ConstantOfShape": _expand_constant_of_shape,
    "Expand": _expand_expand,
    "GatherElements": _expand_gather_elements,
    "Trilu": _expand_trilu,
    "CausalConvWithState": _expand_causal_conv,
    "CenterCropPad": _expand_center_crop_pad,
    "LinearAttention": _expand_linear_attention,
    "DequantizeLinear": _expand_dequantize,
    "RotaryEmbedding": _expand_rotary,
    "CumProd": _expand_cumprod,
}
