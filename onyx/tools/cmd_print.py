"""onyx print: a model in ONNX's textual syntax, or a text file back into a model."""

from __future__ import annotations

import argparse
import sys

HELP = "print a model in ONNX's textual syntax (or, given a text file, write it as a model)"

EXAMPLE = """examples:
  onyx print model.onnx                      # the text on stdout
  onyx print model.onnx --max-elements 16    # weights over 16 elements shown as {...}
  onyx print model.onnx -o model.txt         # written to a file (atomically)
  onyx print model.txt -o model.onnx         # parse the text and save the model
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLE
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("model", help="an .onnx file, or a text file in ONNX's textual syntax")
    p.add_argument("-o", "--output", help="write here instead of stdout (.onnx: save a model)")
    p.add_argument(
        "--max-elements",
        type=int,
        default=None,
        metavar="N",
        help="print tensors of more than N elements as {...} (no longer parseable)",
    )


def _is_text(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(4096)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return head.lstrip()[:1] in (b"<", b"#") or not path.endswith(".onnx")


def main(args) -> int:
    from ..serde import load, save
    from ._common import write_text_atomic
    from .text import parse_model, to_text

    if _is_text(args.model):
        with open(args.model, encoding="utf-8") as f:
            model = parse_model(f.read())
    else:
        model = load(args.model)
    if args.output and args.output.endswith(".onnx"):
        save(model, args.output)
        print(f"wrote {args.output}")
        return 0
    text = to_text(model, max_tensor_elements=args.max_elements)
    if args.output:
        write_text_atomic(args.output, text + "\n")
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text + "\n")
    return 0
