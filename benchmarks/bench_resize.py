"""Resize (and the U-Net's normalizations): onyx's kernel vs onnxruntime on a one-node model.

    python benchmarks/bench_resize.py                      # every case, batch 1 and 8
    python benchmarks/bench_resize.py --batch 1 --only "unet"
    python benchmarks/bench_resize.py --json after.json --compare before.json

The cases are the U-Net decoder's upsamplings (64 channels at 64x64 -> 128x128: PyTorch's
``F.interpolate(scale_factor=2)`` in nearest mode, asymmetric coordinates and floor rounding, and
bilinear with half_pixel coordinates; float32, and uint8 as in the QOperator-quantized U-Net) and
a few other common resizes (align_corners / asymmetric / pytorch_half_pixel 2x, nearest 2x with
half_pixel, 3x and 0.5x, fractional and sizes-given resizes, cubic), NCHW, at batch 1 and 8.
Scales and sizes are initializers, as in exported models. The U-Net's other non-conv ops close
the list ("norm" cases): InstanceNormalization on its GroupNorm-as-InstanceNorm reshapes
(4 x 131072, 4 x 32768) and its 64-channel 64x64 maps, and GroupNormalization-21 (4 groups).

Both runtimes run on one thread (threadpoolctl for numpy, intra_op_num_threads=1 for
onnxruntime) and are timed interleaved, round by round, so that load from other processes hurts
both alike; the figure is the median per-call time over the rounds, and the ratio is onyx /
onnxruntime (2.0: onyx takes twice as long). The maximum absolute difference between the two
outputs is shown too (0 where onyx follows onnxruntime's arithmetic to the bit). A geometric mean
closes the run.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.common import max_abs_diff, report, time_alternating  # noqa: E402


@dataclass
class Case:
    """One Resize node: input (C, H, W) at batch 1, its attributes, scales or output (H, W)."""

    name: str
    chw: tuple[int, int, int]
    attrs: dict
    scales: tuple[float, float] | None = None
    sizes: tuple[int, int] | None = None
    dtype: str = "float32"
    results: dict = field(default_factory=dict)
    op: str = "Resize"


def _case(name, chw, mode, coord, scales=None, sizes=None, dtype="float32", **extra):
    attrs = dict(mode=mode, coordinate_transformation_mode=coord, **extra)
    return Case(name, chw, attrs, scales, sizes, dtype)


_FLOOR = {"nearest_mode": "floor"}  # PyTorch's exports of nearest interpolation

CASES = [
    # the U-Net decoder (F.interpolate(scale_factor=2)), float32 and uint8 (QOperator)
    _case("unet nearest 2x 64@64", (64, 64, 64), "nearest", "asymmetric", (2, 2), **_FLOOR),
    _case("unet linear 2x 64@64", (64, 64, 64), "linear", "half_pixel", (2, 2)),
    _case(
        "unet u8 nearest 2x 64@64",
        (64, 64, 64),
        "nearest",
        "asymmetric",
        (2, 2),
        None,
        "uint8",
        **_FLOOR,
    ),
    _case("unet u8 linear 2x 64@64", (64, 64, 64), "linear", "half_pixel", (2, 2), None, "uint8"),
    # other common resizes
    _case("linear align_corners 2x 32@56", (32, 56, 56), "linear", "align_corners", (2, 2)),
    _case("linear asymmetric 2x 32@56", (32, 56, 56), "linear", "asymmetric", (2, 2)),
    _case(
        "linear pytorch_half_pixel 2x 32@56", (32, 56, 56), "linear", "pytorch_half_pixel", (2, 2)
    ),
    _case("nearest half_pixel 2x 32@56", (32, 56, 56), "nearest", "half_pixel", (2, 2)),
    _case("nearest asymmetric 3x 16@32", (16, 32, 32), "nearest", "asymmetric", (3, 3), **_FLOOR),
    _case("linear half_pixel 0.5x 32@112", (32, 112, 112), "linear", "half_pixel", (0.5, 0.5)),
    _case("nearest half_pixel 0.5x 32@112", (32, 112, 112), "nearest", "half_pixel", (0.5, 0.5)),
    _case("linear half_pixel 1.5x 32@56", (32, 56, 56), "linear", "half_pixel", (1.5, 1.5)),
    _case("linear sizes 3@224->320x256", (3, 224, 224), "linear", "half_pixel", None, (320, 256)),
    _case("cubic half_pixel 2x 16@32", (16, 32, 32), "cubic", "half_pixel", (2, 2)),
    # the U-Net's normalizations (chw: the input's shape after the batch)
    Case("norm instance 4x131072", (4, 131072), {}, op="InstanceNormalization"),
    Case("norm instance 64@64", (64, 64, 64), {}, op="InstanceNormalization"),
    Case("norm instance 4x32768", (4, 32768), {}, op="InstanceNormalization"),
    Case("norm group 4 of 32@128", (32, 128, 128), {"num_groups": 4}, op="GroupNormalization"),
    Case("norm group 4 of 128@32", (128, 32, 32), {"num_groups": 4}, op="GroupNormalization"),
]

_OPSETS = {"Resize": 19, "InstanceNormalization": 17, "GroupNormalization": 21}


def build(batches, only) -> list[Case]:
    pattern = re.compile(only) if only else None
    out = []
    for batch in batches:
        for c in CASES:
            if pattern and not pattern.search(c.name):
                continue
            out.append(Case(f"{c.name} b{batch}", (batch, *c.chw), c.attrs, c.scales, c.sizes,
                            c.dtype, op=c.op))  # fmt: skip
    return out


def _inputs(case: Case, rng) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """x and the initializers: (scales, sizes) for Resize, (scale, bias) for a normalization."""
    shape = case.chw  # with the batch in front
    if case.dtype == "uint8":
        x = rng.integers(0, 256, shape, dtype=np.uint8)
    else:
        x = rng.standard_normal(shape).astype(np.float32)
    if case.op != "Resize":
        scale, bias = rng.standard_normal((2, shape[1])).astype(np.float32)
        return x, scale, bias
    scales = np.array([1, 1, *case.scales], np.float32) if case.scales else None
    sizes = np.array([*shape[:2], *case.sizes], np.int64) if case.sizes else None
    return x, scales, sizes


def ort_runner(case: Case, x, scales, sizes):
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    inits, names = [], ["x", "", "", ""]
    if case.op != "Resize":  # a normalization: (x, scale, bias)
        inits = [numpy_helper.from_array(scales, "s"), numpy_helper.from_array(sizes, "b")]
        names = ["x", "s", "b"]
    elif scales is not None:
        inits.append(numpy_helper.from_array(scales, "scales"))
        names[2] = "scales"
    else:
        inits.append(numpy_helper.from_array(sizes, "sizes"))
        names[3] = "sizes"
    while not names[-1]:
        names.pop()
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    node = helper.make_node(case.op, names, ["y"], **case.attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, x.shape)],
        [helper.make_tensor_value_info("y", elem, None)],
        inits,
    )
    opset = helper.make_opsetid("", _OPSETS[case.op])
    model = helper.make_model(graph, opset_imports=[opset], ir_version=10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {"x": x}
    return lambda: sess.run(None, feeds)[0]


def onyx_runner(case: Case, x, scales, sizes):
    """onyx's registered kernel, called directly (no session: the kernel alone is measured)."""
    from onyx.runtime.registry import lookup

    fn = lookup(case.op, "", _OPSETS[case.op]).fn
    if case.op != "Resize":
        return lambda: fn(x, scales, sizes, **case.attrs)
    return lambda: fn(x, None, scales, sizes, **case.attrs)


def measure(case: Case, rounds: int, target: float) -> None:
    x, scales, sizes = _inputs(case, np.random.default_rng(0))
    runners = {
        "onyx": onyx_runner(case, x, scales, sizes),
        "ort": ort_runner(case, x, scales, sizes),
    }
    y_onyx, y_ort = runners["onyx"](), runners["ort"]()
    case.results = time_alternating(runners, rounds, target)
    case.results["ratio"] = case.results["onyx"] / case.results["ort"]
    case.results["max_diff"] = max_abs_diff(y_onyx, y_ort)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--only", help="regex on the case names")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--target", type=float, default=0.02, help="seconds per timed batch of calls")
    p.add_argument("--json", help="write {case: ratio} here")
    p.add_argument("--compare", help="a --json file from an earlier run: show its ratios")
    args = p.parse_args()

    from threadpoolctl import threadpool_limits

    before = json.loads(Path(args.compare).read_text()) if args.compare else {}
    cases = build(args.batch, args.only)
    with threadpool_limits(1):
        for c in cases:
            measure(c, args.rounds, args.target)
            print(f"  {c.name:42} {c.results['ratio']:6.2f}", file=sys.stderr, flush=True)
    report(cases, before, 42)
    if args.json:
        Path(args.json).write_text(
            json.dumps({c.name: c.results["ratio"] for c in cases}, indent=1)
        )


if __name__ == "__main__":
    main()
