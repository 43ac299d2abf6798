"""onyx check: validate a model against the ONNX standard and print every problem."""

from __future__ import annotations

import argparse

HELP = "check a model against the ONNX standard (exit 0 valid, 1 invalid); every problem printed"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--full", action="store_true", help="also run strict shape and type inference")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing when valid")


def main(args) -> int:
    from ..checker import problems

    # given the path, the checker can prove an ordinary model valid without building its IR,
    # and it leaves external data unread (it only needs where the data is)
    found = problems(args.model, full=args.full)
    if not found:
        if not args.quiet:
            print(f"{args.model}: valid")
        return 0
    print(f"{args.model}: {len(found)} problem(s)")
    for p in found:
        print(f"  - {p}")
    return 1
