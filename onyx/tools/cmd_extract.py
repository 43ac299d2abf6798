"""onyx extract: the sub-model computing some values from others."""

from __future__ import annotations

import argparse

HELP = "extract the sub-model that computes --outputs (from --inputs, default the model's inputs)"

EXAMPLE = """example:
  onyx extract model.onnx part.onnx --inputs /blocks.0/Add_output_0 --outputs /blocks.1/Add_output_0
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLE
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("model", help="the .onnx file to cut from")
    p.add_argument("output", help="where to write the extracted model")
    p.add_argument(
        "--inputs",
        nargs="+",
        metavar="NAME",
        help="value names to start from (default: the model's inputs)",
    )
    p.add_argument(
        "--outputs", nargs="+", required=True, metavar="NAME", help="value names to compute"
    )


def main(args) -> int:
    from ..serde import load, save
    from .compose import extract_model

    model = load(args.model)
    inputs = args.inputs or [v.name for v in model.graph.inputs]
    m = extract_model(model, inputs, args.outputs)
    save(m, args.output)
    print(
        f"wrote {args.output}: {len(m.graph)} nodes, {len(m.graph.initializers)} initializers, "
        f"inputs {[v.name for v in m.graph.inputs]}, outputs {[v.name for v in m.graph.outputs]}"
    )
    return 0
