"""onyx quantize: write a quantized model (static QDQ/QOperator, dynamic, weight-only int4),
optionally with an accuracy report against the float model and a sensitivity analysis."""

from __future__ import annotations

import argparse
import sys

from ..errors import InvalidArgument

HELP = "quantize a model (static int8 QDQ/QOperator, dynamic, weight-only int4) and report accuracy"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to a float .onnx file")
    p.add_argument("output", help="where to write the quantized model")
    p.add_argument("--mode", choices=("static", "dynamic", "weight_only"), default="static")
    p.add_argument("--format", choices=("qdq", "qoperator"), default="qdq")
    p.add_argument(
        "--calibration",
        metavar="DIR|FILE.npz",
        help="calibration inputs: a folder of .npz files (one feed each) or one .npz",
    )
    p.add_argument(
        "--random-calibration",
        type=int,
        metavar="N",
        help="calibrate on N seeded random feeds instead (a demo: ranges of real data differ)",
    )
    p.add_argument("--method", choices=("minmax", "entropy", "percentile"), default="minmax")
    p.add_argument("--percentile", type=float, default=99.999)
    p.add_argument("--per-tensor", action="store_true", help="one weight scale per tensor")
    p.add_argument("--weight-type", default=None, help="int8 (default), uint8, int4 (weight_only)")
    p.add_argument("--activation-type", default="uint8", help="uint8 (default) or int8")
    p.add_argument("--op-types", help="comma-separated op types to quantize (default: all known)")
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="NODE",
        help="a node name to leave in float (repeatable)",
    )
    p.add_argument("--symmetric", action="store_true", help="symmetric activations")
    p.add_argument("--reduce-range", action="store_true", help="7-bit weights")
    p.add_argument("--block-size", type=int, default=32, help="weight_only block size")
    p.add_argument("--weight-only-form", choices=("matmulnbits", "qdq"), default="matmulnbits")
    p.add_argument(
        "--report",
        action="store_true",
        help="print the error against the float model, sizes and latencies",
    )
    p.add_argument(
        "--held-out",
        metavar="DIR|FILE.npz",
        help="inputs for --report/--sensitivity (default: the calibration inputs)",
    )
    p.add_argument(
        "--sensitivity",
        action="store_true",
        help="rank nodes by the error their quantization adds (static mode)",
    )
    p.add_argument(
        "--target",
        type=float,
        metavar="ERR",
        help="with --sensitivity: exclude the worst nodes until the mean abs output "
        "error is at most ERR; the model written is that one",
    )
    p.add_argument("--max-exclude", type=int, metavar="K", help="exclude at most K nodes")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def _feeds(args):
    from ..debug.compare import make_inputs

    if args.calibration:
        return args.calibration
    if args.random_calibration:
        return [make_inputs(args.model, seed=i) for i in range(args.random_calibration)]
    return None


def main(args) -> int:
    from .. import save
    from ..quantization import evaluate, quantize, sensitivity

    calibration = _feeds(args)
    if args.mode == "static" and calibration is None:
        raise InvalidArgument(
            "static quantization needs --calibration DIR (or --random-calibration N)"
        )
    held_out = args.held_out or calibration
    wt = args.weight_type or ("int4" if args.mode == "weight_only" else "int8")
    options = dict(
        format=args.format,
        method=args.method,
        per_channel=not args.per_tensor,
        weight_type=wt,
        activation_type=args.activation_type,
        op_types=args.op_types.split(",") if args.op_types else None,
        symmetric=args.symmetric,
        reduce_range=args.reduce_range,
    )
    if args.sensitivity:
        if args.mode != "static":
            raise InvalidArgument("--sensitivity analyses static quantization (--mode static)")
        result = sensitivity(
            args.model,
            calibration,
            held_out,
            target=args.target,
            max_exclude=args.max_exclude,
            progress=not args.quiet,
            nodes_to_exclude=args.exclude,
            **options,
        )
        print(result)
        model = result.model
    else:
        model = quantize(
            args.model,
            mode=args.mode,
            calibration=calibration,
            nodes_to_exclude=args.exclude,
            block_size=args.block_size,
            weight_only_form=args.weight_only_form,
            percentile=args.percentile,
            progress=not args.quiet,
            **options,
        )
    save(model, args.output)
    print(f"wrote {args.output}", file=sys.stderr)
    if args.report:
        if held_out is None:
            raise InvalidArgument("--report needs --held-out inputs (or calibration inputs)")
        if args.held_out is None:
            print(
                "note: no --held-out inputs: reporting on the calibration inputs", file=sys.stderr
            )
        print(evaluate(args.model, model, held_out))
    return 0
