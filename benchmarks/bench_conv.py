"""Convolution and pooling kernels: onyx's kernel vs onnxruntime on a one-node model, same shapes.

    python benchmarks/bench_conv.py                      # every shape, batch 1 and 8
    python benchmarks/bench_conv.py --batch 1 --only "resnet|tiny"
    python benchmarks/bench_conv.py --kinds float        # float / int / fused kinds only
    python benchmarks/bench_conv.py --json after.json --compare before.json

The shapes are those of realistic models (ResNet-18 and MobileNetV3 at 224, U-Net at 128) and
of the tiny fixtures in tests/models (32x32 images, 8-64 channels); the integer variants
(ConvInteger uint8 x uint8, QLinearConv uint8 x int8 per-channel) and FusedConv (+Relu) reuse
the float conv shapes. Weights are initializers in the onnxruntime model, as in real models.

Both runtimes run on one thread (threadpoolctl for numpy's BLAS, native.threads(1) for onyx's
kernel pool, intra_op_num_threads=1 for onnxruntime) and are timed interleaved, round by
round, so that load from other processes hurts both alike; the figure is the median per-call time over the rounds, and the ratio is
onyx / onnxruntime (2.0: onyx takes twice as long). A geometric mean closes each group.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.common import max_abs_diff, report, time_alternating  # noqa: E402

# ---------------------------------------------------------------------------------- the shapes


@dataclass
class Shape:
    """One conv or pool: input (C, H, W) at batch 1, and for convs the weight shape."""

    name: str
    op: str  # Conv, ConvTranspose, MaxPool, AveragePool, GlobalAveragePool
    chw: tuple[int, int, int]
    w: tuple[int, ...] | None = None
    attrs: dict = field(default_factory=dict)


def _conv(name, c, hw, m, k, stride=1, group=1, pad=None):
    pad = k // 2 if pad is None else pad
    attrs = dict(kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4, group=group)
    return Shape(name, "Conv", (c, hw, hw), (m, c // group, k, k), attrs)


def _dw(name, c, hw, k, stride=1):
    return _conv(name, c, hw, c, k, stride, group=c)


def _pool(name, op, c, hw, k, stride, pad=0):
    return Shape(name, op, (c, hw, hw), None, dict(kernel_shape=[k, k], strides=[stride] * 2,
                                                   pads=[pad] * 4))  # fmt: skip


SHAPES = [
    # ResNet-18 at 224
    _conv("resnet18 stem 7x7/2", 3, 224, 64, 7, 2),
    _pool("resnet18 maxpool 3x3/2", "MaxPool", 64, 112, 3, 2, 1),
    _conv("resnet18 3x3 64@56", 64, 56, 64, 3),
    _conv("resnet18 3x3/2 64>128@56", 64, 56, 128, 3, 2),
    _conv("resnet18 1x1/2 64>128@56", 64, 56, 128, 1, 2),
    _conv("resnet18 3x3 128@28", 128, 28, 128, 3),
    _conv("resnet18 3x3/2 128>256@28", 128, 28, 256, 3, 2),
    _conv("resnet18 1x1/2 128>256@28", 128, 28, 256, 1, 2),
    _conv("resnet18 3x3 256@14", 256, 14, 256, 3),
    _conv("resnet18 3x3/2 256>512@14", 256, 14, 512, 3, 2),
    _conv("resnet18 3x3 512@7", 512, 7, 512, 3),
    Shape("resnet18 gap 512@7", "GlobalAveragePool", (512, 7, 7)),
    # MobileNetV3 at 224
    _conv("mobilenet stem 3x3/2", 3, 224, 16, 3, 2),
    _dw("mobilenet dw3x3 16@112", 16, 112, 3),
    _conv("mobilenet 1x1 16>64@112", 16, 112, 64, 1),
    _dw("mobilenet dw3x3/2 64@112", 64, 112, 3, 2),
    _conv("mobilenet 1x1 64>24@56", 64, 56, 24, 1),
    _conv("mobilenet 1x1 24>72@56", 24, 56, 72, 1),
    _dw("mobilenet dw3x3 72@56", 72, 56, 3),
    _dw("mobilenet dw5x5/2 72@56", 72, 56, 5, 2),
    Shape("mobilenet se gap 72@28", "GlobalAveragePool", (72, 28, 28)),
    _conv("mobilenet se 1x1 72>24@1", 72, 1, 24, 1),
    _conv("mobilenet se 1x1 24>72@1", 24, 1, 72, 1),
    _conv("mobilenet 1x1 40>120@28", 40, 28, 120, 1),
    _dw("mobilenet dw5x5 120@28", 120, 28, 5),
    _dw("mobilenet dw3x3/2 240@28", 240, 28, 3, 2),
    _conv("mobilenet 1x1 80>480@14", 80, 14, 480, 1),
    _dw("mobilenet dw3x3 480@14", 480, 14, 3),
    _dw("mobilenet dw5x5/2 672@14", 672, 14, 5, 2),
    _conv("mobilenet 1x1 160>960@7", 160, 7, 960, 1),
    _dw("mobilenet dw5x5 960@7", 960, 7, 5),
    _conv("mobilenet se 1x1 960>240@1", 960, 1, 240, 1),
    Shape("mobilenet gap 960@7", "GlobalAveragePool", (960, 7, 7)),
    # U-Net at 128
    _conv("unet 3x3 3>32@128", 3, 128, 32, 3),
    _conv("unet 3x3 32@128", 32, 128, 32, 3),
    _pool("unet maxpool 2x2 32@128", "MaxPool", 32, 128, 2, 2),
    _pool("unet avgpool 2x2 32@128", "AveragePool", 32, 128, 2, 2),
    _conv("unet 3x3 64@64", 64, 64, 64, 3),
    _conv("unet 3x3 128@32", 128, 32, 128, 3),
    _conv("unet 3x3 128>256@16", 128, 16, 256, 3),
    Shape(
        "unet convT 2x2/2 256>128@16",
        "ConvTranspose",
        (256, 16, 16),
        (256, 128, 2, 2),
        dict(kernel_shape=[2, 2], strides=[2, 2]),
    ),
    Shape(
        "unet convT 2x2/2 64>32@64",
        "ConvTranspose",
        (64, 64, 64),
        (64, 32, 2, 2),
        dict(kernel_shape=[2, 2], strides=[2, 2]),
    ),
    _conv("unet 3x3 256>128@32", 256, 32, 128, 3),
    _conv("unet 1x1 32>2@128", 32, 128, 2, 1),
    # the serving zoo's convs of a few output pixels (a VAD's STFT frames and encoder, as
    # 2-D convs of height 1): the native GEMV over gathered windows at batch 1
    Shape(
        "serving vad stft 1x256/64 1>258@1x512",
        "Conv",
        (1, 1, 512),
        (258, 1, 1, 256),
        dict(kernel_shape=[1, 256], strides=[1, 64], pads=[0, 0, 0, 0]),
    ),
    Shape(
        "serving vad enc 1x3 129>64@1x5",
        "Conv",
        (129, 1, 5),
        (64, 129, 1, 3),
        dict(kernel_shape=[1, 3], strides=[1, 1], pads=[0, 1, 0, 1]),
    ),
    # the serving zoo's U-Net (32x32): its 2x2 stride-2 upsamplings
    Shape(
        "serving unet convT 2x2/2 64>32@8",
        "ConvTranspose",
        (64, 8, 8),
        (64, 32, 2, 2),
        dict(kernel_shape=[2, 2], strides=[2, 2]),
    ),
    Shape(
        "serving unet convT 2x2/2 32>16@16",
        "ConvTranspose",
        (32, 16, 16),
        (32, 16, 2, 2),
        dict(kernel_shape=[2, 2], strides=[2, 2]),
    ),
    Shape(
        "serving convT 3x3/2 pads 32>16@15",
        "ConvTranspose",
        (32, 15, 15),
        (32, 16, 3, 3),
        dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    ),
    # onnx's light models (issue 23's worst rows): SqueezeNet's fire modules and Inception
    # v2's reduction blocks (stride-2 3x3 convs on 14x14 and 28x28) and 7x7 tail
    _conv("squeezenet 3x3/2 3>64@224", 3, 224, 64, 3, 2, pad=0),
    _conv("squeezenet 1x1 128>16@55", 128, 55, 16, 1),
    _conv("squeezenet 1x1 16>64@55", 16, 55, 64, 1),
    _conv("squeezenet 3x3 16>64@55", 16, 55, 64, 3),
    _conv("squeezenet 3x3 64>256@13", 64, 13, 256, 3),
    _conv("squeezenet 1x1 512>1000@13", 512, 13, 1000, 1),
    _conv("inception 3x3/2 96@28", 96, 28, 96, 3, 2),
    _conv("inception 3x3/2 128>160@28", 128, 28, 160, 3, 2),
    _conv("inception 3x3/2 128>192@14", 128, 14, 192, 3, 2),
    _conv("inception 3x3/2 256@14", 256, 14, 256, 3, 2),
    _conv("inception 3x3 192>320@7", 192, 7, 320, 3),
    _conv("inception 1x1 1024>192@7", 1024, 7, 192, 1),
    _conv("inception 1x1 1024>352@7", 1024, 7, 352, 1),  # (M past the pixel tiles' 256)
    _conv("inception 3x3 224>224@7", 224, 7, 224, 3),
    _conv("inception 1x1 576>128@14", 576, 14, 128, 1),
    _conv("inception 3x3 128>160@14", 128, 14, 160, 3),
    # the tiny fixtures of tests/models (32x32 images)
    _conv("tiny 3x3 3>16@32", 3, 32, 16, 3),
    _pool("tiny maxpool 3x3 16@32", "MaxPool", 16, 32, 3, 1, 1),
    _conv("tiny 3x3 16@32", 16, 32, 16, 3),
    _conv("tiny 1x1/2 16>32@32", 16, 32, 32, 1, 2),
    _conv("tiny 3x3/2 16>32@32", 16, 32, 32, 3, 2),
    _conv("tiny 3x3 32@16", 32, 16, 32, 3),
    _conv("tiny 3x3 64@8", 64, 8, 64, 3),
    _conv("tiny 3x3/2 3>16@32", 3, 32, 16, 3, 2),
    _conv("tiny 1x1 16>32@16", 16, 16, 32, 1),
    _dw("tiny dw3x3 32@16", 32, 16, 3),
    _dw("tiny dw3x3/2 48@16", 48, 16, 3, 2),
    _conv("tiny se 1x1 32>8@1", 32, 1, 8, 1),
    _conv("tiny valid 3x3 3>8@34", 3, 34, 8, 3, pad=0),
    _conv("tiny valid 3x3 16>32@15", 16, 15, 32, 3, pad=0),
    _pool("tiny avgpool 2x2 8@32", "AveragePool", 8, 32, 2, 2),
    _pool("tiny maxpool 2x2 16@14", "MaxPool", 16, 14, 2, 2),
    Shape(
        "tiny convT 2x2/2 32>16@5",
        "ConvTranspose",
        (32, 5, 5),
        (32, 16, 2, 2),
        dict(kernel_shape=[2, 2], strides=[2, 2]),
    ),
    Shape("tiny gap 64@8", "GlobalAveragePool", (64, 8, 8)),
]

# ---------------------------------------------------------------------------------- the cases


@dataclass
class Case:
    name: str
    kind: str  # float, int, fused
    op: str
    domain: str
    inputs: list[np.ndarray]  # in the op's input order; the first is the only graph input
    attrs: dict
    results: dict = field(default_factory=dict)


def _float_case(s: Shape, batch: int, rng) -> Case:
    x = rng.standard_normal((batch, *s.chw)).astype(np.float32)
    inputs = [x]
    if s.w is not None:
        fan_in = math.prod(s.w[1:])
        w = (rng.standard_normal(s.w) / math.sqrt(fan_in)).astype(np.float32)
        out_channels = s.w[1] if s.op == "ConvTranspose" else s.w[0]
        inputs += [w, rng.standard_normal(out_channels).astype(np.float32)]
    return Case(f"{s.name} b{batch}", "float", s.op, "", inputs, dict(s.attrs))


def _int_cases(s: Shape, batch: int, rng) -> list[Case]:
    x = rng.integers(0, 256, (batch, *s.chw), dtype=np.uint8)
    m = s.w[0]
    conv_int = [x, rng.integers(0, 256, s.w, dtype=np.uint8), np.array(128, np.uint8),
                np.array(120, np.uint8)]  # fmt: skip
    qlinear = [
        x,
        np.array(0.02, np.float32),
        np.array(128, np.uint8),
        rng.integers(-127, 128, s.w, dtype=np.int8),
        (rng.random(m) * 0.01 + 0.001).astype(np.float32),
        np.zeros(m, np.int8),
        np.array(0.05, np.float32),
        np.array(100, np.uint8),
        rng.integers(-2000, 2000, m, dtype=np.int32),
    ]
    return [
        Case(f"{s.name} b{batch} ConvInteger", "int", "ConvInteger", "", conv_int, dict(s.attrs)),
        Case(f"{s.name} b{batch} QLinearConv", "int", "QLinearConv", "", qlinear, dict(s.attrs)),
    ]


def _fused_case(s: Shape, batch: int, rng) -> Case:
    c = _float_case(s, batch, rng)
    attrs = dict(s.attrs, activation="Relu")
    return Case(f"{s.name} b{batch} FusedConv", "fused", "FusedConv", "com.microsoft", c.inputs,
                attrs)  # fmt: skip


def build_cases(batches, kinds, only) -> list[Case]:
    rng = np.random.default_rng(0)
    pattern = re.compile(only) if only else None
    cases = []
    for batch in batches:
        for s in SHAPES:
            if pattern and not pattern.search(s.name):
                continue
            if "float" in kinds:
                cases.append(_float_case(s, batch, rng))
            if s.op == "Conv" and "int" in kinds:
                cases += _int_cases(s, batch, rng)
            if s.op == "Conv" and "fused" in kinds and s.w[1] > 1:  # not depthwise
                cases.append(_fused_case(s, batch, rng))
    for case in cases:  # constants: read-only, as a session's are (their set-up is then kept)
        for a in case.inputs[1:]:
            a.flags.writeable = False
    return cases


# ---------------------------------------------------------------------------------- runtimes


def ort_runner(case: Case, y_dtype: np.dtype):
    """A one-node model (first input fed, the rest initializers) run by onnxruntime."""
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    names = [f"in{i}" for i in range(len(case.inputs))]
    x = case.inputs[0]
    x_type = helper.np_dtype_to_tensor_dtype(x.dtype)
    inits = [numpy_helper.from_array(a, n) for a, n in zip(case.inputs[1:], names[1:])]
    node = helper.make_node(case.op, names, ["y"], domain=case.domain, **case.attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(names[0], x_type, x.shape)],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(y_dtype), None)],
        inits,
    )
    opsets = [helper.make_opsetid("", 19)]
    if case.domain:
        opsets.append(helper.make_opsetid(case.domain, 1))
    model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {names[0]: x}
    return lambda: sess.run(None, feeds)[0]


class _Ctx:
    """The little of KernelContext that pooling kernels ask for: one output wanted."""

    n_outputs = 1
    outputs_wanted = (True,)
    opset = 19
    node_name = "bench"


def onyx_runner(case: Case):
    """onyx's registered kernel, called directly (no session: the kernel alone is measured)."""
    from onyx.runtime.registry import lookup

    kernel = lookup(case.op, case.domain, 19 if not case.domain else 1)
    ctx = _Ctx()
    ctx.op_type = case.op
    args = ([ctx] if kernel.takes_ctx else []) + list(case.inputs)
    fn, attrs = kernel.fn, case.attrs
    return lambda: fn(*args, **attrs)


def measure(case: Case, rounds: int, target: float) -> None:
    runners = {"onyx": onyx_runner(case)}
    y_onyx = runners["onyx"]()
    runners["ort"] = ort_runner(case, y_onyx.dtype)
    y_ort = runners["ort"]()
    case.results = time_alternating(runners, rounds, target)
    case.results["ratio"] = case.results["onyx"] / case.results["ort"]
    case.results["max_diff"] = max_abs_diff(y_onyx, y_ort)


# ---------------------------------------------------------------------------------- report


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--kinds", nargs="+", default=["float", "int", "fused"])
    p.add_argument("--only", help="regex on the shape names")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--target", type=float, default=0.01, help="seconds per timed batch of calls")
    p.add_argument("--json", help="write {case: ratio} here")
    p.add_argument("--compare", help="a --json file from an earlier run: show its ratios")
    args = p.parse_args()

    from threadpoolctl import threadpool_limits

    from onyx.runtime import native

    before = json.loads(Path(args.compare).read_text()) if args.compare else {}
    cases = build_cases(args.batch, args.kinds, args.only)
    with threadpool_limits(1), native.threads(1):  # (onyx's own pool too, not only BLAS)
        for c in cases:
            measure(c, args.rounds, args.target)
            print(f"  {c.name:52} {c.results['ratio']:6.2f}", file=sys.stderr, flush=True)
    report(cases, before, 52, lambda c: c.name.split()[0] + " " + c.kind)
    if args.json:
        Path(args.json).write_text(
            json.dumps({c.name: c.results["ratio"] for c in cases}, indent=1)
        )


if __name__ == "__main__":
    main()
