"""Recurrent layers: onyx vs onnxruntime on single-node RNN/GRU/LSTM models and the zoo fixtures.

python benchmarks/bench_rnn.py                  # every case, 1 thread for both runtimes
python benchmarks/bench_rnn.py --only lstm      # cases whose name matches a regex
python benchmarks/bench_rnn.py --threads 2

Both runtimes run interleaved in one process (one onyx run, one onnxruntime run, repeated), so
that load from other processes hurts both alike; the figure is the median. Outputs are checked
against onnxruntime's before timing.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@dataclass
class Case:
    name: str
    model: bytes
    feeds: dict
    # onnxruntime rejects layout=1: it then runs the layout-0 twin on transposed feeds
    ref_model: bytes | None = None
    ref_feeds: dict | None = None


def single_node(op: str, *, seq: int, batch: int, inp: int, hidden: int, direction: str,
                lens: bool = False, layout: int = 0, seed: int = 0) -> Case:  # fmt: skip
    """One ``op`` node with weights as initializers and X (and initial_h) as graph inputs."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    s = 1 / math.sqrt(hidden)

    def w(*shape):
        return rng.uniform(-s, s, shape).astype(np.float32)

    inits = [
        numpy_helper.from_array(w(dirs, g * hidden, inp), "W"),
        numpy_helper.from_array(w(dirs, g * hidden, hidden), "R"),
        numpy_helper.from_array(w(dirs, 2 * g * hidden), "B"),
    ]
    x_shape = [batch, seq, inp] if layout else [seq, batch, inp]
    h_shape = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    feeds = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    node_inputs = ["X", "W", "R", "B", "", "h0"]
    if lens:
        inputs.append(helper.make_tensor_value_info("L", TensorProto.INT32, [batch]))
        feeds["L"] = rng.integers(seq // 2, seq + 1, batch).astype(np.int32)
        node_inputs[4] = "L"
    inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, h_shape))
    feeds["h0"] = rng.standard_normal(h_shape).astype(np.float32) * 0.1
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    attrs = dict(hidden_size=hidden, direction=direction)
    if layout:
        attrs["layout"] = layout
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    node = helper.make_node(op, node_inputs, outputs, **attrs)
    graph = helper.make_graph(
        [node],
        op.lower(),
        inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    tag = f"{op} {direction[:5]} s{seq} b{batch} i{inp} h{hidden}"
    tag += " lens" if lens else ""
    case = Case(tag, model.SerializeToString(), feeds)
    if layout:
        twin = single_node(op, seq=seq, batch=batch, inp=inp, hidden=hidden, direction=direction,
                           lens=lens, seed=seed)  # fmt: skip
        case.name += " layout1"
        case.ref_model = twin.model
        case.ref_feeds = {k: v.swapaxes(0, 1) if v.ndim == 3 else v for k, v in feeds.items()}
    return case


def _to_layout1(values: list) -> list:
    """onnxruntime's layout-0 outputs in layout 1: Y [seq, dirs, batch, h] -> [batch, seq, dirs,
    h]; Y_h, Y_c [dirs, batch, h] -> [batch, dirs, h]."""
    return [v.transpose(2, 0, 1, 3) if v.ndim == 4 else v.swapaxes(0, 1) for v in values]


def fixture_cases(batches) -> list[Case]:
    from benchmarks.zoo import zoo_models

    return [
        Case(f"{m.name} b{b}", Path(m.path).read_bytes(), m.feeds(batch=b))
        for m in zoo_models(quantized=False, ort_optimized=False)
        if re.search("lstm|gru|rnn", m.name)
        for b in batches
    ]


def control_flow_cases() -> list[Case]:
    """Loop and Scan whose bodies do little: what is left is the cost of an iteration."""
    from onnx import TensorProto, helper

    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    cases = []
    for n in (16, 256):
        one = helper.make_tensor("one", f32, [1], [1.0])
        # Loop: x <- x * 0.5 + 1 for n iterations, every x also a scan output
        body = helper.make_graph(
            [
                helper.make_node("Identity", ["cond"], ["cond_out"]),
                helper.make_node("Mul", ["x", "half"], ["xh"]),
                helper.make_node("Add", ["xh", "one"], ["x_out"]),
                helper.make_node("Identity", ["x_out"], ["scan_out"]),
            ],
            "body",
            [
                helper.make_tensor_value_info("i", i64, []),
                helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                helper.make_tensor_value_info("x", f32, [1, 16]),
            ],
            [
                helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                helper.make_tensor_value_info("x_out", f32, [1, 16]),
                helper.make_tensor_value_info("scan_out", f32, [1, 16]),
            ],
            [one, helper.make_tensor("half", f32, [1], [0.5])],
        )
        graph = helper.make_graph(
            [helper.make_node("Loop", ["M", "", "x0"], ["x", "xs"], body=body)],
            "loop",
            [helper.make_tensor_value_info("x0", f32, [1, 16])],
            [helper.make_tensor_value_info(v, f32, None) for v in ("x", "xs")],
            [helper.make_tensor("M", i64, [], [n])],
        )
        feeds = {"x0": np.ones((1, 16), np.float32)}
        cases.append(Case(f"Loop n{n} (Mul, Add)", _model(graph, 16), feeds))
        # Scan: running sum over n rows of [n, 16], every partial sum a scan output
        body = helper.make_graph(
            [
                helper.make_node("Add", ["s", "row"], ["s_out"]),
                helper.make_node("Identity", ["s_out"], ["sums"]),
            ],
            "body",
            [helper.make_tensor_value_info(v, f32, [16]) for v in ("s", "row")],
            [helper.make_tensor_value_info(v, f32, [16]) for v in ("s_out", "sums")],
        )
        graph = helper.make_graph(
            [helper.make_node("Scan", ["s0", "rows"], ["s", "sums"], body=body, num_scan_inputs=1)],
            "scan",
            [
                helper.make_tensor_value_info("s0", f32, [16]),
                helper.make_tensor_value_info("rows", f32, [n, 16]),
            ],
            [helper.make_tensor_value_info(v, f32, None) for v in ("s", "sums")],
        )
        feeds = {
            "s0": np.zeros(16, np.float32),
            "rows": np.random.default_rng(0).standard_normal((n, 16)).astype(np.float32),
        }
        cases.append(Case(f"Scan n{n} (Add)", _model(graph, 16), feeds))
    return cases


def _model(graph, opset: int) -> bytes:
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def all_cases() -> list[Case]:
    cases = []
    for op in ("RNN", "GRU", "LSTM"):
        for b in (1, 8):
            tiny = dict(seq=12, batch=b, inp=16, hidden=32)
            cases.append(single_node(op, direction="bidirectional", **tiny))
        for b in (1, 8):
            real = dict(seq=64, batch=b, inp=256, hidden=256)
            cases.append(single_node(op, direction="forward", **real))
            cases.append(single_node(op, direction="bidirectional", **real))
        if op == "LSTM":  # the serving zoo's: a few steps at batch 1 (rnn.c projects them)
            cases.append(single_node(op, direction="forward", seq=7, batch=1, inp=32, hidden=64))
            cases.append(single_node(op, direction="forward", seq=3, batch=1, inp=64, hidden=64))
        real8 = dict(seq=64, batch=8, inp=256, hidden=256)
        cases.append(single_node(op, direction="bidirectional", lens=True, **real8))
        cases.append(single_node(op, direction="forward", layout=1, **real8))
    return cases + fixture_cases((1, 8)) + control_flow_cases()


def measure(case: Case, threads: int, budget: float, max_runs: int) -> tuple[float, float, float]:
    """Median latency (s) of onyx and onnxruntime, interleaved; and the max abs difference."""
    import onnxruntime as ort

    import onyx

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    ref_model = case.ref_model or case.model
    ref_feeds = case.ref_feeds or case.feeds
    ref = ort.InferenceSession(ref_model, so, providers=["CPUExecutionProvider"])
    # BLAS threads are limited once around the whole measurement (see main), not per run
    sess = onyx.InferenceSession(case.model)
    expected = ref.run(None, ref_feeds)
    if case.ref_model is not None:
        expected = _to_layout1(expected)
    actual = sess.run(None, case.feeds)
    diff = max(float(np.max(np.abs(np.asarray(a) - e))) for a, e in zip(actual, expected))
    t_onyx, t_ort = [], []
    start = time.perf_counter()
    while len(t_onyx) < max_runs and (len(t_onyx) < 5 or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        sess.run(None, case.feeds)
        t1 = time.perf_counter()
        ref.run(None, ref_feeds)
        t2 = time.perf_counter()
        t_onyx.append(t1 - t0)
        t_ort.append(t2 - t1)
    return float(np.median(t_onyx)), float(np.median(t_ort)), diff


def main() -> None:
    from threadpoolctl import threadpool_limits

    p = argparse.ArgumentParser()
    p.add_argument("--only", default="", help="regex on case names")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--budget", type=float, default=1.0, help="seconds per case")
    p.add_argument("--max-runs", type=int, default=200)
    args = p.parse_args()
    cases = [c for c in all_cases() if re.search(args.only, c.name)]
    ratios = []
    print(f"{'case':44s} {'onyx ms':>9s} {'ort ms':>9s} {'ratio':>7s} {'max diff':>9s}")
    with threadpool_limits(args.threads):
        for case in cases:
            t_onyx, t_ort, diff = measure(case, args.threads, args.budget, args.max_runs)
            ratios.append(t_onyx / t_ort)
            print(
                f"{case.name:44s} {t_onyx * 1e3:9.3f} {t_ort * 1e3:9.3f} "
                f"{t_onyx / t_ort:7.2f} {diff:9.2e}",
                flush=True,
            )
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"geomean onyx/ort {geo:.2f}  worst {max(ratios):.2f}  ({len(ratios)} cases)")


if __name__ == "__main__":
    main()
