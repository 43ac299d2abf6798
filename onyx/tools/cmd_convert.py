"""onyx convert: a model rewritten for another ai.onnx opset."""

from __future__ import annotations

import argparse

HELP = "convert a model to another ai.onnx opset (up or down), or say which node cannot be"

EXAMPLE = """examples:
  onyx convert model.onnx model_op13.onnx --opset 13
  onyx convert old.onnx new.onnx --opset 21
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLE
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("model", help="the .onnx file")
    p.add_argument("output", help="where to write the converted model")
    p.add_argument("--opset", type=int, required=True, help="the target ai.onnx opset")


def main(args) -> int:
    from ..serde import load, save
    from .version_converter import convert_version

    model = load(args.model)
    before = model.opset("")
    out = convert_version(model, args.opset)
    save(out, args.output)
    print(f"wrote {args.output}: opset {before} -> {args.opset}, {len(out.graph)} nodes")
    return 0
