"""LLM generation and transformer encoders: onyx against onnxruntime, the same loop for both.

    python scripts/make_transformer_zoo.py --bench   # once: benchmarks/models/transformers/
    python benchmarks/bench_llm.py                   # int4 and fp32 decoders, the encoders
    python benchmarks/bench_llm.py --context 512 2048 --new-tokens 32 --threads 2
    python benchmarks/bench_llm.py --threads 1 --cpu-time          # CPU time (a loaded machine)

Decoder: onnxruntime-genai's builder output of a 4-layer d=512 Llama-style model (8 heads, 4 KV
heads, vocab 32000; int4 block 32 at accuracy level 4, and fp32). For each context length the
prompt of that many tokens is the prefill (latency: median over runs), then ``--new-tokens``
greedy tokens are decoded (tokens/s: median over runs) by onyx.generate's loop, once with the
onyx session onyx.generate makes by default and once with an onnxruntime session
(``session=``), so the loop's own cost counts for both. Both run the decoder's logits for the
last position only (onyx/genai/last_token.py; saved for onnxruntime in a temporary folder);
onyx's session fuses each gated MLP into one node besides (onyx/genai/fusions.py), as
onnxruntime's own optimizer fuses what it knows (SiLU into QuickGelu). ``--all-logits`` runs
the graph as exported in both. ``--memory``: the peak RSS growth of a fresh process per
runtime that makes the session and generates, instead of times. Encoder: a 4-layer d=256 BERT-style model at batch 1, sequence 128, as optimum exports
it and after onnxruntime's transformer optimizer (Attention, SkipLayerNormalization, ...).
Where onnxruntime-genai is installed, its own Generator runs the decoders too (a row of its own:
its loop binds past and present to one buffer and samples in C++).
Runs alternate between the runtimes; the machine is shared, so ratios move between runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BENCH = ROOT / "benchmarks" / "models" / "transformers"


def _sessions(path: Path, threads: int, decoder: Path | None = None):
    """(onyx's session, onnxruntime's) of ``path``; with ``decoder`` (a folder), onyx's is the
    one onyx.generate makes by default for it."""
    import onnxruntime as ort

    import onyx
    from onyx.genai import Generator

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    theirs = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    options = onyx.SessionOptions(intra_op_num_threads=threads)
    if decoder is not None:
        return Generator(decoder, session_options=options).session, theirs
    return onyx.InferenceSession(str(path), options), theirs


def _last_token_copy(folder: Path, tmp: Path) -> Path:
    """The decoder as onyx.generate runs it (logits of the last position only:
    onyx/genai/last_token.py), saved for onnxruntime too, so that both run the same graph."""
    import onyx
    from onyx.genai.last_token import last_token_logits

    model = onyx.load(str(folder / "model.onnx"))
    if not last_token_logits(model):
        return folder / "model.onnx"
    path = tmp / "model.onnx"
    onyx.save(model, str(path), external_data=True, location="model.onnx.data")
    return path


class _CpuClock:
    """onyx.genai's clock made the process's CPU time (``--cpu-time``): on a loaded machine
    wall time counts the moments the process waits for a core. Meaningful with --threads 1,
    where both runtimes compute on the calling thread."""

    perf_counter = staticmethod(time.process_time)


def bench_decoder(folder: Path, contexts, new_tokens: int, runs: int, threads: int,
                  all_logits: bool = False) -> list:  # fmt: skip
    import onyx

    with tempfile.TemporaryDirectory() as tmp:
        path = folder / "model.onnx" if all_logits else _last_token_copy(folder, Path(tmp))
        ours, theirs = _sessions(path, threads, None if all_logits else folder)
        rows = []
        rng = np.random.default_rng(0)
        for context in contexts:
            prompt = [1, *rng.integers(4, 32000, context - 1).tolist()]
            figures: dict[str, dict[str, list]] = {"onyx": {}, "ort": {}}
            tokens = {}
            for r in range(runs):
                for name, sess in (("onyx", ours), ("ort", theirs))[:: 1 if r % 2 == 0 else -1]:
                    res = onyx.generate(folder, prompt, new_tokens, session=sess, stop_token_ids=[])
                    figures[name].setdefault("prefill", []).append(res.timings["prefill_s"])
                    figures[name].setdefault("rate", []).append(res.timings["decode_tokens_per_s"])
                    tokens[name] = res.tokens
            med = {k: {m: statistics.median(v) for m, v in f.items()} for k, f in figures.items()}
            rows.append((folder.name, context, med, tokens["onyx"] == tokens["ort"]))
        return rows


_MEMORY_PROBE = """
import json, os, sys, numpy as np
sys.path.insert(0, {root!r})
# imports are not the model's memory: both runtimes' modules are loaded before the baseline
import onnxruntime as ort, onyx, onyx.runtime.session, onyx.genai.generator
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
try:  # reset the high-water mark so only what follows counts
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
except OSError:
    pass
base = rss()
if {runtime!r} == "ort":
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = {threads}
    session = ort.InferenceSession({path!r}, opts, providers=["CPUExecutionProvider"])
else:
    session = None  # (onyx.generate's own session: the last-position logits)
prompt = [1, *np.random.default_rng(0).integers(4, 32000, {context} - 1).tolist()]
opts = onyx.SessionOptions(intra_op_num_threads={threads})
onyx.generate({folder!r}, prompt, {new_tokens}, session=session, session_options=opts,
              stop_token_ids=[])
with open("/proc/self/status") as f:
    hwm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM"))
print(json.dumps({{"peak_mb": max(0, hwm - base) / 2**20}}))
"""


def peak_memory(folder: Path, path: Path, runtime: str, context: int, new_tokens: int,
                threads: int) -> float | None:  # fmt: skip
    """Peak RSS growth (MiB) of a fresh process that makes the session and generates
    ``new_tokens`` after a prompt of ``context`` tokens (both runtimes' modules imported before
    the baseline)."""
    import json
    import subprocess

    code = _MEMORY_PROBE.format(root=str(ROOT), runtime=runtime, path=str(path),
                                folder=str(folder), context=context, new_tokens=new_tokens,
                                threads=threads)  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if out.returncode:
        print(out.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_mb"]


def bench_memory(folder: Path, contexts, new_tokens: int, threads: int) -> list:
    """(context, onyx MiB, onnxruntime MiB, model files MiB) per context."""
    files = sum(f.stat().st_size for f in folder.glob("model.onnx*")) / 2**20
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = _last_token_copy(folder, Path(tmp))
        for context in contexts:
            ours = peak_memory(folder, path, "onyx", context, new_tokens, threads)
            theirs = peak_memory(folder, path, "ort", context, new_tokens, threads)
            rows.append((context, ours, theirs, files))
    return rows


def bench_genai(folder: Path, contexts, new_tokens: int, runs: int) -> list:
    """onnxruntime-genai's own Generator on the same folder (when it is installed): prefill as
    append_tokens of the prompt, then generate_next_token per token."""
    try:
        import onnxruntime_genai as og
    except ImportError:
        return []
    model = og.Model(str(folder))
    rng = np.random.default_rng(0)
    rows = []
    for context in contexts:
        prompt = [1, *rng.integers(4, 32000, context - 1).tolist()]
        prefill, rate = [], []
        for _ in range(runs):
            params = og.GeneratorParams(model)
            params.set_search_options(max_length=context + new_tokens, do_sample=False)
            gen = og.Generator(model, params)
            t = time.perf_counter()
            gen.append_tokens(prompt)
            prefill.append(time.perf_counter() - t)
            t = time.perf_counter()
            for _ in range(new_tokens - 1):
                gen.generate_next_token()
            rate.append((new_tokens - 1) / (time.perf_counter() - t))
        rows.append((context, statistics.median(prefill), statistics.median(rate)))
    return rows


def bench_encoder(path: Path, runs: int, threads: int, seq: int = 128, clock=time.perf_counter):
    ours, theirs = _sessions(path, threads)
    rng = np.random.default_rng(0)
    feeds = {}
    for arg in theirs.get_inputs():
        dtype = np.int64 if "int64" in arg.type else np.int32
        value = rng.integers(1, 1000, (1, seq)) if arg.name == "input_ids" else np.ones((1, seq))
        if arg.name == "token_type_ids":
            value = np.zeros((1, seq))
        feeds[arg.name] = value.astype(dtype)
    times: dict[str, list] = {"onyx": [], "ort": []}
    for sess in (ours, theirs):
        sess.run(None, feeds)
    for r in range(runs):
        for name, sess in (("onyx", ours), ("ort", theirs))[:: 1 if r % 2 == 0 else -1]:
            t = clock()
            for _ in range(5):
                sess.run(None, feeds)
            times[name].append((clock() - t) / 5)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, nargs="+", default=[512])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", default="", help="substring of the model names")
    parser.add_argument("--all-logits", action="store_true",
                        help="the decoders as exported: logits of every prompt position")  # fmt: skip
    parser.add_argument("--cpu-time", action="store_true",
                        help="time by the process's CPU time (with --threads 1)")  # fmt: skip
    parser.add_argument("--memory", action="store_true",
                        help="peak RSS growth of a fresh process per runtime instead of times")  # fmt: skip
    args = parser.parse_args()
    if args.cpu_time:
        import onyx.genai.generator as generator

        generator.time = _CpuClock
    if args.memory:
        print(f"{'decoder':22} {'context':>7} {'files MiB':>10} {'peak MiB onyx':>14} "
              f"{'x files':>8} {'ort':>8} {'x files':>8}")  # fmt: skip
        for precision in ("int4", "fp32"):
            folder = BENCH / f"llama_bench_{precision}"
            if not folder.exists() or args.only not in folder.name:
                continue
            for context, ours, theirs, files in bench_memory(folder, args.context,
                                                             args.new_tokens, args.threads):  # fmt: skip
                print(f"{folder.name:22} {context:7d} {files:10.1f} {ours:14.1f} "
                      f"{ours / files:8.2f} {theirs:8.1f} {theirs / files:8.2f}")  # fmt: skip
        return
    if not BENCH.exists():
        sys.exit(f"{BENCH} is missing: run scripts/make_transformer_zoo.py --bench first")
    print(f"{'decoder':22} {'context':>7} {'prefill ms onyx':>16} {'ort':>8} {'ratio':>6} "
          f"{'decode tok/s onyx':>18} {'ort':>8} {'ratio':>6}  same tokens")  # fmt: skip
    for precision in ("int4", "fp32"):
        folder = BENCH / f"llama_bench_{precision}"
        if not folder.exists() or args.only not in folder.name:
            continue
        for name, context, m, same in bench_decoder(folder, args.context, args.new_tokens,
                                                    args.runs, args.threads,
                                                    args.all_logits):  # fmt: skip
            p_on, p_ort = m["onyx"]["prefill"] * 1e3, m["ort"]["prefill"] * 1e3
            r_on, r_ort = m["onyx"]["rate"], m["ort"]["rate"]
            print(f"{name:22} {context:7d} {p_on:16.1f} {p_ort:8.1f} {p_on / p_ort:6.2f} "
                  f"{r_on:18.1f} {r_ort:8.1f} {r_ort / r_on:6.2f}  {same}")  # fmt: skip
        for context, prefill, rate in bench_genai(folder, args.context, args.new_tokens, args.runs):
            print(f"{folder.name + ' (genai)':22} {context:7d} {'':16} {prefill * 1e3:8.1f} "
                  f"{'':6} {'':18} {rate:8.1f}   onnxruntime-genai's Generator")  # fmt: skip
    print(f"\n{'encoder (batch 1, seq 128)':30} {'onyx ms':>8} {'ort ms':>8} {'ratio':>6}")
    for name in ("bert_bench", "bert_bench_ort_opt"):
        path = BENCH / f"{name}.onnx"
        if path.exists() and args.only in name:
            clock = time.process_time if args.cpu_time else time.perf_counter
            t = bench_encoder(path, max(args.runs, 5), args.threads, clock=clock)
            print(f"{name:30} {t['onyx'] * 1e3:8.2f} {t['ort'] * 1e3:8.2f} "
                  f"{t['onyx'] / t['ort']:6.2f}")  # fmt: skip
    print("\nratios: onyx time / onnxruntime time (decode: onnxruntime's rate / onyx's)")


if __name__ == "__main__":
    main()
