"""How good a quantized model is: per-output error against the float model on held-out
inputs, sizes, latencies; and which nodes' quantization costs the most accuracy."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import ir


@dataclass
class OutputError:
    name: str
    max_abs: float
    mean_abs: float
    cosine: float
    #: Share of samples whose argmax over the last axis agrees (classifier-like outputs).
    top1: float | None

    def row(self) -> str:
        top1 = "-" if self.top1 is None else f"{100 * self.top1:.1f}%"
        return f"{self.name:<24} {self.max_abs:>10.4g} {self.mean_abs:>10.4g} {self.cosine:>9.6f} {top1:>7}"


@dataclass
class Report:
    outputs: list[OutputError]
    size_before: int
    size_after: int
    #: runtime -> (float ms, quantized ms), medians.
    latency: dict[str, tuple[float, float]] = field(default_factory=dict)
    samples: int = 0

    @property
    def worst_mean_abs(self) -> float:
        return max((o.mean_abs for o in self.outputs), default=0.0)

    def __str__(self) -> str:
        lines = [
            f"accuracy on {self.samples} held-out sample(s), quantized vs float:",
            f"{'output':<24} {'max abs':>10} {'mean abs':>10} {'cosine':>9} {'top-1':>7}",
        ]
        lines += [o.row() for o in self.outputs]
        ratio = self.size_before / max(self.size_after, 1)
        lines.append(
            f"size: {self.size_before / 1e3:.1f} kB -> {self.size_after / 1e3:.1f} kB "
            f"({ratio:.2f}x smaller)"
        )
        for runtime, (before, after) in self.latency.items():
            lines.append(
                f"latency ({runtime}, median): {before:.3f} ms -> {after:.3f} ms "
                f"({before / max(after, 1e-9):.2f}x)"
            )
        return "\n".join(lines)


def output_errors(expected: list[dict], got: list[dict]) -> list[OutputError]:
    names = list(expected[0]) if expected else []
    rows = []
    for name in names:
        e = [np.asarray(x[name], np.float64) for x in expected]
        g = [np.asarray(x[name], np.float64) for x in got]
        diff = np.concatenate([np.abs(a - b).ravel() for a, b in zip(e, g)])
        ef, gf = np.concatenate([a.ravel() for a in e]), np.concatenate([b.ravel() for b in g])
        denom = np.linalg.norm(ef) * np.linalg.norm(gf)
        cosine = float(ef @ gf / denom) if denom > 0 else float(np.array_equal(ef, gf))
        rows.append(
            OutputError(
                name,
                float(diff.max(initial=0.0)),
                float(diff.mean()) if diff.size else 0.0,
                cosine,
                _top1(e, g),
            )
        )
    return rows


def _top1(expected: list[np.ndarray], got: list[np.ndarray]) -> float | None:
    if not expected or expected[0].ndim != 2 or expected[0].shape[-1] < 2:
        return None
    a = np.concatenate([x.argmax(-1) for x in expected])
    b = np.concatenate([x.argmax(-1) for x in got])
    return float((a == b).mean())


def run_onyx(model: ir.Model, feeds: list[dict], optimize: bool = True) -> list[dict]:
    from ..debug.runners import OnyxRunner

    runner = OnyxRunner(model, optimize=optimize)
    return [runner.run(f) for f in feeds]


def model_size(model: ir.Model) -> int:
    from ..serde import dumps

    return len(dumps(model))


def evaluate(
    float_model: Any, quantized: Any, feeds: Any, latency: bool = True, repeat: int = 20
) -> Report:
    """Compare ``quantized`` with ``float_model`` on ``feeds`` (held-out inputs)."""
    from ..debug.runners import as_model
    from .calibration import read_feeds

    f, q = as_model(float_model), as_model(quantized)
    feeds = read_feeds(feeds)
    errors = output_errors(run_onyx(f, feeds), run_onyx(q, feeds))
    report = Report(errors, model_size(f), model_size(q), samples=len(feeds))
    if latency:
        report.latency["onyx"] = (_time_onyx(f, feeds[0], repeat), _time_onyx(q, feeds[0], repeat))
        ort = _time_onnxruntime(f, q, feeds[0], repeat)
        if ort is not None:
            report.latency["onnxruntime"] = ort
    return report


def _median_ms(fn, repeat: int) -> float:
    fn()  # warm-up (plans, caches)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _time_onyx(model: ir.Model, feed: dict, repeat: int) -> float:
    from ..debug.runners import OnyxRunner

    runner = OnyxRunner(model)
    return _median_ms(lambda: runner.run(feed), repeat)


def _time_onnxruntime(f: ir.Model, q: ir.Model, feed: dict, repeat: int):
    try:
        from ..debug.runners import OnnxruntimeRunner
    except ImportError:
        return None
    try:
        runners = [OnnxruntimeRunner(m) for m in (f, q)]
    except Exception:  # onnxruntime missing or refusing the model: the report goes without
        return None
    a, b = (_median_ms(lambda r=r: r.run(feed), repeat) for r in runners)
    return a, b


# -- sensitivity -------------------------------------------------------------------------------


@dataclass
class Sensitivity:
    #: (node name, op type, mean abs error of the outputs with only this node quantized), worst first.
    ranking: list[tuple[str, str, float]]
    #: Nodes excluded to meet the target, in order, and the error after each exclusion.
    excluded: list[tuple[str, float]]
    final_error: float
    model: ir.Model | None = None

    def __str__(self) -> str:
        lines = ["sensitivity (mean abs output error with only this node quantized):"]
        lines += [f"  {err:>10.4g}  {op:<18} {name}" for name, op, err in self.ranking]
        for name, err in self.excluded:
            lines.append(f"excluded {name}: error now {err:.4g}")
        lines.append(f"final mean abs error: {self.final_error:.4g}")
        return "\n".join(lines)


def sensitivity(
    model: Any,
    calibration: Any,
    held_out: Any,
    target: float | None = None,
    max_exclude: int | None = None,
    **options,
) -> Sensitivity:
    """Rank the statically quantized nodes by the output error each adds on its own, then (with
    ``target``) exclude the worst until the whole model's mean abs error is at most ``target``
    (or ``max_exclude`` nodes are excluded)."""
    from . import preprocess, quantize
    from .calibration import calibrate, read_feeds
    from .static import DEFAULT_OPS, RULES, plan

    base = preprocess(model)
    feeds = read_feeds(held_out)
    reference = run_onyx(base, feeds)
    ops = options.pop("op_types", None) or DEFAULT_OPS
    always = set(options.pop("nodes_to_exclude", ()))
    candidates = [
        n
        for n in base.graph
        if n.op_type in ops and n.op_type in RULES and n.name and n.name not in always
    ]
    p = plan(base.graph, candidates)
    ranges = calibrate(
        base,
        read_feeds(calibration),
        p.tensors + list(p.shared),
        options.get("method", "minmax"),
        progress=options.pop("progress", True),
    )
    options.pop("method", None)
    common = dict(mode="static", ranges=ranges, preprocessed=True, progress=False, **options)

    def error(exclude: set[str], only: str | None = None) -> float:
        kw = dict(common)
        if only is not None:
            kw["nodes_to_exclude"] = [n.name for n in candidates if n.name != only] + sorted(always)
        else:
            kw["nodes_to_exclude"] = sorted(exclude | always)
        q = quantize(base, op_types=ops, **kw)
        return max(o.mean_abs for o in output_errors(reference, run_onyx(q, feeds)))

    ranking = sorted(
        ((n.name, n.op_type, error(set(), only=n.name)) for n in candidates), key=lambda r: -r[2]
    )
    excluded: list[tuple[str, float]] = []
    current = error(set())
    chosen: set[str] = set()
    limit = len(ranking) if max_exclude is None else max_exclude
    if target is not None:
        for name, _, _ in ranking:
            if current <= target or len(chosen) >= limit:
                break
            chosen.add(name)
            current = error(chosen)
            excluded.append((name, current))
    final = quantize(base, op_types=ops, nodes_to_exclude=sorted(chosen | always), **common)
    return Sensitivity(ranking, excluded, current, final)
