"""onyx.check against onnx.checker on chains of MatMul + Add nodes of growing length: the
checker must stay linear in the number of nodes.

    python benchmarks/bench_check_scale.py [--sizes 4000 16000 100000] [--repeat 3]

Prints, per size, the median seconds of onyx.check and of onnx.checker.check_model (on the
same model, serialized once), their ratio, and the growth of onyx's time against the first size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import onyx  # noqa: E402


def chain(n_nodes: int) -> onnx.ModelProto:
    """``n_nodes`` nodes: MatMul and Add in turn, each reading the previous one's output."""
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    b = numpy_helper.from_array(np.zeros(4, dtype=np.float32), "b")
    nodes, prev = [], "x"
    for i in range(n_nodes):
        op, other = ("MatMul", "w") if i % 2 == 0 else ("Add", "b")
        nodes.append(helper.make_node(op, [prev, other], [f"t{i}"], name=f"n{i}"))
        prev = f"t{i}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 4])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4000, 16000, 100000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"{'nodes':>8} {'onyx s':>8} {'onnx s':>8} {'ratio':>6} {'growth':>7}")
    first = None
    for n in args.sizes:
        proto = chain(n)
        model = onyx.loads(proto.SerializeToString())
        model.graph  # noqa: B018  (convert the graph once, outside the timing)
        t_onyx = median_seconds(lambda m=model: onyx.check(m), args.repeat)
        t_onnx = median_seconds(lambda p=proto: onnx.checker.check_model(p), args.repeat)
        if first is None:
            first = (n, t_onyx)
        growth = (t_onyx / first[1]) / (n / first[0])
        print(f"{n:8d} {t_onyx:8.3f} {t_onnx:8.3f} {t_onyx / t_onnx:6.2f} {growth:7.2f}")
    print("growth: time per node relative to the first size (1.0 = linear)")


if __name__ == "__main__":
    main()
