"""Transformer and quantized-transformer latency: onyx against onnxruntime, ratios per model.

    python benchmarks/bench_transformer.py                   # realistic models, batch 1 and 8
    python benchmarks/bench_transformer.py --zoo             # tests/models' small ones instead
    python benchmarks/bench_transformer.py --only "gpt_ts|bert" --batch 1 --profile
    python benchmarks/bench_transformer.py --only dyn23 --disable AttentionFusion  # a pass's worth
    python benchmarks/bench_transformer.py --encoders --cpu-time --baseline SelfAttentionFusion

``--encoders``: the BERT-style encoder of scripts/make_transformer_zoo.py --bench (4 layers,
d=256, 4 heads; benchmarks/models/transformers/bert_bench.onnx as optimum exports it and
bert_bench_ort_opt.onnx after onnxruntime's transformer optimizer) at batch 1, sequence 128.
``--baseline PASS ...`` adds a row per model with those onyx passes off, timed in the same
process and alternating with the others (a fusion's before / after on one loaded machine).
``--cpu-time`` times by the process's CPU time (a loaded machine's waits for a core excluded).

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
ENCODERS = ROOT / "benchmarks" / "models" / "transformers"

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


def _onyx_session(path: Path, disabled=()):
    import onyx

    oo = onyx.SessionOptions()
    oo.intra_op_num_threads = 1
    oo.disabled_optimizers = list(disabled)
    return onyx.InferenceSession(str(path), oo)


def _sessions(path: Path, disabled=(), baseline=None):
    """onyx's session (and one with the ``baseline`` passes off, if given), onnxruntime's,
    and the seconds onyx's took to create."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    ort_sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    onyx_sess = _onyx_session(path, disabled)
    create = time.perf_counter() - t0
    sessions = {"onyx": onyx_sess, "ort": ort_sess}
    if baseline:
        sessions["onyx_base"] = _onyx_session(path, [*disabled, *baseline])
    return sessions, create


def measure(
    path: Path,
    feeds: dict,
    budget: float,
    min_runs: int = 5,
    disabled=(),
    baseline=None,
    clock=time.perf_counter,
) -> dict:
    """Median latencies (seconds) of both runtimes, runs alternating, plus the max abs diff.
    ``disabled``: onyx optimizer passes switched off (to measure what a fusion brings);
    ``baseline``: passes off in a third session, timed as "onyx_base"."""
    from threadpoolctl import threadpool_limits

    sessions, create = _sessions(path, disabled, baseline)
    with threadpool_limits(1):
        outs = {name: sess.run(None, feeds) for name, sess in sessions.items()}  # warm-up
        times: dict[str, list] = {name: [] for name in sessions}
        start = time.perf_counter()
        while len(times["onyx"]) < min_runs or time.perf_counter() - start < budget:
            order = list(sessions.items())
            for name, sess in order if len(times["onyx"]) % 2 else order[::-1]:
                t0 = clock()
                sess.run(None, feeds)
                times[name].append(clock() - t0)
            if len(times["onyx"]) >= 200:
                break
    diff = max(
        float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64))))
        for g, w in zip(outs["onyx"], outs["ort"])
    )
    result = {name: float(np.median(t)) for name, t in times.items()}
    return {**result, "runs": len(times["onyx"]), "diff": diff, "create": create}


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


def encoder_feeds(seq: int = 128) -> dict:
    """bench_llm.py's encoder feeds: batch 1, random ids, a mask of ones."""
    ids = np.random.default_rng(0).integers(1, 1000, (1, seq)).astype(np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": 0 * ids}


def cases(zoo: bool, only: str, batches, encoders=False) -> list[tuple[str, Path, dict]]:
    out = []
    if encoders:
        for name in ("bert_bench", "bert_bench_ort_opt"):
            path = ENCODERS / f"{name}.onnx"
            if not path.exists():
                sys.exit(f"{path} is missing: run scripts/make_transformer_zoo.py --bench")
            if re.search(only, name):
                out.append((f"{name} b1 s128", path, encoder_feeds()))
        return out
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
    parser.add_argument("--encoders", action="store_true", help="the bench BERT encoders")
    parser.add_argument("--baseline", nargs="*", default=None,
                        help="also time onyx with these passes off (a row of its own)")  # fmt: skip
    parser.add_argument("--cpu-time", action="store_true", help="time by process CPU time")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    clock = time.process_time if args.cpu_time else time.perf_counter
    ratios = []
    print(
        f"{'model':30s} {'onyx ms':>9s} {'ort ms':>9s} {'ratio':>6s} {'runs':>5s} {'maxdiff':>9s}"
    )
    for label, path, feeds in cases(args.zoo, args.only, args.batch, args.encoders):
        r = measure(
            path, feeds, args.budget, disabled=args.disable, baseline=args.baseline, clock=clock
        )
        ratio = r["onyx"] / r["ort"]
        ratios.append(ratio)
        print(
            f"{label:30s} {r['onyx'] * 1e3:9.2f} {r['ort'] * 1e3:9.2f} {ratio:6.2f} "
            f"{r['runs']:5d} {r['diff']:9.2e}",
            flush=True,
        )
        if "onyx_base" in r:
            base = f"  without {','.join(args.baseline)}"
            print(f"{base:30s} {r['onyx_base'] * 1e3:9.2f} {r['ort'] * 1e3:9.2f} "
                  f"{r['onyx_base'] / r['ort']:6.2f}", flush=True)  # fmt: skip
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
