"""Control flow: If, Loop, Scan, SequenceMap. Bodies run through ``ctx.run_graph``."""

from __future__ import annotations

import numpy as np

from ...ir.dtypes import to_numpy
from ...ir.types import SequenceType, TensorType
from ..registry import op
from .derived import from_attributes


def _truth(cond) -> bool:
    """A condition tensor holds exactly one element."""
    if isinstance(cond, np.ndarray) and cond.size == 1:
        return bool(cond.item())  # the fast path: it runs once per Loop iteration
    return bool(np.asarray(cond).reshape(-1)[0])


def _stack(elements: list, n_iters: int, declared=None):
    """Scan outputs of every iteration, stacked along a new axis 0.

    Sequence-valued elements (Loop 13+) are concatenated into one sequence. With no iteration
    the body's declared output type gives the element type and shape (as onnxruntime does);
    unknown dims count as 0, and with no declaration an empty float32 (0,) tensor stands in.
    """
    if not elements:
        return _empty_scan_output(declared)
    if isinstance(elements[0], list):
        return [t for seq in elements for t in seq]
    return np.stack([np.asarray(e) for e in elements])


def _empty_scan_output(declared):
    if isinstance(declared, SequenceType):
        return []
    if not isinstance(declared, TensorType):
        return np.empty((0,), dtype=np.float32)
    dims = declared.shape.dims if declared.shape is not None else ()
    shape = (0, *(d if isinstance(d, int) else 0 for d in dims))
    return np.empty(shape, dtype=to_numpy(declared.elem_type))


# --- If ------------------------------------------------------------------------------------------


@op("If", since=1)
def if_(ctx, cond, *, then_branch, else_branch):
    return tuple(ctx.run_graph(then_branch if _truth(cond) else else_branch, []))


# --- Loop ----------------------------------------------------------------------------------------


@op("Loop", since=1)
def loop(ctx, M, cond, *v_initial, body):
    n_carried = len(v_initial)
    n_scan = ctx.graph_output_count(body) - 1 - n_carried
    trip_count = None if M is None else int(np.asarray(M).reshape(-1)[0])
    keep_going = True if cond is None else _truth(cond)
    carried = list(v_initial)
    scans: list[list] = [[] for _ in range(n_scan)]
    # an iteration runs only while the condition holds, so its cond input is always true
    true = np.array(True)
    true.flags.writeable = False
    run, i = ctx.run_graph, 0
    while keep_going and (trip_count is None or i < trip_count):
        outs = run(body, [np.array(i, dtype=np.int64), true, *carried])
        keep_going = _truth(outs[0])
        carried = outs[1 : 1 + n_carried]
        if n_scan:
            for acc, value in zip(scans, outs[1 + n_carried :]):
                acc.append(value)
        i += 1
    if i == 0 and scans:
        declared = ctx.graph_output_types(body)[1 + n_carried :]
        return (*carried, *(_stack(acc, 0, t) for acc, t in zip(scans, declared)))
    return (*carried, *(_stack(acc, i) for acc in scans))


# --- Scan ----------------------------------------------------------------------------------------


def _scan_loop(ctx, body, states, scan_inputs, input_axes, input_dirs, n_scan_out):
    """The core Scan recurrence; returns final states and per-iteration output elements."""
    n_steps = scan_inputs[0].shape[input_axes[0]] if scan_inputs else 0
    outs_per_step: list[list] = [[] for _ in range(n_scan_out)]
    states = list(states)
    n_states = len(states)
    # each scan input as a view in iteration order along axis 0: a step's element is a view
    seqs = [np.moveaxis(x, ax, 0) for x, ax in zip(scan_inputs, input_axes)]
    seqs = [x[::-1] if d else x for x, d in zip(seqs, input_dirs)]
    run = ctx.run_graph
    for t in range(n_steps):
        outs = run(body, [*states, *(x[t, ...] for x in seqs)])  # 0-d arrays, not scalars
        states = outs[:n_states]
        for acc, value in zip(outs_per_step, outs[n_states:]):
            acc.append(value)
    return states, outs_per_step


def _collect(elements: list, axis: int, reverse: bool) -> np.ndarray:
    if reverse:
        elements = elements[::-1]
    stacked = _stack(elements, len(elements))
    return np.moveaxis(stacked, 0, axis) if axis else stacked


def _axes(values, count: int, ranks: list[int]) -> list[int]:
    values = list(values) if values is not None else [0] * count
    return [a + r if a < 0 else a for a, r in zip(values, ranks)]


@op("Scan", since=9)
def scan(
    ctx,
    *initial_state_and_scan_inputs,
    body,
    num_scan_inputs,
    scan_input_axes=None,
    scan_input_directions=None,
    scan_output_axes=None,
    scan_output_directions=None,
):
    n_states = len(initial_state_and_scan_inputs) - num_scan_inputs
    states = initial_state_and_scan_inputs[:n_states]
    scan_inputs = [np.asarray(x) for x in initial_state_and_scan_inputs[n_states:]]
    defaults = not (
        scan_input_axes or scan_input_directions or scan_output_axes or scan_output_directions
    )
    if defaults and n_states == 1 and num_scan_inputs == 1:
        distances = distance_scan(body, states[0], scan_inputs[0])
        if distances is not None:
            return states[0], distances
    n_scan_out = ctx.graph_output_count(body) - n_states
    in_axes = _axes(scan_input_axes, num_scan_inputs, [x.ndim for x in scan_inputs])
    in_dirs = scan_input_directions or [0] * num_scan_inputs
    states, outs_per_step = _scan_loop(ctx, body, states, scan_inputs, in_axes, in_dirs, n_scan_out)
    # an output axis counts in the rank of the scan output (element rank + 1)
    out_ranks = [(e[0].ndim + 1) if e else 1 for e in outs_per_step]
    out_axes = _axes(scan_output_axes, n_scan_out, out_ranks)
    out_dirs = scan_output_directions or [0] * n_scan_out
    scan_outs = [_collect(e, a, d) for e, a, d in zip(outs_per_step, out_axes, out_dirs)]
    return (*states, *scan_outs)


def distance_body(graph) -> bool | None:
    """Whether a Scan body is skl2onnx's pairwise-distance step (its cdist: kNN, Gaussian
    processes, kernel PCA): state X passed through, scan output ReduceSumSquare(X - row,
    axes=[1], keepdims=0); True when the Sub is X - row, False when row - X, None otherwise."""
    if graph is None or len(graph.inputs) != 2 or len(graph.outputs) != 2:
        return None
    made = {out.name: node for node in graph for out in node.outputs}

    def source(name: str) -> tuple[str, object]:  # through Identity nodes
        node = made.get(name)
        while node is not None and node.op_type == "Identity" and not node.domain:
            name = node.inputs[0].name
            node = made.get(name)
        return name, node

    state, row = (v.name for v in graph.inputs)
    if source(graph.outputs[0].name)[0] != state:
        return None
    _, reduce = source(graph.outputs[1].name)
    if reduce is None or reduce.op_type != "ReduceSumSquare" or reduce.domain:
        return None
    if len(reduce.inputs) != 1 or list(reduce.attr("axes") or []) not in ([1], [-1]):
        return None
    if reduce.attr("keepdims", 1) != 0:
        return None
    _, sub = source(reduce.inputs[0].name)
    if sub is None or sub.op_type != "Sub" or sub.domain:
        return None
    operands = [source(v.name)[0] for v in sub.inputs]
    if sorted(operands) != sorted([state, row]):
        return None
    return operands[0] == state


#: elements of the [rows, N, features] differences one block of the distance step holds
_DISTANCE_BLOCK = 1 << 16
#: elements of the [features, rows, N] squares one block of the feature-major distance step
#: holds (a buffer that stays in a core's cache)
_FEATURE_MAJOR_BLOCK = 1 << 17
#: numpy sums a contiguous run of up to this many elements in one pairwise block: eight
#: running sums, combined as ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), then the rest
#: one by one (longer runs split in two halves; float16 sums in float32)
_PAIRWISE_BLOCK = 128


def distance_scan(body, x, rows) -> np.ndarray | None:
    """The scan outputs of a pairwise-distance body (see distance_body) for all rows at once:
    out[r, n] = sum_j (x[n, j] - rows[r, j])**2, with the bits of one iteration's numpy
    operations (a subtraction and a sum over the contiguous last axis); None when the body or
    the values are something else."""
    graph = getattr(body, "graph", None)
    x_first = from_attributes((graph,), lambda: distance_body(graph))
    if x_first is None or not isinstance(x, np.ndarray) or x.ndim != 2 or rows.ndim != 2:
        return None
    if x.dtype != rows.dtype or x.dtype.kind != "f" or x.shape[1] != rows.shape[1]:
        return None
    if x.dtype in (np.float32, np.float64) and 0 < x.shape[1] <= _PAIRWISE_BLOCK:
        return distances_feature_major(x, rows, x_first)
    out = np.empty((rows.shape[0], x.shape[0]), x.dtype)
    step = max(1, _DISTANCE_BLOCK // max(1, x.size))
    for start in range(0, rows.shape[0], step):
        block = rows[start : start + step, None, :]
        d = x[None] - block if x_first else block - x[None]
        out[start : start + step] = np.sum(d * d, axis=2, dtype=x.dtype)
    return out


def distances_feature_major(x: np.ndarray, rows: np.ndarray, x_first: bool) -> np.ndarray:
    """distance_scan's result from [features, rows, N] squares: each feature's squares one
    contiguous slab, summed over the features slab by slab in numpy's pairwise order
    (_PAIRWISE_BLOCK), so the same bits as np.sum over each [N, features] difference's rows,
    without numpy reducing thousands of 20-element rows one by one (3x faster on kNN's
    [100, 20] x [1000, 20])."""
    features, n = x.shape[1], x.shape[0]
    xt = np.ascontiguousarray(x.T)[:, None, :]  # [features, 1, N]
    rt = np.ascontiguousarray(rows.T)  # [features, rows]
    out = np.empty((rows.shape[0], n), x.dtype)
    step = max(1, _FEATURE_MAJOR_BLOCK // max(1, n * features))
    buffer = np.empty((features, min(step, rows.shape[0]), n), x.dtype)
    for start in range(0, rows.shape[0], step):
        stop = min(start + step, rows.shape[0])
        d = buffer[:, : stop - start]
        if x_first:
            np.subtract(xt, rt[:, start:stop, None], out=d)
        else:
            np.subtract(rt[:, start:stop, None], xt, out=d)
        np.multiply(d, d, out=d)
        _pairwise_sum_slabs(d, out[start:stop])
    return out


def _pairwise_sum_slabs(slabs: np.ndarray, out: np.ndarray) -> None:
    """out = the sum of slabs[0], slabs[1], ... in numpy's pairwise order for a run of up to
    _PAIRWISE_BLOCK elements (slabs is overwritten)."""
    count = slabs.shape[0]
    if count < 8:
        out[...] = slabs[0]
        for i in range(1, count):
            out += slabs[i]
        return
    sums, whole = slabs[:8], count - count % 8
    for i in range(8, whole, 8):
        sums += slabs[i : i + 8]
    for a, b in ((0, 1), (2, 3), (0, 2), (4, 5), (6, 7), (4, 6)):  # (numpy's tree of the 8)
        np.add(sums[a], sums[b], out=sums[a])
    np.add(sums[0], sums[4], out=out)
    for i in range(whole, count):
        out += slabs[i]


@op("Scan", since=8)
def scan_8(
    ctx, sequence_lens, *initial_state_and_scan_inputs, body, num_scan_inputs, directions=None
):
    """Scan-8: axis 0 is the batch, axis 1 the sequence; shorter sequences are zero-padded."""
    n_states = len(initial_state_and_scan_inputs) - num_scan_inputs
    states = [np.asarray(s) for s in initial_state_and_scan_inputs[:n_states]]
    scan_inputs = [np.asarray(x) for x in initial_state_and_scan_inputs[n_states:]]
    n_scan_out = ctx.graph_output_count(body) - n_states
    dirs = directions or [0] * num_scan_inputs
    batch, max_len = scan_inputs[0].shape[:2]
    lens = [max_len] * batch if sequence_lens is None else [int(n) for n in sequence_lens]
    final_states: list[list] = [[] for _ in range(n_states)]
    scan_outs: list[list] = [[] for _ in range(n_scan_out)]
    for b in range(batch):
        # a reversed scan of a short sequence starts at its last valid element
        seqs = [x[b, : lens[b]] for x in scan_inputs]
        st, per_step = _scan_loop(
            ctx, body, [s[b] for s in states], seqs, [0] * num_scan_inputs, dirs, n_scan_out
        )
        for acc, s in zip(final_states, st):
            acc.append(np.asarray(s))
        for acc, elements in zip(scan_outs, per_step):
            out = _stack(elements, lens[b])
            pad = max_len - lens[b]
            if pad and elements:
                out = np.concatenate([out, np.zeros((pad, *out.shape[1:]), out.dtype)])
            acc.append(out)
    return (*(np.stack(s) for s in final_states), *(np.stack(s) for s in scan_outs))


# --- SequenceMap ---------------------------------------------------------------------------------


@op("SequenceMap", since=17)
def sequence_map(ctx, input_sequence, *additional_inputs, body):
    n_out = ctx.graph_output_count(body)
    results: list[list] = [[] for _ in range(n_out)]
    for i in range(len(input_sequence)):
        # sequences are sampled at position i; tensors are passed whole
        args = [input_sequence[i]] + [a[i] if isinstance(a, list) else a for a in additional_inputs]
        for acc, value in zip(results, ctx.run_graph(body, args)):
            acc.append(value)
    return tuple(results)
