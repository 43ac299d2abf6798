"""``onyx.reduce``: shrink a failing model to a small subgraph that still fails (delta
debugging, as polygraphy's ``debug reduce``).

A candidate is a set of the main graph's nodes. Its inputs are the values its nodes read that
no kept node produces (fed from one run of the full model, so every candidate sees the data the
full model computes there); its outputs are the values its nodes produce that no kept node
reads, and the original outputs among them. The search:

1. bisect over the topological order for the shortest failing prefix (its end: the node where
   the failure first shows);
2. bisect for the latest start that still fails with that end;
3. try dropping each remaining node (side branches), keeping each drop that still fails.

Every accepted candidate was checked to fail, so the result fails even where the failure is
not monotone in the order; only its size depends on that.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import ir
from ..errors import InvalidArgument, OnyxError
from ..ir.graph import _inputs_with_captures
from .compare import Tolerance, compare, make_inputs
from .runners import RUNTIMES, OnyxRunner, as_model

Predicate = Callable[[ir.Model, dict], bool]


@dataclass
class ReduceResult:
    """The reduced model, its feeds, and how the search went."""

    model: ir.Model
    inputs: dict[str, Any]
    nodes: list[str]
    original_nodes: int
    checks: int = 0
    log: list[str] = field(default_factory=list)

    def save(self, path: str = "reduced.onnx", inputs_path: str | None = None) -> tuple[str, str]:
        """Write the model and its feeds (``<path stem>_inputs.npz`` by default)."""
        from .. import serde

        inputs_path = inputs_path or os.path.splitext(path)[0] + "_inputs.npz"
        serde.save(self.model, path)
        np.savez(inputs_path, **{k: v for k, v in self.inputs.items() if _is_array(v)})
        return path, inputs_path


def _is_array(v: Any) -> bool:
    return isinstance(v, np.ndarray) and v.dtype.kind != "O"


# -- predicates --------------------------------------------------------------------------------


def make_predicate(fails_when: str | Predicate, rtol: Tolerance, atol: Tolerance) -> Predicate:
    """``fails_when``: a callable ``(model, feeds) -> bool``; ``"compare against RUNTIME"``
    (outputs differ from RUNTIME: onnxruntime, reference, onyx-unoptimized); or a shell
    command run on the candidate, failing when it exits nonzero (``{model}`` and ``{inputs}``
    are replaced by the candidate's paths; without ``{model}`` the model path is appended)."""
    if callable(fails_when):
        return fails_when
    words = fails_when.split()
    if words[:1] == ["compare"]:
        against = words[2] if len(words) >= 3 and words[1] == "against" else "onnxruntime"
        if against not in RUNTIMES:
            raise InvalidArgument(
                f"reduce compares each candidate against a runtime ({', '.join(RUNTIMES)}), "
                f"not {against!r}: a subgraph of one file has no counterpart in another"
            )

        def outputs_differ(model: ir.Model, feeds: dict) -> bool:
            report = compare(model, against, inputs=feeds, rtol=rtol, atol=atol, locate=False)
            return not report.ok

        return outputs_differ
    return _command_predicate(fails_when)


def _command_predicate(command: str) -> Predicate:
    def command_fails(model: ir.Model, feeds: dict) -> bool:
        from .. import serde

        with tempfile.TemporaryDirectory(prefix="onyx_reduce_") as tmp:
            path, inputs = os.path.join(tmp, "candidate.onnx"), os.path.join(tmp, "inputs.npz")
            serde.save(model, path)
            np.savez(inputs, **{k: v for k, v in feeds.items() if _is_array(v)})
            if "{model}" in command:
                cmd = command.replace("{model}", shlex.quote(path))
            else:
                cmd = f"{command} {shlex.quote(path)}"
            cmd = cmd.replace("{inputs}", shlex.quote(inputs))
            done = subprocess.run(cmd, shell=True, capture_output=True)
            return done.returncode != 0

    return command_fails


# -- candidates --------------------------------------------------------------------------------


class _Search:
    def __init__(self, model: ir.Model, feeds: dict, fails: Predicate):
        self.model = model
        self.nodes = list(model.graph)
        self.values = _all_values(model, feeds)
        self.fails_raw = fails
        self.checks = 0
        self.crash: type | None = None  # the full model's failure, when it is an exception
        self.log: list[str] = []

    def fails(self, keep: list[int]) -> bool:
        self.checks += 1
        model, feeds = self.build(keep)
        try:
            result = bool(self.fails_raw(model, feeds))
        except Exception as e:  # noqa: BLE001  (a crash is a failure only if the full model crashed so)
            result = self.crash is not None and isinstance(e, self.crash)
        self.log.append(
            f"{len(keep)} nodes [{keep[0] if keep else '-'}..]: {'fails' if result else 'passes'}"
        )
        return result

    def build(self, keep: list[int]) -> tuple[ir.Model, dict]:
        """The model of the kept nodes (a clone of the full one) and its feeds."""
        from ..optimizer.core import clone_model

        m = clone_model(self.model)
        nodes = list(m.graph)
        kept = [nodes[i] for i in keep]
        kept_ids = {id(n) for n in kept}
        for n in nodes:
            if id(n) not in kept_ids:
                m.graph.remove(n, safe=False)
        inputs, outputs = self._boundary(m.graph, kept)
        m.graph.inputs, m.graph.outputs = inputs, outputs
        used = {v.name for n in kept for v in _inputs_with_captures(n)}
        m.graph.initializers = {k: v for k, v in m.graph.initializers.items() if k in used}
        m.graph.value_info = []
        return m, {v.name: self.values[v.name] for v in inputs if v.name in self.values}

    def _boundary(self, graph: ir.Graph, kept: list[ir.Node]) -> tuple[list, list]:
        """The kept nodes' inputs (read, not produced by them, no initializer) and outputs
        (produced, not read by them, or an output of the full model), typed from the full run."""
        produced = {id(v) for n in kept for v in n.outputs}
        read: dict[int, ir.Value] = {}
        for n in kept:
            for v in _inputs_with_captures(n):
                read.setdefault(id(v), v)
        inputs = [
            v for v in read.values() if id(v) not in produced and v.name not in graph.initializers
        ]
        for v in inputs:
            if v.producer is not None:  # its producer was dropped: the value is fed now
                v.producer, v.index = None, None
                v.type = _type_of(self.values.get(v.name), v.type)
        original_outputs = {v.name for v in self.model.graph.outputs}
        outputs = [
            v
            for n in kept
            for v in n.outputs
            if v.name and (id(v) not in read or v.name in original_outputs)
        ]
        for v in outputs:
            v.type = _type_of(self.values.get(v.name), v.type)
        return inputs, outputs


def _type_of(value: Any, declared: ir.Type | None) -> ir.Type | None:
    """A concrete type from the value the full run computed (what the candidate is fed)."""
    if isinstance(value, np.ndarray):
        try:
            return ir.TensorType(ir.from_numpy(value.dtype), ir.Shape(value.shape))
        except ValueError:
            pass
    return declared


def _all_values(model: ir.Model, feeds: dict) -> dict[str, Any]:
    """Every named value of one run of the full model (onyx, without graph optimizations,
    so every value exists; onnxruntime when onyx cannot run it)."""
    names = [v.name for n in model.graph for v in n.outputs if v.name]
    try:
        values = OnyxRunner(model, optimize=False).run(feeds, names)
    except OnyxError:
        from .runners import OnnxruntimeRunner

        values = OnnxruntimeRunner(model).run(feeds, names)
    return {**feeds, **values}


# -- the search --------------------------------------------------------------------------------


def reduce(
    model: Any,
    fails_when: str | Predicate = "compare against onnxruntime",
    inputs: dict[str, Any] | None = None,
    *,
    rtol: Tolerance = 1e-3,
    atol: Tolerance = 1e-4,
    shapes: dict[str, list[int]] | None = None,
    seed: int = 0,
) -> ReduceResult:
    """The smallest subgraph of ``model`` found that still fails ``fails_when`` (see
    :func:`make_predicate`), with its feeds; ``inputs`` feed the full model (seeded random
    ones when None)."""
    m = as_model(model)
    feeds = dict(inputs) if inputs is not None else make_inputs(m, shapes, seed)
    search = _Search(m, feeds, make_predicate(fails_when, rtol, atol))
    n = len(search.nodes)
    everything = list(range(n))
    try:
        full_fails = bool(search.fails_raw(*search.build(everything)))
    except Exception as e:  # noqa: BLE001
        search.crash, full_fails = type(e), True
    if not full_fails:
        raise InvalidArgument("the model does not fail the predicate: nothing to reduce")
    end = _shortest_prefix(search, n)
    start = _latest_start(search, end)
    keep = _drop_branches(search, list(range(start, end + 1)))
    reduced, reduced_feeds = search.build(keep)
    return ReduceResult(
        model=reduced,
        inputs=reduced_feeds,
        nodes=[search.nodes[i].name or search.nodes[i].op_type for i in keep],
        original_nodes=n,
        checks=search.checks + 1,
        log=search.log,
    )


def _shortest_prefix(search: _Search, n: int) -> int:
    lo, hi = 0, n - 1  # the whole model (prefix ending at n - 1) fails
    while lo < hi:
        mid = (lo + hi) // 2
        if search.fails(list(range(mid + 1))):
            hi = mid
        else:
            lo = mid + 1
    return hi


def _latest_start(search: _Search, end: int) -> int:
    lo, hi = 0, end  # starting at 0 fails
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if search.fails(list(range(mid, end + 1))):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _drop_branches(search: _Search, keep: list[int]) -> list[int]:
    for i in list(keep):
        if len(keep) == 1:
            break
        trial = [k for k in keep if k != i]
        if search.fails(trial):
            keep = trial
    return keep
