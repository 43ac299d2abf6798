"""How onyx's costs grow with graph size: a chain of MatMul + Add nodes at 4k and 16k nodes
(and 100k with --huge). Times onyx.load (graph built), onyx.check, onyx.optimize and
InferenceSession creation, and onnx.checker / onnxruntime session creation when installed;
prints each time and the ratio time(16k) / time(4k). Linear cost gives 4; the target is <= 5.
Times are medians of CPU seconds of this process (all its threads): on a loaded machine wall
time mostly measures the other processes. --wall reports wall-clock seconds instead. Each
timed call starts after a full garbage collection (not timed), so no step pays for the
garbage an earlier one left; what a call's own objects cost the collector is in its time.

    python benchmarks/bench_scale.py [--sizes 4000,16000] [--huge] [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import onyx  # noqa: E402
from onyx import ir  # noqa: E402

WIDTH = 4


def chain_model(n_nodes: int) -> ir.Model:
    """x -> MatMul(W0) -> Add(b0) -> MatMul(W1) -> ... : ``n_nodes`` nodes, small weights."""
    rng = np.random.default_rng(0)
    x = ir.Value("x", ir.TensorType(ir.DataType.FLOAT, (1, WIDTH)))
    nodes, inits, prev = [], [], x
    for i in range(n_nodes // 2):
        w = ir.Value(f"w{i}", None, ir.Tensor(rng.standard_normal((WIDTH, WIDTH), np.float32)))
        b = ir.Value(f"b{i}", None, ir.Tensor(rng.standard_normal(WIDTH).astype(np.float32)))
        for v in (w, b):
            v.type = ir.TensorType(ir.DataType.FLOAT, v.const_value.shape)
            v.const_value.name = v.name
        inits += [w, b]
        mm = ir.Node("MatMul", [prev, w], [f"m{i}"], name=f"matmul{i}")
        add = ir.Node("Add", [mm.outputs[0], b], [f"a{i}"], name=f"add{i}")
        nodes += [mm, add]
        prev = add.outputs[0]
    prev.type = ir.TensorType(ir.DataType.FLOAT, (1, WIDTH))
    graph = ir.Graph([x], [prev], nodes, inits, name="chain")
    return ir.Model(graph, opset_imports={"": 17}, ir_version=8)


CLOCK = time.process_time


def timed(fn, repeat: int) -> float:
    def collected():
        gc.collect()  # the garbage of earlier calls and steps is theirs to pay, not this one's
        start = CLOCK()
        fn()
        return CLOCK() - start

    return statistics.median([collected() for _ in range(repeat)])


def timed_in_turn(fn_a, fn_b, repeat: int) -> tuple[float, float]:
    """Medians of two steps timed in turn (a, b, a, b, ...): their ratio then compares runs
    made under the same load of the machine."""
    pairs = [(timed(fn_a, 1), timed(fn_b, 1)) for _ in range(repeat)]
    return statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs)


def measure(path: str, repeat: int, skip: set[str], check_repeat: int) -> dict[str, float]:
    def load():
        return onyx.load(path).graph

    path_steps = {
        "onyx.load (graph built)": load,
        "onyx.check": lambda: onyx.check(path),
        "onyx InferenceSession": lambda: onyx.InferenceSession(path),
    }
    try:
        import onnx
        import onnx.checker
    except ImportError:
        onnx = None
    times = {}
    if onnx is not None and not {"onyx.check", "onnx.checker"} & skip:
        # the target compares these two: timed in turn, as often at every size (both are cheap)
        times["onyx.check"], times["onnx.checker"] = timed_in_turn(
            path_steps.pop("onyx.check"), lambda: onnx.checker.check_model(path), check_repeat
        )
    times |= {k: timed(fn, repeat) for k, fn in path_steps.items() if k.split()[0] not in skip}
    # the steps that take a model read it once, after those above: a model alive while a step
    # runs is more for the garbage collector to traverse, and each size is measured alike
    model = onyx.load(path)
    _ = model.graph
    model_steps = {
        # the checker's own work (onyx.check(path) also parses)
        "onyx.check (model in memory)": lambda: onyx.check(model),
        "onyx.optimize": lambda: onyx.optimize(model),
    }
    times |= {k: timed(fn, repeat) for k, fn in model_steps.items() if k.split()[0] not in skip}
    order = ["onyx.load (graph built)", "onyx.check", *model_steps, "onyx InferenceSession"]
    out = {k: times[k] for k in order if k in times}
    if "onnx.checker" in times:
        out["onnx.checker"] = times["onnx.checker"]
    elif onnx is not None and "onnx.checker" not in skip:
        out["onnx.checker"] = timed(lambda: onnx.checker.check_model(path), repeat)
    try:
        import onnxruntime as ort
    except ImportError:
        pass
    else:
        if "onnxruntime" in skip:
            return out
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        out["onnxruntime InferenceSession"] = timed(
            lambda: ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]), repeat
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4000,16000", help="node counts, comma-separated")
    ap.add_argument("--huge", action="store_true", help="also 100k nodes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--wall", action="store_true", help="wall-clock time instead of CPU time")
    ap.add_argument("--skip", default="", help="steps to leave out, e.g. onyx.check,onnxruntime")
    ap.add_argument("--out", help="also write the table as markdown (docs/benchmarks_scale.md)")
    args = ap.parse_args()
    global CLOCK
    if args.wall:
        CLOCK = time.perf_counter
    sizes = [int(s) for s in args.sizes.split(",")] + ([100_000] if args.huge else [])
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = os.path.join(tmp, f"chain{n}.onnx")
            onyx.save(chain_model(n), path)
            skip = set(filter(None, args.skip.split(",")))
            results[n] = measure(path, args.repeat if n < 50_000 else 1, skip, args.repeat)
            print(f"{n} nodes: " + ", ".join(f"{k} {v:.3f} s" for k, v in results[n].items()))
    table = _table(results, sizes, "wall" if args.wall else "CPU") + _versus(results, sizes)
    print("\n" + table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(_document(table, args))


def _table(results: dict[int, dict[str, float]], sizes: list[int], clock: str) -> str:
    base = sizes[0]
    lines = [
        "| step | " + " | ".join(f"{n} nodes ({clock} s)" for n in sizes) + " | ratios |",
        "|---|" + "---|" * len(sizes) + "---|",
    ]
    for key in [k for k in results[base] if all(k in results[n] for n in sizes)]:
        ratios = ", ".join(
            f"{results[n][key] / results[base][key]:.1f} ({n // 1000}k/{base // 1000}k)"
            for n in sizes[1:]
        )
        row = " | ".join(f"{results[n][key]:.3f}" for n in sizes)
        lines.append(f"| {key} | {row} | {ratios} |")
    return "\n".join(lines) + "\n"


#: (onyx step, its counterpart): onyx.check's target is at most 5x onnx.checker (C++), a
#: session's creation at most onnxruntime's.
VERSUS = [
    ("onyx.check", "onnx.checker"),
    ("onyx InferenceSession", "onnxruntime InferenceSession"),
]


def _versus(results: dict[int, dict[str, float]], sizes: list[int]) -> str:
    lines = []
    for ours, theirs in VERSUS:
        both = [n for n in sizes if ours in results[n] and theirs in results[n]]
        pairs = [(n, results[n][ours] / results[n][theirs]) for n in both]
        if pairs:
            each = ", ".join(f"{r:.1f}x at {n // 1000}k" for n, r in pairs)
            lines.append(f"- {ours} / {theirs}: {each}\n")
    return "\n" + "".join(lines) if lines else ""


def _document(table: str, args) -> str:
    flags = [f"--sizes {args.sizes}", "--huge" * args.huge, f"--repeat {args.repeat}"]
    flags = " ".join(f for f in [*flags, "--wall" * args.wall] if f)
    return (
        "# Scale: cost against graph size\n\n"
        f"Made by `python benchmarks/bench_scale.py {flags} --out docs/benchmarks_scale.md` on "
        f"{time.strftime('%Y-%m-%d')} ({os.cpu_count()} cores; medians of {args.repeat}, one run "
        "at 100k nodes but for onyx.check and onnx.checker, which are timed in turn, "
        f"{args.repeat} times at every size). A chain of MatMul + Add nodes; linear cost gives a "
        "16k/4k ratio of 4, the target is at most 5. Each timed call starts after a full "
        "garbage collection "
        f"(not timed). The machine was shared (load average {os.getloadavg()[0]:.1f} at the "
        "end): read ratios, not single figures.\n\n"
        "`onyx.check` of a file first proves it valid on the parsed messages, building no IR "
        "(`onyx/checker_fast.py`); `onyx.check (model in memory)` is the full checker on the IR, "
        "which a file goes to when that proof fails.\n\n" + table
    )


if __name__ == "__main__":
    main()
