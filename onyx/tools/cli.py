"""The ``onyx`` command line. Each subcommand lives in its own module ``onyx/tools/cmd_<name>.py``
exposing ``HELP`` (one line), ``add_arguments(parser)`` and ``main(args) -> int``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import pkgutil
import sys

from .. import __version__
from ..errors import OnyxError


def _commands() -> dict[str, object]:
    from . import __path__ as tools_path

    found = {}
    for info in pkgutil.iter_modules(tools_path):
        if info.name.startswith("cmd_"):
            found[info.name[4:].replace("_", "-")] = importlib.import_module(
                f"{__package__}.{info.name}"
            )
    return dict(sorted(found.items()))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onyx", description="ONNX models: run, check, inspect.")
    parser.add_argument("--version", action="version", version=f"onyx {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in _commands().items():
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(run_command=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if argv is None:  # (the `onyx` command's own process; a caller passing argv keeps its gc)
        # every module the command imported (each subcommand's, for the parser) lives until
        # it exits: the collector need not scan them again (a pass over them fell into
        # `onyx run`'s timed first run of the bundled model, doubling it)
        gc.freeze()
    if not getattr(args, "run_command", None):
        parser.print_help()
        return 2
    try:
        return int(args.run_command(args) or 0)
    except OnyxError as e:
        print(f"onyx {args.command}: error: {e}", file=sys.stderr)
        return 1
    except FileNotFoundError as e:
        print(f"onyx {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
