"""onyx merge: two models joined, outputs of the first feeding inputs of the second."""

from __future__ import annotations

import argparse

from ..errors import InvalidArgument

HELP = "merge two models: --map OUT=IN connects an output of the first to an input of the second"

EXAMPLE = """example:
  onyx merge encoder.onnx decoder.onnx merged.onnx --map features=x --prefix1 enc/ --prefix2 dec/
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLE
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("first", help="the model whose outputs feed the second")
    p.add_argument("second", help="the model that reads them")
    p.add_argument("output", help="where to write the merged model")
    p.add_argument(
        "--map",
        action="append",
        required=True,
        metavar="OUT=IN",
        help="connect output OUT of the first to input IN of the second (repeatable)",
    )
    p.add_argument("--prefix1", default=None, help="prefix for the first model's names")
    p.add_argument("--prefix2", default=None, help="prefix for the second model's names")


def main(args) -> int:
    from ..serde import save
    from .compose import merge_models

    io_map = []
    for item in args.map:
        out, sep, inp = item.partition("=")
        if not sep or not out or not inp:
            raise InvalidArgument(f"--map takes OUT=IN, got {item!r}")
        io_map.append((out, inp))
    m = merge_models(args.first, args.second, io_map, prefix1=args.prefix1, prefix2=args.prefix2)
    save(m, args.output)
    print(
        f"wrote {args.output}: {len(m.graph)} nodes, inputs {[v.name for v in m.graph.inputs]}, "
        f"outputs {[v.name for v in m.graph.outputs]}"
    )
    return 0
