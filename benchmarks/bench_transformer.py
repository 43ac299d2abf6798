"""Transformer and quantized-transformer latency: onyx against onnxruntime, ratios per model.

    python benchmarks/bench_transformer.py                   # realistic models, batch 1 and 8
    python benchmarks/bench_transformer.py --zoo             # tests/models' small ones instead
    python benchmarks/bench_transformer.py --only "gpt_ts|bert" --batch 1 --profile
    python benchmarks/bench_transformer.py --only dyn23 --disable AttentionFusion  # a pass's worth

Realistic models (GPT, BERT and Llama style, d=256, 4 heads, 4 layers, seq 128, the
architectures of scripts/make_zoo.py) are exported by TorchScript (opset 17) and dynamo (18,
23), quantized by onnxruntime.quantization (dynamic, QDQ, QOperator) and fused by
onnxruntime.transformers (com.microsoft ops). They are built once into .bench/transformer/
(needs torch and onnxscript; the zoo models need neither).

Timing: both runtimes on one thread (threadpoolctl for onyx's BLAS, intra_op_num_threads=1 for
onnxruntime) so that other processes on the machine hurt both alike; runs alternate between
the runtimes and the figure is the median per runtime. ``--profile`` adds onyx's milliseconds
per op type (its Chrome-trace profiler) for each model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CACHE = ROOT / ".bench" / "transformer"

from benchmarks.zoo import make_feeds, zoo_models  # noqa: E402

D, HEADS, LAYERS, SEQ, VOCAB = 256, 4, 4, 128, 1000
IDS = ("input_ids", "int64", ["N", SEQ], [0, VOCAB])
MASK = ("attention_mask", "int64", ["N", SEQ], [0, 2])
#: family -> (input specs, output names)
FAMILIES = {
    "gpt": ([IDS], ["logits"]),
    "bert": ([IDS, MASK], ["last_hidden_state", "logits"]),
    "llama": ([IDS], ["logits"]),
}
#: realistic model name -> (family, how it is made)
REALISTIC = {
    "gpt_ts17": ("gpt", ("torchscript", 17)),
    "gpt_dyn18": ("gpt", ("dynamo", 18)),
    "gpt_dyn23": ("gpt", ("dynamo", 23)),
    "gpt_ort_fused": ("gpt", ("fused", "gpt_dyn18", "gpt2")),
    "gpt_quant_dynamic": ("gpt", ("quant", "gpt_ts17", "dynamic")),
    "gpt_quant_qdq": ("gpt", ("quant", "gpt_ts17", "qdq")),
    "gpt_quant_qoperator": ("gpt", ("quant", "gpt_ts17", "qoperator")),
    "bert_ts17": ("bert", ("torchscript", 17)),
    "bert_dyn18": ("bert", ("dynamo", 18)),
    "bert_ort_fused": ("bert", ("fused", "bert_dyn18", "bert")),
    "bert_quant_dynamic": ("bert", ("quant", "bert_ts17", "dynamic")),
    "bert_quant_qdq": ("bert", ("quant", "bert_ts17", "qdq")),
    "bert_quant_qoperator": ("bert", ("quant", "bert_ts17", "qoperator")),
    "llama_dyn18": ("llama", ("dynamo", 18)),
    "llama_dyn23": ("llama", ("dynamo", 23)),
}


# ------------------------------------------------------------------------------ building models


def _torch_model(family: str):
    import torch

    sys.path.insert(0, str(ROOT / "scripts"))
    import make_zoo

    cls = {"gpt": make_zoo.GPT, "bert": make_zoo.BERT, "llama": make_zoo.Llama}[family]
    torch.manual_seed(0)
    return cls(vocab=VOCAB, d=D, heads=HEADS, layers=LAYERS, max_len=SEQ).eval()


def _export(family: str, exporter: str, opset: int, path: Path) -> None:
    import onnx
    import torch
    from torch.export import Dim

    inputs, outputs = FAMILIES[family]
    model = _torch_model(family)
    feeds = make_feeds(inputs, 2, seed=0)  # batch 2: dynamo specializes a size-1 dim
    args = tuple(torch.from_numpy(feeds[name]) for name, *_ in inputs)
    names = [name for name, *_ in inputs]
    if exporter == "torchscript":
        dyn = {n: {0: "batch"} for n in names + outputs}
        torch.onnx.export(
            model, args, str(path), dynamo=False, opset_version=opset, input_names=names,
            output_names=outputs, dynamic_axes=dyn,
        )  # fmt: skip
    else:
        batch = Dim("batch", min=1, max=64)
        program = torch.onnx.export(
            model, args, dynamo=True, opset_version=opset, input_names=names, output_names=outputs,
            dynamic_shapes=tuple({0: batch} for _ in names), optimize=True, verbose=False,
        )  # fmt: skip
        program.save(str(path))
    onnx.save(onnx.load(str(path)), str(path))  # one file, no side .data
    side = path.with_name(path.name + ".data")
    if side.exists():
        side.unlink()


def _quantize(family: str, src: Path, mode: str, dst: Path) -> None:
    from onnxruntime import quantization as q
    from onnxruntime.quantization.registry import QLinearOpsRegistry
    from onnxruntime.quantization.shape_inference import quant_pre_process

    inputs = FAMILIES[family][0]

    class Calibration:
        def __init__(self):
            self.data = iter([make_feeds(inputs, 2, seed=100 + i) for i in range(4)])

        def get_next(self):
            return next(self.data, None)

    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        pre = Path(tmp) / "pre.onnx"
        try:
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=False)
        except Exception:
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        if mode == "dynamic":
            q.quantize_dynamic(str(pre), str(dst), weight_type=q.QuantType.QUInt8)
            return
        fmt = q.QuantFormat.QDQ if mode == "qdq" else q.QuantFormat.QOperator
        ops = None
        if mode == "qoperator" and family == "gpt":  # as scripts/make_zoo.py (ort quantizer bug)
            ops = [o for o in QLinearOpsRegistry if o != "Mul"]
        q.quantize_static(
            str(pre), str(dst), Calibration(), quant_format=fmt,
            activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
            per_channel=mode == "qdq", op_types_to_quantize=ops,
        )  # fmt: skip


def _fuse(src: Path, model_type: str, dst: Path) -> None:
    from onnxruntime.transformers import optimizer

    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        model = optimizer.optimize_model(
            str(src), model_type=model_type, num_heads=HEADS, hidden_size=D, opt_level=0
        )
        model.save_model_to_file(str(dst))


def realistic_model(name: str) -> Path:
    """The path of a realistic model, built (and cached) on first use."""
    path = CACHE / f"{name}.onnx"
    if path.exists():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    family, how = REALISTIC[name]
    tmp = path.with_suffix(".tmp.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how[0] in ("torchscript", "dynamo"):
            _export(family, how[0], how[1], tmp)
        elif how[0] == "quant":
            _quantize(family, realistic_model(how[1]), how[2], tmp)
        else:
            _fuse(realistic_model(how[1]), how[2], tmp)
    tmp.rename(path)
    return path


# ------------------------------------------------------------------------------------- timing


def _sessions(path: Path, disabled=()):
    import onnxruntime as ort

    import onyx

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    ort_sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    oo = onyx.SessionOptions()
    oo.intra_op_num_threads = 1
    oo.disabled_optimizers = list(disabled)
    t0 = time.perf_counter()
    onyx_sess = onyx.InferenceSession(str(path), oo)
    create = time.perf_counter() - t0
    return onyx_sess, ort_sess, create


def measure(path: Path, feeds: dict, budget: float, min_runs: int = 5, disabled=()) -> dict:
    """Median latencies (seconds) of both runtimes, runs alternating, plus the max abs diff.
    ``disabled``: onyx optimizer passes switched off (to measure what a fusion brings)."""
    from threadpoolctl import threadpool_limits

    onyx_sess, ort_sess, create = _sessions(path, disabled)
    with threadpool_limits(1):
        got = onyx_sess.run(None, feeds)  # warm-up (and the outputs to compare)
        want = ort_sess.run(None, feeds)
        times = {"onyx": [], "ort": []}
        start = time.perf_counter()
        while len(times["onyx"]) < min_runs or time.perf_counter() - start < budget:
            for name, sess in (("onyx", onyx_sess), ("ort", ort_sess)):
                t0 = time.perf_counter()
                sess.run(None, feeds)
                times[name].append(time.perf_counter() - t0)
            if len(times["onyx"]) >= 200:
                break
    diff = max(
        float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64))))
        for g, w in zip(got, want)
    )
    return {
        "onyx": float(np.median(times["onyx"])),
        "ort": float(np.median(times["ort"])),
        "runs": len(times["onyx"]),
        "diff": diff,
        "create": create,
    }


def profile(path: Path, feeds: dict, runs: int = 3, disabled=()) -> dict[str, float]:
    """onyx's milliseconds per op type (mean over ``runs``), from its profiler."""
    from threadpoolctl import threadpool_limits

    import onyx

    so = onyx.SessionOptions()
    so.intra_op_num_threads = 1
    so.disabled_optimizers = list(disabled)
    so.enable_profiling = True
    so.profile_file_prefix = str(Path(tempfile.gettempdir()) / "bench_transformer")
    sess = onyx.InferenceSession(str(path), so)
    with threadpool_limits(1):
        for _ in range(runs):
            sess.run(None, feeds)
    trace = sess.end_profiling()
    per_op: dict[str, float] = defaultdict(float)
    for e in json.loads(Path(trace).read_text()):
        if e.get("cat") == "Node":
            per_op[e["args"]["op_name"]] += e["dur"] / 1000 / runs
    os.unlink(trace)
    return dict(sorted(per_op.items(), key=lambda kv: -kv[1]))


# ---------------------------------------------------------------------------------------- main


def cases(zoo: bool, only: str, batches) -> list[tuple[str, Path, dict]]:
    out = []
    if zoo:
        for m in zoo_models():
            if m.family in FAMILIES and re.search(only, m.name):
                out += [(f"{m.name} b{b}", m.path, m.feeds(batch=b)) for b in batches]
        return out
    for name, (family, _) in REALISTIC.items():
        if re.search(only, name):
            path = realistic_model(name)
            inputs = FAMILIES[family][0]
            out += [(f"{name} b{b}", path, make_feeds(inputs, b, seed=0)) for b in batches]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", action="store_true", help="tests/models instead of realistic")
    parser.add_argument("--only", default="", help="regex on model names")
    parser.add_argument("--batch", type=int, nargs="*", default=[1, 8])
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per model")
    parser.add_argument("--profile", action="store_true", help="onyx ms per op type")
    parser.add_argument(
        "--disable", nargs="*", default=[], help="onyx optimizer passes to switch off"
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    ratios = []
    print(
        f"{'model':30s} {'onyx ms':>9s} {'ort ms':>9s} {'ratio':>6s} {'runs':>5s} {'maxdiff':>9s}"
    )
    for label, path, feeds in cases(args.zoo, args.only, args.batch):
        r = measure(path, feeds, args.budget, disabled=args.disable)
        ratio = r["onyx"] / r["ort"]
        ratios.append(ratio)
        print(
            f"{label:30s} {r['onyx'] * 1e3:9.2f} {r['ort'] * 1e3:9.2f} {ratio:6.2f} "
            f"{r['runs']:5d} {r['diff']:9.2e}",
            flush=True,
        )
        if args.profile:
            ops = profile(path, feeds, disabled=args.disable)
            total = sum(ops.values())
            top = ", ".join(f"{k} {v:.1f}" for k, v in list(ops.items())[:8])
            print(f"    onyx profile ({total:.1f} ms): {top}", flush=True)
    if ratios:
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"geomean onyx/ort {geo:.2f} over {len(ratios)}, worst {max(ratios):.2f}")


if __name__ == "__main__":
    main()
