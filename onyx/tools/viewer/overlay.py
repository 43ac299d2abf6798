"""What the model computed, for the viewer: value statistics, node times, errors.

A small comparison engine lives here (per-value error of two runs, first diverging node) until
``onyx.compare`` exists; it has one entry point, ``compare_values``, so it can be swapped for
that one without touching the page.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np

from ...errors import InvalidArgument, OnyxError
from ...ir import Model
from .stats import _num, tensor_stats

#: Two values agree where |a - b| <= ATOL + RTOL * |b| (b: the reference), as numpy.allclose.
ATOL, RTOL = 1e-4, 1e-3


def default_inputs(model: Model, seed: int = 0, skip: set[str] = frozenset()) -> dict[str, Any]:
    """Random data for the graph inputs (as ``onyx run`` makes it); symbolic dims become 1."""
    from ...runtime.session import NodeArg, _shape_list, type_string
    from ..cmd_run import random_input

    rng = np.random.default_rng(seed)
    g = model.graph
    inits = set(g.initializers)
    feeds = {}
    for v in g.inputs:
        if v.name not in inits and v.name not in skip:
            arg = NodeArg(v.name, type_string(v.type) or "", _shape_list(v.type))
            feeds[v.name] = random_input(arg, rng)
    return feeds


def load_inputs(path: str) -> dict[str, Any]:
    """Feeds from an .npz file (one array per input name)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as e:
        raise InvalidArgument(f"cannot read inputs from {path!r}: {e}") from e


def main_values(model: Model) -> list[str]:
    """Names of the main graph's computed values (node outputs), in execution order."""
    return [v.name for n in model.graph for v in n.outputs if v.name]


def _session(model: Model, profile_dir: str | None = None):
    from ...runtime.session import GraphOptimizationLevel, InferenceSession, SessionOptions

    opts = SessionOptions()
    # unoptimized: every value of the file exists, and each timed node is a node of the file
    opts.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    if profile_dir:
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(profile_dir, "onyx_view")
    return InferenceSession(model, sess_options=opts)


def run_values(model: Model, feeds: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Every named value of one onyx run: {name: array}."""
    sess = _session(model)
    return dict(zip(names, sess.run(names, feeds)))


def run_overlay(
    model: Model, feeds: dict[str, Any], node_ids: dict[int, str], repeat: int = 2
) -> tuple[dict[str, dict], dict[str, float], dict[str, Any]]:
    """(statistics of each value, microseconds of each node id, the values themselves)."""
    names = list(dict.fromkeys([v.name for v in model.graph.inputs] + main_values(model)))
    renamed = _name_unnamed_nodes(model, node_ids)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sess = _session(model, tmp)
            fetch = [n for n in names if n not in feeds]
            values = dict(zip(fetch, sess.run(fetch, feeds)))
            for _ in range(max(0, repeat - 1)):  # later runs time the model, not the fetching
                sess.run(None, feeds)
            times = _node_times(sess.end_profiling())
    finally:
        for node, old in renamed:
            node.name = old
    values.update({k: v for k, v in feeds.items() if k in names})
    stats = {name: tensor_stats(v) for name, v in values.items()}
    return stats, times, values


def _name_unnamed_nodes(model: Model, node_ids: dict[int, str]) -> list:
    """Give unnamed nodes their page ids so that the profile's events name them."""
    renamed = []
    for node in model.graph:
        if not node.name:
            renamed.append((node, node.name))
            node.name = node_ids.get(id(node), "")
    return renamed


def _node_times(trace_path: str) -> dict[str, float]:
    """The fastest run's microseconds of each node of a Chrome trace."""
    times: dict[str, float] = {}
    if not trace_path:
        return times
    with open(trace_path) as f:
        events = json.load(f)
    for e in events:
        if e.get("cat") == "Node":
            name, dur = e["name"], float(e.get("dur", 0))
            times[name] = min(times.get(name, dur), dur)
    return times


def reference_values(
    model: Model, against: str, feeds: dict[str, Any], names: list[str]
) -> dict[str, Any]:
    """The values of ``names`` that the reference computes: onnxruntime, or another model file
    run by onyx (values matched by name; names it lacks are left out)."""
    if against == "onnxruntime":
        return _onnxruntime_values(model, feeds, names)
    from ...serde import load

    other = load(against)
    known = set(main_values(other)) | {v.name for v in other.graph.inputs}
    common = [n for n in names if n in known]
    other_feeds = {v.name: feeds[v.name] for v in other.graph.inputs if v.name in feeds}
    return run_values(other, other_feeds, common)


def _onnxruntime_values(model: Model, feeds: dict[str, Any], names: list[str]) -> dict[str, Any]:
    try:
        import onnxruntime
    except ImportError as e:
        raise OnyxError(
            "--compare onnxruntime needs the onnxruntime package (pip install onnxruntime)"
        ) from e
    from ...serde import dumps

    exposed = _with_all_outputs(model, names)
    opts = onnxruntime.SessionOptions()
    opts.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = onnxruntime.InferenceSession(
            dumps(exposed), opts, providers=["CPUExecutionProvider"]
        )
        available = {o.name for o in sess.get_outputs()}
        wanted = [n for n in names if n in available]
        return dict(zip(wanted, sess.run(wanted, feeds)))
    except Exception as e:  # onnxruntime raises its own exception types
        raise OnyxError(f"onnxruntime could not run the model: {e}") from e


def _with_all_outputs(model: Model, names: list[str]) -> Model:
    """A copy of ``model`` whose graph outputs include every typed value in ``names``
    (onnxruntime can only return graph outputs)."""
    from ...serde import dumps, loads

    copy = loads(dumps(model))
    g = copy.graph
    have = {v.name for v in g.outputs}
    by_name = {v.name: v for n in g for v in n.outputs}
    for name in names:
        v = by_name.get(name)
        if v is not None and name not in have and v.type is not None:
            g.outputs.append(v)
            have.add(name)
    return copy


def compare_values(
    ours: dict[str, Any], reference: dict[str, Any], atol: float = ATOL, rtol: float = RTOL
) -> dict[str, dict[str, Any]]:
    """Per value: max |ours - reference|, the error relative to the reference's range, and how
    many elements fall outside the tolerance ("mismatch"; a shape or dtype clash counts all)."""
    errors: dict[str, dict[str, Any]] = {}
    for name, ref in reference.items():
        if name not in ours:
            continue
        errors[name] = value_error(ours[name], ref, atol, rtol)
    return errors


def value_error(a: Any, b: Any, atol: float = ATOL, rtol: float = RTOL) -> dict[str, Any]:
    try:
        x, y = np.asarray(a), np.asarray(b)
    except (TypeError, ValueError):
        return {"note": "not a tensor"}
    if x.shape != y.shape:
        return {"mismatch": 1.0, "note": f"shape {list(x.shape)} vs {list(y.shape)}"}
    if x.size == 0:
        return {"max_abs": 0.0, "rel": 0.0, "mismatch": 0.0}
    if x.dtype.kind not in "fiub" or y.dtype.kind not in "fiub":
        same = bool(np.array_equal(x, y))
        return {"mismatch": 0.0 if same else 1.0, "note": "compared for equality"}
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    both_nan = np.isnan(xf) & np.isnan(yf)
    diff = np.where(both_nan, 0.0, np.abs(xf - yf))
    diff = np.where(np.isnan(diff), np.inf, diff)
    bad = diff > atol + rtol * np.abs(np.nan_to_num(yf))
    scale = float(np.max(np.abs(np.nan_to_num(yf, posinf=0, neginf=0)))) or 1.0
    max_abs = float(diff.max())
    return {
        "max_abs": _num(max_abs),
        "rel": _num(max_abs / scale),
        "mismatch": float(np.count_nonzero(bad)) / x.size,
    }


def node_errors(doc_nodes: list[dict], errors: dict[str, dict]) -> tuple[dict[str, float], str]:
    """Each node's worst relative output error, and the first node (in execution order) with an
    output outside the tolerance whose inputs all agree: where the runs diverge."""
    worst: dict[str, float] = {}
    first = fallback = ""
    for node in doc_nodes:
        outs = [errors[o] for o in node["outputs"] if o in errors]
        if not outs:
            continue
        worst[node["id"]] = max(_rel(e) for e in outs)
        diverged = any(e.get("mismatch", 0) > 0 for e in outs)
        if diverged and not fallback:
            fallback = node["id"]
        if diverged and not first:
            inputs_ok = all(
                errors[i].get("mismatch", 0) == 0 for i in node["inputs"] if i in errors
            )
            if inputs_ok:
                first = node["id"]
    return worst, first or fallback


def _rel(e: dict) -> float:
    rel = e.get("rel")
    if rel is None:
        return 1.0 if e.get("mismatch", 0) else 0.0
    return float("inf") if isinstance(rel, str) else float(rel)
