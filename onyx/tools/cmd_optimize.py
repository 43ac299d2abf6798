"""onyx optimize: onyx's graph optimizer at a level, written to a file, with a table."""

from __future__ import annotations

import argparse

HELP = "optimize a model at --level portable|basic|extended|all and print a before/after table"

EXAMPLE = """examples:
  onyx optimize model.onnx out.onnx --level portable   # = onyx simplify: standard ops only
  onyx optimize model.onnx out.onnx --level all        # onyx / onnxruntime fusions included
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLE
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("model", help="the .onnx file")
    p.add_argument("output", help="where to write the optimized model")
    p.add_argument(
        "--level",
        default="portable",
        choices=["portable", "basic", "extended", "all"],
        help="portable (default): standard ops only; extended/all add com.microsoft fusions",
    )


def main(args) -> int:
    from ..optimizer import optimize
    from ..serde import load, save
    from .simplify import compare, simplify

    model = load(args.model)
    out = simplify(model) if args.level == "portable" else optimize(model, level=args.level)
    save(out, args.output)
    print(compare(model, out))
    print(f"wrote {args.output}")
    return 0
