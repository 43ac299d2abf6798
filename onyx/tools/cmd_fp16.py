"""onyx fp16: convert a model's float32 computation to float16 (or bfloat16)."""

from __future__ import annotations

import argparse

HELP = "convert float32 computation to float16 (or --bf16), keeping float32 where ops need it"

EXAMPLE = """examples:
  onyx fp16 model.onnx model_fp16.onnx                       # inputs/outputs stay float32
  onyx fp16 model.onnx half.onnx --no-keep-io --block Softmax --block LayerNormalization
  onyx fp16 model.onnx model_bf16.onnx --bf16
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLE
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("model", help="the .onnx file")
    p.add_argument("output", help="where to write the converted model")
    p.add_argument("--bf16", action="store_true", help="bfloat16 instead of float16")
    p.add_argument(
        "--no-keep-io", action="store_true", help="narrow the graph inputs and outputs too"
    )
    p.add_argument(
        "--block", action="append", default=[], metavar="OP", help="also keep this op in float32"
    )
    p.add_argument(
        "--block-node",
        action="append",
        default=[],
        metavar="NAME",
        help="keep this node in float32",
    )


def main(args) -> int:
    from ..serde import load, save
    from .precision import DEFAULT_OP_BLOCK_LIST, to_bfloat16, to_float16

    model = load(args.model)
    blocks = DEFAULT_OP_BLOCK_LIST | set(args.block)
    keep = not args.no_keep_io
    if args.bf16:
        out = to_bfloat16(model, keep, blocks, args.block_node)
    else:
        out = to_float16(model, keep, blocks, args.block_node)
    save(out, args.output)
    casts = sum(1 for n in out.graph.all_nodes() if n.op_type == "Cast") - sum(
        1 for n in model.graph.all_nodes() if n.op_type == "Cast"
    )
    print(f"wrote {args.output}: {len(out.graph)} nodes ({casts:+d} Casts)")
    return 0
