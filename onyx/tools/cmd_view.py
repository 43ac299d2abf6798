"""onyx view: draw a model as one self-contained HTML page, optionally with a run on top."""

from __future__ import annotations

import argparse
import sys

HELP = "draw a model as an HTML page (with --run: value statistics and node times; --compare)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--out", "-o", help="write the page here (and do not open a browser)")
    p.add_argument("--run", action="store_true", help="run the model and show what it computed")
    p.add_argument("--inputs", metavar="IN.npz", help="inputs of the run (random data otherwise)")
    p.add_argument(
        "--compare",
        metavar="onnxruntime|OTHER.onnx",
        help="colour nodes by their error against onnxruntime or another model (implies --run)",
    )
    p.add_argument("--serve", action="store_true", help="serve the page on localhost instead")
    p.add_argument("--port", type=int, default=0, help="port of --serve (default: any free one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument(
        "--no-weight-stats", action="store_true", help="skip the initializers' statistics"
    )


def main(args) -> int:
    from .viewer import view

    page = view(
        args.model,
        run=args.run,
        inputs=args.inputs,
        compare=args.compare,
        weight_stats=not args.no_weight_stats,
        seed=args.seed,
    )
    for note in page.document.get("notes", []):  # the page shows them too
        print(f"onyx view: warning: {note}", file=sys.stderr)
    if args.serve:
        return _serve(page, args.port)
    if args.out:
        print(page.save(args.out))
        return 0
    print(page.open())
    return 0


def _serve(page, port: int) -> int:
    import webbrowser

    server = page.serve(port=port)
    print(f"serving {server.url} (Ctrl-C stops)", flush=True)
    webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
