"""onyx quantize against onnxruntime's quantizer on the zoo: accuracy, then speed.

    python benchmarks/bench_quantize.py                 # every model and mode
    python benchmarks/bench_quantize.py --only "resnet|bert" --samples 16
    python benchmarks/bench_quantize.py --skip-accuracy --batch 8 --rounds 100

Accuracy: each float model of tests/models is quantized by both tools with the same settings
(per-channel int8 weights, uint8 activations, min/max calibration on the same seeded inputs)
and both results run in onnxruntime on held-out inputs; the error is the mean abs difference
from the float model's output, the ratio onyx / onnxruntime (below 1: onyx's model is more
accurate). A geometric mean closes each family. Parity: the largest difference between onyx
and onnxruntime running onyx's quantized model.

Speed: median per-run latency of the float model and of onyx's quantized model (static QDQ for
CNNs, dynamic for the rest) in onyx, one thread, timed interleaved.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MODELS = ROOT / "tests" / "models"
CASES = [
    ("cnn", "mobilenet_torchscript_op17", ("static", "dynamic")),
    ("cnn", "resnet_torchscript_op17", ("static", "dynamic")),
    ("cnn", "unet_dynamo_op18", ("static", "dynamic")),
    ("transformer", "bert_torchscript_op17", ("static", "dynamic")),
    ("transformer", "gpt_dynamo_op18", ("static", "dynamic")),
    ("rnn", "lstm_torchscript_op17", ("static", "dynamic")),
]


def feeds(name: str, n: int, seed: int) -> list[dict]:
    manifest = json.loads((MODELS / "manifest.json").read_text())[name]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        f = {}
        for iname, dtype, shape, (lo, hi) in manifest["inputs"]:
            shape = [1 if isinstance(d, str) else d for d in shape]
            f[iname] = (rng.integers(lo, hi, size=shape).astype(dtype) if dtype.startswith("int")
                        else rng.uniform(lo, hi, size=shape).astype(dtype))  # fmt: skip
        out.append(f)
    return out


def accuracy(args) -> None:
    from onyx.quantization.versus import versus

    print(f"{'model':<28} {'mode':<8} {'onyx err':>10} {'ort err':>10} {'ratio':>7} {'parity':>9}")
    by_family: dict[str, list[float]] = {}
    for family, name, modes in CASES:
        if args.only and not re.search(args.only, name):
            continue
        for mode in modes:
            try:
                v = versus(str(MODELS / f"{name}.onnx"), mode, feeds(name, args.samples, 0),
                           feeds(name, args.samples, 1))  # fmt: skip
            except Exception as e:  # a mode onnxruntime or onyx cannot run: say so, go on
                print(f"{name:<28} {mode:<8} failed: {str(e).splitlines()[0][:80]}")
                continue
            by_family.setdefault(family, []).append(v.ratio)
            print(f"{name:<28} {mode:<8} {v.onyx_error:>10.4g} {v.ort_error:>10.4g} "
                  f"{v.ratio:>7.3f} {v.parity:>9.3g}", flush=True)  # fmt: skip
    for family, ratios in by_family.items():
        print(
            f"geomean ratio {family:<12} {math.exp(np.mean(np.log(ratios))):.3f} ({len(ratios)} cases)"
        )


def speed(args) -> None:
    import onyx
    from onyx.quantization import quantize

    print(
        f"\nbatch {args.batch}: {'model':<21} {'mode':<8} {'float ms':>9} {'quant ms':>9} {'speed-up':>8}"
    )
    for family, name, _ in CASES:
        if args.only and not re.search(args.only, name):
            continue
        mode = "static" if family == "cnn" else "dynamic"
        path = str(MODELS / f"{name}.onnx")
        q = quantize(path, mode=mode, calibration=feeds(name, 4, 0), progress=False)
        opts = onyx.SessionOptions()
        opts.intra_op_num_threads = 1
        try:
            sessions = [onyx.InferenceSession(path, opts), onyx.InferenceSession(q, opts)]
        except onyx.NotImplementedOp as e:
            print(f"{name:<28} {mode:<8} not run: {str(e)[:70]}")
            continue
        feed = {k: np.repeat(v, args.batch, axis=0) for k, v in feeds(name, 1, 1)[0].items()}
        times: list[list[float]] = [[], []]
        for _ in range(args.rounds):
            for i, s in enumerate(sessions):
                start = time.perf_counter()
                s.run(None, feed)
                times[i].append((time.perf_counter() - start) * 1e3)
        a, b = (statistics.median(t[2:]) for t in times)
        print(f"{name:<28} {mode:<8} {a:>9.3f} {b:>9.3f} {a / b:>7.2f}x", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="regex over model names")
    p.add_argument("--samples", type=int, default=8, help="calibration and held-out samples")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--batch", type=int, default=1, help="batch size of the speed runs")
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--skip-accuracy", action="store_true", help="speed only (no onnxruntime)")
    args = p.parse_args()
    os.environ.setdefault("ORT_LOGGING_LEVEL", "3")
    if not args.skip_accuracy:
        accuracy(args)
    if not args.skip_speed:
        speed(args)


if __name__ == "__main__":
    main()
