"""``onyx.compare``: run a model on onyx and on another runtime (or a second model) with the
same inputs, report each output's error, and when they differ, the first diverging node.

The first diverging node is found by fetching every intermediate value on both sides and
walking the graph in topological order: the earliest node whose inputs agree and whose outputs
do not. Values are matched by name, so two files (original vs optimized, fp32 vs fp16, float vs
quantized) compare wherever they share value names.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .. import ir
from .runners import OnyxRunner, Runner, as_model, make_runner

Tolerance = float | dict[str, float]


@dataclass
class OutputComparison:
    """How one value compares: its errors and whether it is within tolerance."""

    name: str
    ok: bool
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatches: int = 0
    size: int = 0
    shape: list | None = None
    other_shape: list | None = None
    note: str = ""

    def line(self) -> str:
        verdict = "ok  " if self.ok else "FAIL"
        text = (
            f"{verdict} {self.name}: max abs {self.max_abs_error:.3g}, max rel "
            f"{self.max_rel_error:.3g}, {self.mismatches}/{self.size} mismatched"
        )
        return text + (f" ({self.note})" if self.note else "")


@dataclass
class NodeComparison:
    """One node's row of the per-node table. ``status``: ok, diverges (its inputs agree, its
    outputs do not), suspect (its outputs differ, its inputs are not visible on both sides),
    propagated (an input already differs), unobserved (no output is visible on both sides,
    e.g. fused away)."""

    name: str
    op_type: str
    status: str
    outputs: list[str] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)
    input_shapes: list = field(default_factory=list)
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatches: int = 0

    def describe(self) -> str:
        attrs = ", ".join(f"{k}={v}" for k, v in self.attributes.items())
        return (
            f"{self.name} ({self.op_type}) attributes [{attrs}] input shapes {self.input_shapes}: "
            f"max abs {self.max_abs_error:.3g}, max rel {self.max_rel_error:.3g}, "
            f"{self.mismatches} mismatched"
        )


@dataclass
class Report:
    """What :func:`compare` found. ``outputs``: per graph output; ``nodes``: the per-node
    table (filled when the outputs differ)."""

    ok: bool
    against: str
    rtol: Tolerance
    atol: Tolerance
    outputs: dict[str, OutputComparison]
    first_diverging_node: str | None = None
    first_diverging: NodeComparison | None = None
    nodes: list[NodeComparison] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1, default=str)

    def __str__(self) -> str:
        lines = [f"onyx vs {self.against}: {'ok' if self.ok else 'MISMATCH'}"]
        lines += ["  " + o.line() for o in self.outputs.values()]
        if self.first_diverging is not None:
            n = self.first_diverging
            lines.append(f"first diverging node: {n.name} ({n.op_type})")
            lines.append("  " + n.describe())
        elif not self.ok and self.nodes:
            lines.append("first diverging node: none found among the values both sides share")
        if self.note:
            lines.append(f"note: {self.note}")
        return "\n".join(lines)


# -- inputs ------------------------------------------------------------------------------------


def make_inputs(
    model: Any, shapes: dict[str, list[int]] | None = None, seed: int = 0
) -> dict[str, Any]:
    """Seeded random feeds for the model's inputs: their declared element types, symbolic
    dims set to 1 unless ``shapes`` gives the input's shape (onyx.tools.feeds' rules)."""
    from ..tools.feeds import random_feeds

    return random_feeds(as_model(model), shapes, seed)


# -- comparing values --------------------------------------------------------------------------


def _tol(tol: Tolerance, name: str, default: float) -> float:
    if isinstance(tol, dict):
        return float(tol.get(name, tol.get("*", default)))
    return float(tol)


def compare_values(name: str, got: Any, expected: Any, rtol: float, atol: float):
    """``got`` (onyx) against ``expected`` (the other side): |got - expected| <= atol + rtol *
    |expected| elementwise, NaN equal to NaN, infinities equal to themselves."""
    if isinstance(got, list | tuple) or isinstance(expected, list | tuple):
        return _compare_sequences(name, list(got or []), list(expected or []), rtol, atol)
    if isinstance(got, dict) and isinstance(expected, dict):
        # a map (ZipMap's class -> probability): the same keys, values within tolerance
        if set(got) != set(expected):
            return OutputComparison(name, False, note="map keys differ")
        keys = sorted(got, key=str)
        return compare_values(name, [got[k] for k in keys], [expected[k] for k in keys], rtol, atol)
    if got is None or expected is None or isinstance(got, dict):
        same = got is None and expected is None or got == expected
        return OutputComparison(name, bool(same), note="" if same else "values differ")
    a, b = np.asarray(got), np.asarray(expected)
    result = OutputComparison(
        name, True, size=int(a.size), shape=list(a.shape), other_shape=list(b.shape)
    )
    if a.shape != b.shape:
        result.ok, result.note = False, f"shape {list(a.shape)} vs {list(b.shape)}"
        result.mismatches = max(a.size, b.size)
        return result
    if a.dtype.kind in "OSU" or b.dtype.kind in "OSU":
        bad = a.astype(object) != b.astype(object)
        result.mismatches = int(np.count_nonzero(bad))
        result.ok = result.mismatches == 0
        return result
    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        err = np.where(same, 0.0, np.abs(x - y))
        err = np.where(np.isnan(err), np.inf, err)
        rel = np.where(same, 0.0, err / np.abs(y))  # inf where only the expected value is 0
        bad = ~same & ~(err <= atol + rtol * np.abs(y))
    if a.size:
        result.max_abs_error, result.max_rel_error = float(err.max()), float(rel.max())
    result.mismatches = int(np.count_nonzero(bad))
    result.ok = result.mismatches == 0
    return result


def _compare_sequences(name, got, expected, rtol, atol) -> OutputComparison:
    if len(got) != len(expected):
        return OutputComparison(name, False, note=f"{len(got)} vs {len(expected)} elements")
    parts = [compare_values(name, g, e, rtol, atol) for g, e in zip(got, expected)]
    return OutputComparison(
        name,
        all(p.ok for p in parts),
        max_abs_error=max((p.max_abs_error for p in parts), default=0.0),
        max_rel_error=max((p.max_rel_error for p in parts), default=0.0),
        mismatches=sum(p.mismatches for p in parts),
        size=sum(p.size for p in parts),
        note=f"sequence of {len(parts)}",
    )


# -- the entry point ---------------------------------------------------------------------------


def compare(
    model: Any,
    against: Any = "onnxruntime",
    inputs: dict[str, Any] | None = None,
    rtol: Tolerance = 1e-3,
    atol: Tolerance = 1e-4,
    *,
    shapes: dict[str, list[int]] | None = None,
    seed: int = 0,
    optimize: bool = True,
    locate: bool = True,
) -> Report:
    """Run ``model`` on onyx and on ``against`` ('onnxruntime', 'reference' for onnx's
    reference evaluator, 'onyx-unoptimized', or another model (path, bytes, ir.Model) run by
    onyx) on the same ``inputs`` (seeded random ones when None), and compare the outputs.

    ``rtol``/``atol`` are floats or {output name: tolerance} ("*" for the rest). When outputs
    differ and ``locate`` is set, every intermediate value is fetched on both sides and
    ``report.first_diverging_node`` names the earliest node whose inputs agree and whose
    outputs do not. ``optimize=False`` runs onyx's side without graph optimizations.
    """
    m = as_model(model)
    # float16 computes in float32 as in onnxruntime, but in float16 for a precision check
    subject = OnyxRunner(m, optimize=optimize, float16_in_float32=against == "onnxruntime")
    other = make_runner(against, m, optimize=optimize)
    feed = dict(inputs) if inputs is not None else make_inputs(m, shapes, seed)
    names = subject.output_names()
    mine = subject.run(feed, names)
    shared = [n for n in names if n in set(other.output_names()) | other.value_names()]
    theirs = other.run(feed, shared)
    outputs = {}
    for name in names:
        if name not in theirs:
            outputs[name] = OutputComparison(name, False, note=f"{other.label} has no such value")
            continue
        r, a = _tol(rtol, name, 1e-3), _tol(atol, name, 1e-4)
        outputs[name] = compare_values(name, mine[name], theirs[name], r, a)
    report = Report(all(o.ok for o in outputs.values()), other.label, rtol, atol, outputs)
    if not report.ok and locate:
        _locate(report, m, subject, other, feed)
        located = report.first_diverging is not None and report.first_diverging.status == "diverges"
        if optimize and not located:
            _locate_unoptimized(report, m, other, feed)
    return report


def _locate_unoptimized(report: Report, model: ir.Model, other: Runner, feed) -> None:
    """When optimized onyx hides where the difference starts (fused values), look again
    with every onyx value observable; if unoptimized onyx agrees, an optimization is why."""
    plain = OnyxRunner(model, optimize=False)
    names = [n for n in report.outputs if report.outputs[n].size or report.outputs[n].note]
    mine, theirs = plain.run(feed, names), other.run(feed, names)
    if all(compare_values(n, mine[n], theirs[n], *_tols(report, n)).ok for n in names):
        report.note = (
            f"onyx without graph optimizations agrees with {other.label}: an optimization "
            "(a fusion or its kernel) makes the difference; compare against onyx-unoptimized "
            "to locate it, and disabled_optimizers to find the pass"
        )
        return
    retry = Report(False, report.against, report.rtol, report.atol, report.outputs)
    _locate(retry, model, plain, other, feed)
    if retry.first_diverging is not None:
        report.nodes, report.first_diverging = retry.nodes, retry.first_diverging
        report.first_diverging_node = retry.first_diverging_node
        report.note = "located with onyx unoptimized (every value observable)"
        if retry.note:
            report.note += "; " + retry.note


def _locate(report: Report, model: ir.Model, subject: Runner, other: Runner, feed) -> None:
    """Fill the per-node table and the first diverging node: the earliest node whose outputs
    differ while its inputs agree ("diverges"), or, failing one, whose inputs are not visible
    on both sides ("suspect": the divergence is there or in the unobserved nodes before it)."""
    order = [n for n in model.graph if any(v.name for v in n.outputs)]
    produced = [v.name for n in order for v in n.outputs if v.name]
    common = subject.value_names() & other.value_names()
    names = [n for n in produced if n in common]
    mine, theirs = subject.run(feed, names), other.run(feed, names)
    good = {v.name for v in model.graph.inputs} | set(model.graph.initializers)
    bad: set[str] = set()  # values that differ, or come from ones that do
    for i, node in enumerate(order):
        row = _node_row(node, i, {**feed, **mine})
        inputs = [v.name for v in node.inputs if v is not None and v.name]
        observed = [v.name for v in node.outputs if v.name in mine and v.name in theirs]
        for name in observed:
            c = compare_values(name, mine[name], theirs[name], *_tols(report, name))
            row.max_abs_error = max(row.max_abs_error, c.max_abs_error)
            row.max_rel_error = max(row.max_rel_error, c.max_rel_error)
            row.mismatches += c.mismatches
            (good if c.ok else bad).add(name)
        row.status = _status(inputs, observed, good, bad)
        if row.status == "unobserved" and any(n in bad for n in inputs):
            bad.update(v.name for v in node.outputs if v.name)
        report.nodes.append(row)
    first = next((r for r in report.nodes if r.status == "diverges"), None)
    first = first or next((r for r in report.nodes if r.status == "suspect"), None)
    if first is not None:
        report.first_diverging, report.first_diverging_node = first, first.name
    if first is None:
        report.note = _why_not_located(report, model, mine, theirs, other.label)
    elif first.status == "suspect":
        report.note = (
            f"the inputs of {first.name} are not visible on both sides (fused away or named "
            "differently): the divergence is at it or at the unobserved nodes before it; "
            "optimize=False (--no-optimize) makes every onyx value observable"
        )


def _status(inputs: list[str], observed: list[str], good: set, bad: set) -> str:
    if not observed:
        return "unobserved"
    if not any(n in bad for n in observed):
        return "ok"
    if any(n in bad for n in inputs):
        return "propagated"
    return "diverges" if all(n in good for n in inputs) else "suspect"


def _why_not_located(report: Report, model: ir.Model, mine: dict, theirs: dict, label: str) -> str:
    outputs = [v.name for v in model.graph.outputs]
    if all(n in mine and n in theirs for n in outputs) and all(
        compare_values(n, mine[n], theirs[n], *_tols(report, n)).ok for n in outputs
    ):
        return (
            f"with every intermediate value fetched the outputs agree: {label} computes "
            "differently when its intermediates are graph outputs (it skips fusions, e.g. of "
            "QDQ node units), so the difference lies in what those fusions compute"
        )
    return (
        "the outputs differ in values the two sides do not share (fused away or named "
        "differently); optimize=False (--no-optimize) makes every onyx value observable"
    )


def _tols(report: Report, name: str) -> tuple[float, float]:
    return _tol(report.rtol, name, 1e-3), _tol(report.atol, name, 1e-4)


def _node_row(node: ir.Node, index: int, values: dict) -> NodeComparison:
    shapes = []
    for v in node.inputs:
        if v is None or not v.name:
            shapes.append(None)
        elif v.const_value is not None:
            shapes.append(list(v.const_value.shape))
        elif v.name in values and hasattr(values[v.name], "shape"):
            shapes.append(list(values[v.name].shape))
        else:
            shapes.append(list(v.shape.dims) if v.shape is not None else None)
    return NodeComparison(
        name=node.name or f"{node.op_type}#{index}",
        op_type=f"{node.domain}::{node.op_type}" if node.domain else node.op_type,
        status="ok",
        outputs=[v.name for v in node.outputs if v.name],
        attributes={name: _short(a.value) for name, a in node.attributes.items()},
        input_shapes=shapes,
    )


def _short(value: Any) -> Any:
    if isinstance(value, ir.Tensor):
        return f"tensor{list(value.shape)}"
    if isinstance(value, ir.Graph):
        return f"<graph {value.name!r}>"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list) and len(value) > 16:
        return f"[{len(value)} values]"
    if isinstance(value, list):
        return [_short(v) for v in value]
    return value
