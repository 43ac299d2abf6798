"""onyx compare: run a model on onyx and another runtime (or a second model), report each
output's error and the first diverging node; exit 0 when they match, 1 when they differ."""

from __future__ import annotations

import argparse

from .feeds import load_npz, parse_shapes

HELP = "compare a model's outputs on onyx and onnxruntime / the reference / another model"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument(
        "--against",
        default="onnxruntime",
        help="onnxruntime (default), reference, onyx-unoptimized, or another .onnx file",
    )
    p.add_argument("--inputs", metavar="IN.npz", help="feeds by input name (default: random)")
    add_shape_argument(p)
    p.add_argument(
        "--rtol",
        action="append",
        default=[],
        metavar="[NAME=]TOL",
        help="relative tolerance (default 1e-3); NAME=TOL for one output",
    )
    p.add_argument(
        "--atol",
        action="append",
        default=[],
        metavar="[NAME=]TOL",
        help="absolute tolerance (default 1e-4); NAME=TOL for one output",
    )
    p.add_argument("--report", metavar="REPORT.json", help="write the per-node table as JSON")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--no-optimize", action="store_true", help="onyx without graph optimizations")
    p.add_argument("--nodes", action="store_true", help="print the per-node table")


def add_shape_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=1,3,224,224",
        help="shape of a random input with symbolic dims (repeatable)",
    )


def parse_tolerance(items: list[str], default: float) -> float | dict[str, float]:
    if not items:
        return default
    per: dict[str, float] = {"*": default}
    for item in items:
        name, sep, value = item.rpartition("=")
        per[name if sep else "*"] = float(value)
    return per if len(per) > 1 else per["*"]


def load_inputs(path: str | None) -> dict | None:
    return None if path is None else load_npz(path)


def main(args) -> int:
    from ..debug.compare import compare

    report = compare(
        args.model,
        against=args.against,
        inputs=load_inputs(args.inputs),
        rtol=parse_tolerance(args.rtol, 1e-3),
        atol=parse_tolerance(args.atol, 1e-4),
        shapes=parse_shapes(args.shape),
        seed=args.seed,
        optimize=not args.no_optimize,
    )
    print(report)
    if args.nodes:
        for row in report.nodes:
            print(f"  {row.status:10} {row.name} ({row.op_type}): max abs {row.max_abs_error:.3g}")
    if args.report:
        report.write(args.report)
        print(f"report: {args.report}")
    return 0 if report.ok else 1
