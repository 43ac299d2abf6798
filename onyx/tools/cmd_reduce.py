"""onyx reduce: shrink a failing model to a small subgraph that still fails, and write it with
its inputs (delta debugging over the topological order, then over side branches)."""

from __future__ import annotations

import argparse

from .cmd_compare import add_shape_argument, load_inputs, parse_tolerance
from .feeds import parse_shapes

HELP = "reduce a failing model to a minimal subgraph that still fails (writes reduced.onnx)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument(
        "--fails-when",
        default="compare against onnxruntime",
        metavar="PREDICATE",
        help='"compare against onnxruntime|reference|onyx-unoptimized" (default: against '
        "onnxruntime), or a shell command run on each candidate that exits nonzero when it "
        "fails ({model} and {inputs} are replaced by the candidate's paths; else the model "
        "path is appended)",
    )
    p.add_argument("--inputs", metavar="IN.npz", help="feeds of the full model (default: random)")
    add_shape_argument(p)
    p.add_argument("--rtol", action="append", default=[], metavar="[NAME=]TOL")
    p.add_argument("--atol", action="append", default=[], metavar="[NAME=]TOL")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("-o", "--output", default="reduced.onnx", help="default: reduced.onnx")
    p.add_argument(
        "--inputs-output",
        metavar="OUT.npz",
        help="the reduced model's feeds (default: <output>_inputs.npz)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="print every candidate tried")


def main(args) -> int:
    from ..debug.reduce import reduce

    result = reduce(
        args.model,
        args.fails_when,
        inputs=load_inputs(args.inputs),
        rtol=parse_tolerance(args.rtol, 1e-3),
        atol=parse_tolerance(args.atol, 1e-4),
        shapes=parse_shapes(args.shape),
        seed=args.seed,
    )
    if args.verbose:
        for line in result.log:
            print("  " + line)
    path, inputs_path = result.save(args.output, args.inputs_output)
    print(
        f"reduced {result.original_nodes} nodes to {len(result.nodes)} "
        f"in {result.checks} checks: {', '.join(result.nodes[:10])}"
        + (" ..." if len(result.nodes) > 10 else "")
    )
    print(f"wrote {path} and {inputs_path}")
    return 0
