"""The long fuzzing run: seeded mutations of onnx's node suite and tests/models, each case in a
forked process with a time and memory limit (tests/fuzz/harness.py), classified, with a summary.

    python scripts/fuzz.py --cases 20000 [--seed 0] [--timeout 20] [--memory-mb 3072]
        [--native 1] [--log fuzz.jsonl] [--summary docs/reliability.md]

Needs the test extra (the onnx package ships the node suite). Every case is written to --log
as one JSON line; the summary (counts per outcome and per mutation, and every bug case with
the stage and the exception) replaces the section between the markers in --summary.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

from fuzz import harness  # noqa: E402

BEGIN, END = "<!-- fuzz summary: begin -->", "<!-- fuzz summary: end -->"


def summary_text(results, by_mutation, args, seconds: float) -> str:
    counts = harness.summarize(results)
    lines = [
        BEGIN,
        f"Run: {len(results)} cases, seed {args.seed}, {args.timeout:.0f} s and {args.memory_mb} MB "
        f"per case, ONYX_NATIVE={args.native}, {seconds / 60:.0f} min on a shared 2-core machine.",
        "",
        "| outcome | cases |",
        "|---|---:|",
        *[
            f"| {o}{' (bug)' if o in harness.BUGS else ''} | {counts[o]} |"
            for o in harness.OUTCOMES
        ],
        "",
        "| mutation | cases | ok | onyx-error | bugs |",
        "|---|---:|---:|---:|---:|",
    ]
    for mut in sorted(by_mutation):
        c = by_mutation[mut]
        bugs = sum(c[o] for o in harness.BUGS)
        lines.append(f"| {mut} | {sum(c.values())} | {c['ok']} | {c['onyx-error']} | {bugs} |")
    bugs = [r for r in results if r.outcome in harness.BUGS]
    if bugs:
        lines += ["", "Bug cases (seed model / mutation / case seed: stage, what):", ""]
        seen = set()
        for r in bugs:
            key = (r.outcome, r.stage, r.detail.split(" @ ")[-1] if r.detail else "")
            if key in seen:
                continue
            seen.add(key)
            lines.append(f"- `{r.case}`: {r.outcome} in {r.stage or '?'}: {r.detail}")
    lines.append(END)
    return "\n".join(lines)


def write_summary(path: str, text: str) -> None:
    old = open(path).read() if os.path.exists(path) else ""
    if BEGIN in old and END in old:
        new = old[: old.index(BEGIN)] + text + old[old.index(END) + len(END) :]
    else:
        new = old.rstrip() + "\n\n" + text + "\n"
    with open(path, "w") as f:
        f.write(new)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--memory-mb", type=int, default=3072)
    ap.add_argument("--native", default="1", help="ONYX_NATIVE for the cases (0: numpy paths)")
    ap.add_argument("--log", default="")
    ap.add_argument("--summary", default="")
    args = ap.parse_args()
    os.environ["ONYX_NATIVE"] = args.native  # read when onyx's native module is imported
    seeds = harness.node_seeds() + harness.model_seeds()
    harness.warm_up(seeds)
    cases = harness.plan(seeds, args.cases, args.seed)
    log = open(args.log, "a") if args.log else None
    results, by_mutation = [], collections.defaultdict(collections.Counter)
    start = time.perf_counter()
    for i, (seed, mutation, case_seed) in enumerate(cases):
        res = harness.run_case(seed, mutation, case_seed, args.timeout, args.memory_mb)
        results.append(res)
        by_mutation[mutation][res.outcome] += 1
        if log:
            log.write(json.dumps(res.__dict__) + "\n")
            log.flush()
        if res.outcome in harness.BUGS:
            print(f"BUG {res}", flush=True)
        if (i + 1) % 500 == 0:
            print(f"{i + 1} cases: {harness.summarize(results)}", flush=True)
    seconds = time.perf_counter() - start
    print(json.dumps(harness.summarize(results)))
    if args.summary:
        write_summary(args.summary, summary_text(results, by_mutation, args, seconds))


if __name__ == "__main__":
    main()
