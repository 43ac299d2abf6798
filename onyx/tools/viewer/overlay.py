"""What the model computed, for the viewer: value statistics, node times, errors.

The runs to compare against and the elementwise test are ``onyx.compare``'s (onyx/debug/);
this module turns them into what the page draws: an error per value scaled to one number, and
the first diverging node among the page's node ids.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np

from ...errors import OnyxError
from ...ir import Model
from ..feeds import load_npz, random_feeds
from .stats import _num, tensor_stats

#: Two values agree where |a - b| <= ATOL + RTOL * |b| (b: the reference), as numpy.allclose.
ATOL, RTOL = 1e-4, 1e-3


def default_inputs(model: Model, seed: int = 0, skip: set[str] = frozenset()) -> dict[str, Any]:
    """Random data for the graph inputs (as ``onyx run`` makes it); symbolic dims become 1."""
    return random_feeds(model, seed=seed, skip=skip)


def load_inputs(path: str) -> dict[str, Any]:
    """Feeds from an .npz file (one array per input name)."""
    return load_npz(path)


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
    run by onyx (values matched by name; names it lacks are left out). The runners are
    ``onyx.compare``'s (onyx/debug/runners.py), unoptimized so every value of the file exists."""
    from ...debug.runners import make_runner

    runner = make_runner(against, model, optimize=False)
    known = runner.value_names()  # computed values: the inputs are the same feeds on both sides
    wanted = [n for n in names if n in known]
    try:
        return runner.run(feeds, wanted)
    except OnyxError:
        raise
    except Exception as e:  # onnxruntime raises its own exception types
        raise OnyxError(f"{runner.label} could not run the model: {e}") from e


def compare_values(
    ours: dict[str, Any], reference: dict[str, Any], atol: float = ATOL, rtol: float = RTOL
) -> dict[str, dict[str, Any]]:
    """Per value: max |ours - reference|, the error relative to the reference's range, and how
    many elements fall outside the tolerance ("mismatch"; a shape or dtype clash counts all)."""
    return {
        name: value_error(ours[name], ref, atol, rtol)
        for name, ref in reference.items()
        if name in ours
    }


def value_error(a: Any, b: Any, atol: float = ATOL, rtol: float = RTOL) -> dict[str, Any]:
    """One value's error for the page: ``onyx.compare``'s elementwise test (NaN equal to NaN),
    with the error scaled by the reference's range (a colour per node needs one number)."""
    from ...debug.compare import compare_values as elementwise

    try:
        result = elementwise("", a, b, rtol, atol)
    except (TypeError, ValueError):
        return {"note": "not a tensor"}
    size = max(result.size, 1)
    if result.note.startswith("shape"):
        return {"mismatch": 1.0, "note": result.note}
    y = np.asarray(b)
    if y.dtype.kind not in "fiub" or np.asarray(a).dtype.kind not in "fiub":
        return {"mismatch": 0.0 if result.ok else 1.0, "note": "compared for equality"}
    scale = float(
        np.max(np.abs(np.nan_to_num(y.astype(np.float64), posinf=0, neginf=0)), initial=0)
    )
    max_abs = result.max_abs_error
    return {
        "max_abs": _num(max_abs),
        "rel": _num(max_abs / (scale or 1.0)),
        "mismatch": result.mismatches / size,
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
