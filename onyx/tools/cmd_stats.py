"""onyx stats: MACs, FLOPs, parameters and memory per operator type and in total."""

from __future__ import annotations

import argparse

HELP = "MACs / FLOPs / parameters / activation memory per op type (or per node) and in total"

EXAMPLE = """examples:
  onyx stats model.onnx --shape batch=1                 # bind the symbolic dim 'batch'
  onyx stats model.onnx --shape input=1,3,224,224 --per-node
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLE
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("model", help="the .onnx file")
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=DIMS",
        help="an input's dims (input=1,3,224,224) or a symbolic dim's size (batch=1); repeatable",
    )
    p.add_argument("--per-node", action="store_true", help="one row per node")


def main(args) -> int:
    from ..serde import load
    from .feeds import parse_shapes
    from .stats import model_stats

    model = load(args.model)
    inputs = {v.name for v in model.graph.inputs}
    shapes: dict = {}
    for name, dims in parse_shapes(args.shape).items():
        # an input's name takes dims; any other name is a symbolic dim's size
        shapes[name] = dims if name in inputs or len(dims) != 1 else dims[0]
    print(model_stats(model, shapes).table(per_node=args.per_node))
    return 0
