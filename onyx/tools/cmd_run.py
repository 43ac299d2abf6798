"""onyx run: run a model on given or random inputs and print its outputs and latency."""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from ..errors import InvalidArgument
from .feeds import as_arrays, input_shape, load_npz, parse_shapes, random_array, save_npz

HELP = "run a model (the bundled example when none is given) and print its outputs and latency"

EXAMPLE_MODEL = Path(__file__).resolve().parents[1] / "examples" / "tiny_cnn.onnx"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="path to an .onnx file (default: the bundled example)")
    p.add_argument(
        "--input",
        "-i",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="feed input NAME from a .npy file (repeatable); others get random data",
    )
    p.add_argument(
        "--repeat",
        "-n",
        type=int,
        default=None,
        help="runs to time after the first (default: as many as fit in about 1 s, at most 1000)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--output", "-o", action="append", default=[], help="output name to fetch")
    p.add_argument("--no-optimize", action="store_true", help="disable graph optimizations")
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D1,D2,...",
        help="dims of a random input (or of a symbolic dim: batch=8), e.g. x=1,3,224,224",
    )
    p.add_argument(
        "--inputs", metavar="IN.npz", help="feed inputs from an .npz (one array per name)"
    )
    p.add_argument("--save-outputs", metavar="OUT.npz", help="write the outputs to an .npz")
    p.epilog = EXAMPLE
    p.formatter_class = argparse.RawDescriptionHelpFormatter


EXAMPLE = """examples:
  onyx run                                          # the bundled example model
  onyx run model.onnx --shape input=1,3,224,224 -n 20
  onyx run model.onnx --shape batch=8               # a symbolic dim's size
  onyx run model.onnx --inputs feeds.npz --save-outputs outputs.npz
"""


def summarize(value) -> str:
    if isinstance(value, list):
        return f"sequence of {len(value)}" + (f": first {summarize(value[0])}" if value else "")
    if isinstance(value, dict):
        return f"map of {len(value)} entries"
    if value is None:
        return "None (empty optional)"
    arr = np.asarray(value)
    head = f"{arr.dtype} {list(arr.shape)}"
    if arr.size == 0:
        return head + " (empty)"
    if arr.dtype.kind in "fiub" or arr.dtype.name == "bfloat16":
        a = arr.astype(np.float64)
        body = f"min {a.min():.6g}  max {a.max():.6g}  mean {a.mean():.6g}"
        flat = arr.reshape(-1)[:6]
        return f"{head}  {body}  first {np.array2string(flat, precision=4, separator=', ')}"
    return f"{head}  first {arr.reshape(-1)[:6].tolist()}"


def main(args) -> int:
    from ..runtime.session import InferenceSession, SessionOptions

    path = Path(args.model) if args.model else EXAMPLE_MODEL
    options = SessionOptions()
    if args.no_optimize:
        options.graph_optimization_level = 0
    t0 = time.perf_counter()
    sess = InferenceSession(str(path), options)
    created = time.perf_counter() - t0
    rng = np.random.default_rng(args.seed)
    given = load_npz(args.inputs) if args.inputs else {}

    shapes = parse_shapes(args.shape)
    for item in args.input:
        name, sep, file = item.partition("=")
        if not sep:
            raise InvalidArgument(f"--input takes NAME=FILE.npy, got {item!r}")
        try:
            given[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise InvalidArgument(f"--input {name}: cannot read an array from {file!r}: {e}") from e
    feed = {
        i.name: given[i.name] if i.name in given else _random_input(i, rng, shapes)
        for i in sess.get_inputs()
    }
    unknown = set(given) - set(feed)
    if unknown:
        raise InvalidArgument(f"unknown input(s) {sorted(unknown)}; model inputs: {list(feed)}")
    print(f"model: {path}")
    for name, value in feed.items():
        source = "file" if name in given else "random"
        print(f"  input  {name}: {summarize(value)}  ({source})")
    names = args.output or None
    t = time.perf_counter()
    outputs = sess.run(names, feed)
    first = time.perf_counter() - t
    times = _time_runs(sess, names, feed, args.repeat, first)
    out_names = names or [o.name for o in sess.get_outputs()]
    for name, value in zip(out_names, outputs):
        print(f"  output {name}: {summarize(value)}")
    if args.save_outputs:
        save_npz(args.save_outputs, as_arrays(dict(zip(out_names, outputs))))
        print(f"  outputs written to {args.save_outputs}")
    # The first run pays one-time set-up (plan code, bound steps, caches): it is reported apart
    # so that the median says what a served model costs per call.
    line = f"session creation {created * 1000:.1f} ms; first run {first * 1000:.3f} ms"
    if times:
        line += f"; then {statistics.median(times) * 1000:.3f} ms median of {len(times)} run(s)"
    print(line)
    return 0


def _time_runs(sess, names, feed, repeat: int | None, first: float) -> list[float]:
    """Seconds of each timed run after the first: ``repeat`` runs, or by default runs until about
    a second has passed (at most 1000; none when the first run took a second)."""
    budget = float("inf") if repeat is not None else 0.0 if first >= 1.0 else 1.0
    count = repeat if repeat is not None else 1000
    times: list[float] = []
    spent = 0.0
    while len(times) < count and spent < budget:
        t = time.perf_counter()
        sess.run(names, feed)
        times.append(time.perf_counter() - t)
        spent += times[-1]
    return times


def _random_input(arg, rng: np.random.Generator, shapes: dict):
    """Random data of an input as the session describes it (onyx.tools.feeds' rules)."""
    from ..ir.dtypes import BY_NAME

    if not arg.type.startswith("tensor("):
        raise InvalidArgument(f"input {arg.name!r} of type {arg.type}: give it with --input")
    dtype = BY_NAME[arg.type[len("tensor(") : -1]].numpy
    return random_array(dtype, input_shape(arg.name, arg.shape, shapes), rng)
