"""Per-node comparison of onyx and onnxruntime on one model, from both runtimes' profiles.

    python benchmarks/bench_nodes.py light_squeezenet              # a light model by name
    python benchmarks/bench_nodes.py path/to/model.onnx --runs 60 --threads 1 --nodes

Both sessions profile (onyx's SessionOptions.enable_profiling, onnxruntime's) over --runs
runs of random inputs; each node's figure is its fastest run (a busy machine's bursts
inflate medians, rarely the minimum). Prints each runtime's total per op type, and with
--nodes every node in run order. onnxruntime's node names differ from onyx's (its NCHWc
layout renames convs and pools; onyx fuses Conv + Relu into FusedConv, a fire module's
convs into ConvConcat), so compare op kinds and the order of nodes rather than names.

Single-threaded (the default) is the steadiest on a shared machine; the figures point at
the op kinds that lose, which are then measured on their own.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _model_path(name: str) -> str:
    if name.endswith(".onnx"):
        return name
    import onnx

    return str(Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx")


def _feeds(path: str) -> dict:
    import onnx

    m = onnx.load(path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for i in m.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[i.name] = rng.standard_normal([d.dim_value or 1 for d in t.shape.dim]).astype(dtype)
    return feeds


def _nodes(trace_path: str) -> dict[str, tuple[str, int]]:
    """{node name: (op type, fastest duration in us)} of a Chrome-trace profile."""
    durations = collections.defaultdict(list)
    kinds = {}
    for event in json.loads(Path(trace_path).read_text()):
        name = event.get("name", "")
        if event.get("cat") != "Node" or name.endswith(("_fence_before", "_fence_after")):
            continue
        name = name.removesuffix("_kernel_time")
        durations[name].append(event["dur"])
        kinds[name] = event.get("args", {}).get("op_name", "?")
    return {name: (kinds[name], min(d)) for name, d in durations.items()}


def _profile(runtime: str, path: str, feeds: dict, runs: int, threads: int, folder: str):
    if runtime == "onyx":
        import onyx as rt

        options = rt.SessionOptions()
    else:
        import onnxruntime as rt

        options = rt.SessionOptions()
    options.intra_op_num_threads = threads
    options.enable_profiling = True
    options.profile_file_prefix = f"{folder}/{runtime}"
    if runtime == "onyx":
        session = rt.InferenceSession(path, options)
    else:
        session = rt.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        session.run(None, feeds)
    return _nodes(session.end_profiling())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("model", help="a .onnx path, or the name of a light model of onnx's tests")
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads of both (0: default)")
    p.add_argument("--nodes", action="store_true", help="also print every node in run order")
    args = p.parse_args()
    path = _model_path(args.model)
    feeds = _feeds(path)
    with tempfile.TemporaryDirectory() as folder:
        results = {
            rt: _profile(rt, path, feeds, args.runs, args.threads, folder)
            for rt in ("onnxruntime", "onyx")
        }
    for runtime, nodes in results.items():
        per_kind = collections.Counter()
        for kind, us in nodes.values():
            per_kind[kind] += us
        kinds = ", ".join(f"{kind} {us}" for kind, us in per_kind.most_common())
        print(f"{runtime:12s} total {sum(per_kind.values()):8d} us: {kinds}")
    if args.nodes:
        for runtime, nodes in results.items():
            print(f"\n{runtime}")
            for name, (kind, us) in nodes.items():
                print(f"  {kind:24s} {us:8d}  {name}")


if __name__ == "__main__":
    main()
