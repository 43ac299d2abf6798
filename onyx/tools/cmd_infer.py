"""onyx infer: write the model with every value's inferred type and shape."""

from __future__ import annotations

import argparse

HELP = "infer every value's type and shape and write the model with them (value_info)"

EXAMPLE = """examples:
  onyx infer model.onnx typed.onnx
  onyx infer model.onnx typed.onnx --shape input=1,3,224,224   # fix input dims first
  onyx infer model.onnx typed.onnx --strict                     # conflicts are errors
  onyx infer model.onnx typed.onnx --no-symbolic   # computed dims unknown, not expressions
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLE
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("model", help="the .onnx file")
    p.add_argument("output", help="where to write the typed model")
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D1,D2,...",
        help="set an input's dims first (ints, names, or ? for dynamic); repeatable",
    )
    p.add_argument("--strict", action="store_true", help="fail on conflicting types")
    p.add_argument(
        "--symbolic",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write computed dims as expressions of the input dims ('past + seq', "
        "'floor((h + 1)/2)'; default) or, with --no-symbolic, as unknown",
    )


def main(args) -> int:
    from ..inference import infer_shapes
    from ..inference.symbolic import is_compound
    from ..serde import load, save
    from .compose import update_dims
    from .feeds import parse_shapes

    model = load(args.model)
    if args.shape:
        model = update_dims(model, parse_shapes(args.shape), infer=False)
    before = sum(1 for n in model.graph for v in n.outputs if v.type is not None)
    infer_shapes(model, strict=args.strict, symbolic=args.symbolic)
    typed = [v for n in model.graph for v in n.outputs if v.type is not None]
    static = sum(1 for v in typed if v.shape is not None and v.shape.is_static())
    exprs = sum(1 for v in typed if v.shape is not None and any(map(is_compound, v.shape.dims)))
    total = sum(len(n.outputs) for n in model.graph)
    save(model, args.output)
    print(
        f"wrote {args.output}: {len(typed)}/{total} node outputs typed ({before} before), "
        f"{static} with fully static shapes, {exprs} with dims computed from symbols"
    )
    return 0
