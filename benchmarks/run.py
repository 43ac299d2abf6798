"""The benchmark: onyx vs onnxruntime vs onnx's ReferenceEvaluator, one command.

    python benchmarks/run.py            # full run, writes docs/benchmarks.md and docs/benchmarks.png
    python benchmarks/run.py --quick    # fewer repeats, batch 1 only, memory on the zoo only
    python benchmarks/run.py --only gpt --no-memory --no-reference

Models: the zoo (tests/models, batch 1 and 8), onnx's light models, a scikit-learn tree
ensemble and a linear pipeline (converted with skl2onnx). Every runtime gets the same feeds
and 2 threads. Latency is the median of repeated runs after a warm-up; session creation the
median of a few creations; peak memory the peak RSS growth of a fresh process that creates
the session and runs it (so onnxruntime's native allocations count too). See README.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
THREADS = 2

import numpy as np  # noqa: E402

# ---------------------------------------------------------------------------------- the cases


@dataclass
class Case:
    name: str
    group: str  # zoo, light, sklearn
    path: str
    feeds: dict
    batch: int = 1
    results: dict = field(default_factory=dict)  # runtime -> {latency, create, peak_mb, ...}


def zoo_cases(batches) -> list[Case]:
    from benchmarks.zoo import zoo_models

    return [
        Case(f"{m.name} b{b}", "zoo", str(m.path), m.feeds(batch=b), b)
        for m in zoo_models()
        for b in batches
    ]


def light_cases() -> list[Case]:
    import onnx

    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    cases = []
    for path in sorted(glob.glob(str(folder / "*.onnx"))):
        m = onnx.load(path, load_external_data=False)
        inits = {t.name for t in m.graph.initializer}
        rng = np.random.default_rng(0)
        feeds = {}
        for i in m.graph.input:
            if i.name in inits:
                continue
            t = i.type.tensor_type
            shape = [d.dim_value or 1 for d in t.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        cases.append(Case(Path(path).stem, "light", path, feeds))
    return cases


def sklearn_cases(workdir: str) -> list[Case]:
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification
    from sklearn.decomposition import PCA
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = make_classification(2000, 20, n_informative=10, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    models = {
        "sklearn_random_forest": RandomForestClassifier(100, max_depth=10, random_state=0),
        "sklearn_linear_pipeline": make_pipeline(
            StandardScaler(), PCA(10), LogisticRegression(max_iter=500)
        ),
    }
    cases = []
    for name, est in models.items():
        est.fit(x, y)
        no_zipmap = {
            RandomForestClassifier: {"zipmap": False},
            LogisticRegression: {"zipmap": False},
        }
        onx = to_onnx(est, x[:1], target_opset={"": 17, "ai.onnx.ml": 3}, options=no_zipmap)
        path = os.path.join(workdir, name + ".onnx")
        with open(path, "wb") as f:
            f.write(onx.SerializeToString())
        cases.append(Case(name, "sklearn", path, {onx.graph.input[0].name: x[:256]}, 256))
    return cases


# ---------------------------------------------------------------------------------- runtimes


def make_session(runtime: str, path: str):
    """A callable running the model once, for ``runtime`` in onyx / onnxruntime / reference."""
    if runtime == "onyx":
        import onyx

        so = onyx.SessionOptions()
        so.intra_op_num_threads = THREADS
        sess = onyx.InferenceSession(path, so)
        return lambda feeds: sess.run(None, feeds)
    if runtime == "onnxruntime":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = THREADS
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        return lambda feeds: sess.run(None, feeds)
    if runtime == "reference":
        from onnx.reference import ReferenceEvaluator

        ref = ReferenceEvaluator(path)
        return lambda feeds: ref.run(None, feeds)
    raise ValueError(runtime)


def timed(fn, repeats: int, budget: float) -> list[float]:
    """Run times of ``fn`` (after one warm-up): ``repeats`` runs or ``budget`` seconds, at least 3
    unless one run alone exceeds the budget."""
    t = time.perf_counter()
    fn()
    first = time.perf_counter() - t
    if first > budget:
        return [first]
    times = []
    deadline = time.perf_counter() + budget
    while len(times) < repeats and (len(times) < 3 or time.perf_counter() < deadline):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def measure(case: Case, runtime: str, repeats: int, budget: float) -> dict:
    creates = []
    for _ in range(1 if runtime == "reference" else 3):
        t = time.perf_counter()
        run = make_session(runtime, case.path)
        creates.append(time.perf_counter() - t)
    outputs = run(case.feeds)
    times = timed(lambda: run(case.feeds), repeats, budget)
    return {
        "latency": float(np.median(times)),
        "create": float(np.median(creates)),
        "runs": len(times),
        "outputs": outputs,
    }


def max_diff(a, b) -> float:
    worst = 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype.kind in "fiub" and y.dtype.kind in "fiub" and x.shape == y.shape and x.size:
            worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))))
    return worst


# ---------------------------------------------------------------------------------- memory

_PROBE = """
import json, os, resource, sys, numpy as np
sys.path.insert(0, {root!r})
from benchmarks.run import make_session
feeds = dict(np.load({feeds!r}))
import onyx, onnxruntime  # imports are not the session's memory
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
try:  # reset the high-water mark so only what follows counts
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
except OSError:
    pass
base = rss()
run = make_session({runtime!r}, {path!r})
for _ in range(3):
    run(feeds)
with open("/proc/self/status") as f:
    hwm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM"))
print(json.dumps({{"peak_mb": max(0, hwm - base) / 2**20}}))
"""


def peak_memory(case: Case, runtime: str, workdir: str) -> float | None:
    feeds = os.path.join(workdir, "feeds.npz")
    np.savez(feeds, **case.feeds)
    code = _PROBE.format(root=str(ROOT), feeds=feeds, runtime=runtime, path=case.path)
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
        )
        return json.loads(out.stdout.strip().splitlines()[-1])["peak_mb"]
    except Exception:
        return None


# ---------------------------------------------------------------------------------- profile


def op_hotspots(cases: list[Case], top: int = 12) -> list[tuple[str, float, int]]:
    """Where onyx spends its time over the zoo (batch 1): total ms per op type, node count."""
    import onyx

    per_op: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as d:
        for case in cases:
            so = onyx.SessionOptions()
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(d, "p")
            sess = onyx.InferenceSession(case.path, so)
            for _ in range(5):
                sess.run(None, case.feeds)
            with open(sess.end_profiling()) as f:
                events = json.load(f)
            for e in events:
                if e.get("cat") == "Node":
                    op = e["args"]["op_name"]
                    acc = per_op.setdefault(op, [0.0, 0])
                    acc[0] += e["dur"] / 1e3 / 5
                    acc[1] += 1
    ranked = sorted(per_op.items(), key=lambda kv: -kv[1][0])[:top]
    return [(op, ms, n // 5) for op, (ms, n) in ranked]


# ---------------------------------------------------------------------------------- report


def geomean(values) -> float:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def ratio(case: Case, a: str, b: str) -> float | None:
    ra, rb = case.results.get(a), case.results.get(b)
    if not ra or not rb or "latency" not in ra or "latency" not in rb:
        return None
    return ra["latency"] / rb["latency"]


def _fmt(v, digits=2, unit="") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:.{digits}f}{unit}"


def _ms(case: Case, runtime: str, key: str = "latency") -> str:
    r = case.results.get(runtime) or {}
    if "error" in r:
        return "error"
    v = r.get(key)
    return "–" if v is None else f"{v * 1e3:.3g}"


def write_report(cases: list[Case], args, hotspots, png_name: str) -> str:
    zoo = [c for c in cases if c.group == "zoo"]
    lines = [
        "# Benchmarks",
        "",
        f"Made by `python benchmarks/run.py{' --quick' if args.quick else ''}` on "
        f"{time.strftime('%Y-%m-%d')}: {os.cpu_count()} CPU cores, {THREADS} threads for every "
        "runtime, numpy "
        f"{np.__version__}. Latency is the median of repeated runs (ms); ratios are latency "
        "ratios (onyx/onnxruntime: lower is better for onyx; reference/onyx: how many times "
        "onyx is faster than onnx's ReferenceEvaluator). Peak memory is the peak RSS growth of "
        "a fresh process creating the session and running it 3 times (MiB).",
        "",
        "## Summary",
        "",
    ]
    summary = []
    for title, group in (("zoo", zoo), ("light models", [c for c in cases if c.group == "light"])):
        for b in sorted({c.batch for c in group}) if title == "zoo" else [None]:
            sel = [c for c in group if b is None or c.batch == b]
            if not sel:
                continue
            label = f"{title} batch {b}" if b is not None else title
            summary.append((label, sel))
    summary.append(("everything", cases))
    lines += [
        "| set | models | geomean onyx/onnxruntime | worst onyx/onnxruntime | geomean reference/onyx "
        "| geomean creation onyx/onnxruntime | geomean peak memory onyx/onnxruntime |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, sel in summary:
        ratios = [(ratio(c, "onyx", "onnxruntime"), c.name) for c in sel]
        ratios = [(r, n) for r, n in ratios if r]
        worst = max(ratios, default=(None, ""))
        creates = [
            c.results["onyx"]["create"] / c.results["onnxruntime"]["create"]
            for c in sel
            if "create" in c.results.get("onyx", {})
            and "create" in c.results.get("onnxruntime", {})
        ]
        mems = [
            c.results["onyx"]["peak_mb"] / c.results["onnxruntime"]["peak_mb"]
            for c in sel
            if c.results.get("onyx", {}).get("peak_mb")
            and c.results.get("onnxruntime", {}).get("peak_mb")
        ]
        lines.append(
            f"| {label} | {len(sel)} | {_fmt(geomean(r for r, _ in ratios))} "
            f"| {_fmt(worst[0])} ({worst[1]}) "
            f"| {_fmt(geomean(ratio(c, 'reference', 'onyx') for c in sel), 1)} "
            f"| {_fmt(geomean(creates))} | {_fmt(geomean(mems))} |"
        )
    lines += ["", f"![ratios]({png_name})", "", "## Every model", ""]
    lines += [
        "| model | group | onyx ms | onnxruntime ms | reference ms | onyx/ort | ref/onyx "
        "| create onyx ms | create ort ms | peak onyx MiB | peak ort MiB | max abs diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        o, r = c.results.get("onyx", {}), c.results.get("onnxruntime", {})
        lines.append(
            f"| {c.name} | {c.group} | {_ms(c, 'onyx')} | {_ms(c, 'onnxruntime')} "
            f"| {_ms(c, 'reference')} | {_fmt(ratio(c, 'onyx', 'onnxruntime'))} "
            f"| {_fmt(ratio(c, 'reference', 'onyx'), 1)} | {_ms(c, 'onyx', 'create')} "
            f"| {_ms(c, 'onnxruntime', 'create')} | {_fmt(o.get('peak_mb'), 1)} "
            f"| {_fmt(r.get('peak_mb'), 1)} | {_fmt(c.results.get('diff'), 6)} |"
        )
    errors = [
        (c.name, rt, res["error"])
        for c in cases
        for rt, res in c.results.items()
        if isinstance(res, dict) and "error" in res
    ]
    if errors:
        lines += ["", "## Errors", ""]
        lines += [f"- {n} ({rt}): {e}" for n, rt, e in errors]
    if hotspots:
        lines += ["", "## Where onyx spends its time (zoo, batch 1, per run, summed)", ""]
        lines += ["| op | ms | nodes |", "|---|---|---|"]
        lines += [f"| {op} | {ms:.3f} | {n} |" for op, ms, n in hotspots]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- the chart

# 3x5 glyphs, one octal digit per row (bit 4 = left column)
_GLYPHS = dict(
    zip(
        "abcdefghijklmnopqrstuvwxyz0123456789_.-/():=@ ",
        "25755 65656 34443 65556 74647 74644 34553 55755 72227 11152 55655 44447 57755 65555 "
        "25552 65644 25563 65655 34216 72222 55557 55552 55775 55255 55222 71247 75557 26227 "
        "61247 61216 55711 74616 34757 71222 75757 75716 00007 00002 00700 11244 24442 21112 "
        "02020 07070 25365 00000".split(),
    )
)


def _text(img, x, y, s, color, scale=2):
    for ch in s.lower():
        rows = _GLYPHS.get(ch, _GLYPHS[" "])
        for r, digit in enumerate(rows):
            bits = int(digit, 8)
            for col in range(3):
                if bits & (4 >> col):
                    y0, x0 = y + r * scale, x + col * scale
                    img[y0 : y0 + scale, x0 : x0 + scale] = color
        x += 4 * scale
    return x


def _png(img: np.ndarray) -> bytes:
    h, w, _ = img.shape
    raw = b"".join(b"\x00" + img[i].tobytes() for i in range(h))

    def chunk(kind, data):
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    ihdr = w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def chart(cases: list[Case]) -> bytes:
    """Horizontal bars on a log scale (0.1x .. 1000x): onyx/onnxruntime (blue) and
    reference/onyx (orange), one row per model."""
    rows = [c for c in cases if ratio(c, "onyx", "onnxruntime")]
    label_w, plot_w, row_h, top = 300, 640, 22, 40  # pixels
    h, w = top + row_h * len(rows) + 30, label_w + plot_w + 40
    img = np.full((h, w, 3), 255, np.uint8)
    lo, hi = -1.0, 3.0  # log10 range

    def xpos(v):
        return label_w + int((min(max(math.log10(v), lo), hi) - lo) / (hi - lo) * plot_w)

    for v in (0.1, 1, 1.5, 3, 10, 30, 100, 1000):
        img[top - 5 : h - 25, xpos(v)] = (200, 200, 200) if v not in (1, 3, 30) else (120, 120, 120)
        _text(img, xpos(v) - 6, h - 20, f"{v:g}x", (80, 80, 80))
    x = _text(img, 10, 8, "onyx/onnxruntime", (40, 90, 200))
    _text(img, x + 20, 8, "reference/onyx", (230, 120, 20))
    for i, c in enumerate(rows):
        y = top + i * row_h
        _text(img, 8, y + 4, c.name[:36], (0, 0, 0))
        for j, (v, color) in enumerate(
            (
                (ratio(c, "onyx", "onnxruntime"), (40, 90, 200)),
                (ratio(c, "reference", "onyx"), (230, 120, 20)),
            )
        ):
            if v:
                x0, x1 = sorted((xpos(1), xpos(v)))
                img[y + 3 + j * 8 : y + 10 + j * 8, x0 : max(x1, x0 + 1)] = color
    return _png(img)


# ---------------------------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, batch 1 only")
    ap.add_argument("--only", default="", help="regex on case names")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--no-light", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = ap.parse_args(argv)
    repeats, budget = (10, 0.3) if args.quick else (50, 2.0)
    runtimes = ["onyx", "onnxruntime"] + ([] if args.no_reference else ["reference"])
    workdir = tempfile.mkdtemp(prefix="onyx_bench_")
    cases = zoo_cases([1] if args.quick else [1, 8])
    if not args.no_light:
        cases += light_cases()
    cases += sklearn_cases(workdir)
    if args.only:
        cases = [c for c in cases if re.search(args.only, c.name)]
    for case in cases:
        for rt in runtimes:
            try:
                case.results[rt] = measure(case, rt, repeats, budget if rt != "reference" else 5.0)
            except Exception as e:  # a runtime that cannot run a model: reported, not fatal
                case.results[rt] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        outs = [case.results.get(rt, {}).pop("outputs", None) for rt in runtimes]
        if outs[0] is not None and outs[1] is not None:
            case.results["diff"] = max_diff(outs[0], outs[1])
        if not args.no_memory and (case.group != "light" or not args.quick):
            for rt in ("onyx", "onnxruntime"):
                if "latency" in case.results.get(rt, {}):
                    case.results[rt]["peak_mb"] = peak_memory(case, rt, workdir)
        print(
            f"{case.name:34s} onyx {_ms(case, 'onyx'):>8s} ms  ort {_ms(case, 'onnxruntime'):>8s} ms"
            f"  ref {_ms(case, 'reference'):>9s} ms  onyx/ort {_fmt(ratio(case, 'onyx', 'onnxruntime'))}"
            f"  ref/onyx {_fmt(ratio(case, 'reference', 'onyx'), 1)}",
            flush=True,
        )
    zoo1 = [c for c in cases if c.group == "zoo" and c.batch == 1]
    hotspots = op_hotspots(zoo1) if zoo1 else []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_suffix(".png")
    png.write_bytes(chart(cases))
    out.write_text(write_report(cases, args, hotspots, png.name))
    print(f"wrote {out} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
