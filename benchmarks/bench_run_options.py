"""What a RunOptions argument costs: ``sess.run(None, feed)`` vs ``sess.run(None, feed,
RunOptions())`` on the model fixtures. A run given RunOptions runs a copy of the plan whose
steps first check ``terminate`` (session_api.checked_plan); the figure is that check's cost.

    python benchmarks/bench_run_options.py
    python benchmarks/bench_run_options.py --only "bert|mobilenet" --rounds 15

Both variants take turns round by round (time_alternating), so that load from other
processes hurts both alike; medians per call, and the extra time per node.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.common import time_alternating  # noqa: E402

MODELS = ["mobilenet_torchscript_op17", "resnet_torchscript_op17", "bert_dynamo_op18",
          "gpt_dynamo_op18", "lstm_torchscript_op17"]  # fmt: skip


def variants(sess, feed: dict, ro) -> dict:
    return {"plain": lambda: sess.run(None, feed), "ro": lambda: sess.run(None, feed, ro)}


def main() -> None:
    import onyx
    from onyx.debug import make_inputs

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="regex on model names")
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    print(f"{'model':30} {'nodes':>5} {'plain ms':>9} {'RunOptions ms':>14} {'us/node':>8}")
    for name in MODELS:
        if args.only and not re.search(args.only, name):
            continue
        options = onyx.SessionOptions()
        options.intra_op_num_threads = 1  # (one thread: steadier figures on a shared machine)
        sess = onyx.InferenceSession(str(ROOT / "tests" / "models" / f"{name}.onnx"), options)
        feed = make_inputs(sess._model)  # noqa: SLF001 (the model it loaded)
        t = time_alternating(variants(sess, feed, onyx.RunOptions()), args.rounds, 0.05)
        nodes = len(sess.plan.steps)
        extra = (t["ro"] - t["plain"]) / nodes * 1e6
        print(f"{name:30} {nodes:5} {t['plain'] * 1e3:9.3f} {t['ro'] * 1e3:14.3f} {extra:8.2f}")


if __name__ == "__main__":
    main()
