"""onyx simplify: a smaller model of standard ops only, with a before/after table."""

from __future__ import annotations

import argparse

HELP = "simplify a model portably (standard ops only) and print a before/after table"

EXAMPLE = """example:
  onyx simplify model.onnx model_slim.onnx
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLE
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("model", help="the .onnx file")
    p.add_argument("output", help="where to write the simplified model")


def main(args) -> int:
    from ..serde import load, save
    from .simplify import compare, simplify

    model = load(args.model)
    out = simplify(model)
    save(out, args.output)
    print(compare(model, out))
    print(f"wrote {args.output}")
    return 0
