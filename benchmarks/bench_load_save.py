"""onyx.load/save against onnx.load/save on a model with 100 MB of initializers and on a
10k-node graph. Prints times and ratios (onyx / onnx; below 1.0 means onyx is faster).

    python benchmarks/bench_load_save.py [--repeat N]

"load" is onyx.load alone (the graph is built on first access); "load+graph" also converts
every node to IR objects; "save" writes a loaded, unedited model; "save converted" writes one
whose graph was converted (the path an edited model takes).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import onyx  # noqa: E402


def big_weights_model(total_mb: int = 100, n: int = 25) -> onnx.ModelProto:
    size = total_mb * (1 << 20) // 4 // n
    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    for i in range(n):
        w = rng.standard_normal(size, dtype=np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Add", [prev, f"w{i}"], [f"y{i}"], name=f"add{i}"))
        prev = f"y{i}"
    g = helper.make_graph(
        nodes,
        "weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [size])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def many_nodes_model(n: int = 10_000) -> onnx.ModelProto:
    nodes, prev = [], "x"
    for i in range(n):
        if i % 3 == 0:
            node = helper.make_node("Relu", [prev], [f"t{i}"], name=f"n{i}")
        elif i % 3 == 1:
            node = helper.make_node("Add", [prev, "c"], [f"t{i}"], name=f"n{i}")
        else:
            node = helper.make_node("LeakyRelu", [prev], [f"t{i}"], name=f"n{i}", alpha=0.1)
        nodes.append(node)
        prev = f"t{i}"
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["N", 8])],
        [numpy_helper.from_array(np.ones(8, np.float32), "c")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench(name: str, proto: onnx.ModelProto, folder: str, repeat: int) -> list[tuple]:
    path = os.path.join(folder, f"{name}.onnx")
    onnx.save(proto, path)
    out_onnx = os.path.join(folder, f"{name}.onnx-out.onnx")
    out_onyx = os.path.join(folder, f"{name}.onyx-out.onnx")
    loaded = onnx.load(path)
    model = onyx.load(path)
    converted = onyx.load(path)
    assert converted.graph is not None

    def onyx_load_graph():
        onyx.load(path).graph  # noqa: B018

    rows = [
        ("load", best(lambda: onnx.load(path), repeat), best(lambda: onyx.load(path), repeat)),
        ("load+graph", best(lambda: onnx.load(path), repeat), best(onyx_load_graph, repeat)),
        (
            "save",
            best(lambda: onnx.save(loaded, out_onnx), repeat),
            best(lambda: onyx.save(model, out_onyx), repeat),
        ),
        (
            "save converted",
            best(lambda: onnx.save(loaded, out_onnx), repeat),
            best(lambda: onyx.save(converted, out_onyx), repeat),
        ),
    ]
    assert onnx.load(out_onyx) == loaded  # the output is the same model
    return [(name, *r) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rows = bench("100MB-initializers", big_weights_model(), folder, args.repeat)
        rows += bench("10k-nodes", many_nodes_model(), folder, args.repeat)
    print(f"{'model':<20} {'operation':<15} {'onnx ms':>9} {'onyx ms':>9} {'ratio':>7}")
    for model, op, t_onnx, t_onyx in rows:
        ratio = t_onyx / t_onnx
        print(f"{model:<20} {op:<15} {t_onnx * 1e3:9.1f} {t_onyx * 1e3:9.1f} {ratio:6.2f}x")


if __name__ == "__main__":
    main()
