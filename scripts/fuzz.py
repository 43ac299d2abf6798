"""The long fuzzing run: seeded mutations of onnx's node suite and tests/models, each case in a
forked process with a time and memory limit (tests/fuzz/harness.py), classified, with a summary.

    python scripts/fuzz.py --cases 20000 [--seed 0] [--timeout 20] [--memory-mb 3072]
        [--native 1] [--jobs 2] [--log fuzz.jsonl] [--summary docs/reliability.md]

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
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

from fuzz import harness  # noqa: E402

BEGIN, END = "<!-- fuzz summary: begin -->", "<!-- fuzz summary: end -->"


def concurrency_check(runs: int) -> list[str]:
    """One session shared by 8 threads against the same runs on 1 thread, per model, with new
    threads each round (first runs counted) and with long-lived ones, as a server keeps
    (benchmarks/bench_concurrency.py's alternating rounds)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import bench_concurrency

    import onyx

    if runs <= 0:
        return []
    header = bench_concurrency.HEADER.format(runs=runs, n=8)
    rows = ["", header, "|---|" + "---:|" * (header.count("|") - 2)]
    for name in bench_concurrency.MODELS:
        path = os.path.join(ROOT, "tests", "models", name + ".onnx")
        sess = onyx.InferenceSession(path)
        feeds = bench_concurrency.feeds_for(sess, path=path)  # (a zoo model's own feeds)
        for warm, kind in ((False, "new threads"), (True, "long-lived threads")):
            result = bench_concurrency.compare(sess, feeds, runs, warm=warm)
            rows.append(bench_concurrency.row(f"{name}, {kind}", result))
    return rows


def write_failure_check(cases: int) -> list[str]:
    """Saves with external data over an existing pair, a random write or rename failing: the
    pair on disk must be the old one or the new one, and the error a SaveError."""
    import errno

    import numpy as np

    import onyx
    from onyx.serde import saving

    rng = harness.random.Random(0)
    violations = raised = 0
    if cases <= 0:
        return []
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        base = onyx.load(os.path.join(ROOT, "tests", "models", "resnet_dynamo_op18.onnx"))
        onyx.save(base, path, external_data=True, size_threshold=0)
        current = 0.0
        for i in range(cases):
            model = onyx.load(path)
            for v in model.graph.initializers.values():
                arr = v.const_value.numpy()
                if arr.dtype == np.float32 and arr.size:
                    v.const_value = onyx.ir.Tensor(np.full_like(arr, float(i + 1)), name=v.name)
            fail_at, calls = rng.randint(1, 5), {"n": 0}  # writes, then renames; 5: none
            real_write, real_replace = saving.write_chunks, saving.os.replace

            def write(out, chunks, fail_at=fail_at, calls=calls, real=real_write):
                calls["n"] += 1
                if calls["n"] == fail_at:
                    raise OSError(errno.ENOSPC, "No space left on device")
                real(out, chunks)

            def replace(a, b, fail_at=fail_at, calls=calls, real=real_replace):
                calls["n"] += 1
                if calls["n"] == fail_at:
                    raise OSError(errno.EIO, "I/O error")
                real(a, b)

            saving.write_chunks, saving.os.replace = write, replace
            try:
                onyx.save(model, path, external_data=True, size_threshold=0)
                current = float(i + 1)
            except onyx.SaveError:
                raised += 1
            finally:
                saving.write_chunks, saving.os.replace = real_write, real_replace
            values = {float(v.const_value.numpy().flat[0]) for v in onyx.load(path).graph.initializers.values()
                      if v.const_value.numpy().dtype == np.float32 and v.const_value.numpy().size}  # fmt: skip
            violations += values != {current} and current != 0.0
    return ["", f"Injected write failures: {cases} saves of a ResNet with external data over the "
            f"previous pair, a random write or rename failing: {raised} SaveErrors, "
            f"{violations} mixed or corrupt pairs."]  # fmt: skip


def summary_text(results, by_mutation, args, seconds: float, extra=()) -> str:
    counts = harness.summarize(results)
    lines = [
        BEGIN,
        f"Run: {len(results)} cases, seed {args.seed}, {args.timeout:.0f} s and {args.memory_mb} MB "
        f"per case, ONYX_NATIVE={args.native}, {max(1, args.jobs)} at a time, {seconds / 60:.0f} min "
        f"on a shared 2-core machine{args.commit}.",
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
            where = r.detail.split(" @ ")[-1] if r.detail else ""
            # (one line per place in onyx; outside it, "?", one per kind of failure)
            key = (r.outcome, r.stage, where if where != "?" else r.detail[:40])
            if key in seen:
                continue
            seen.add(key)
            lines.append(f"- `{r.case}`: {r.outcome} in {r.stage or '?'}: {r.detail}")
    lines += list(extra)
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


def run_cases(cases, args, log, tag: str = "") -> list:
    """The cases one after another (each in its own forked process), logged as JSON lines."""
    results = []
    for i, (seed, mutation, case_seed) in enumerate(cases):
        res = harness.run_case(seed, mutation, case_seed, args.timeout, args.memory_mb)
        results.append(res)
        log.write(json.dumps(res.__dict__) + "\n")
        log.flush()
        if res.outcome in harness.BUGS:
            print(f"BUG {res}", flush=True)
        if (i + 1) % 500 == 0:
            print(f"{tag}{i + 1} cases: {harness.summarize(results)}", flush=True)
    return results


def run_sharded(cases, args) -> list:
    """The cases in ``args.jobs`` forked workers (worker k runs cases k, k + jobs, ...; each
    case still in its own process with its own time and memory limit), their results in the
    plan's order, appended to --log."""
    jobs = max(1, args.jobs)
    with tempfile.TemporaryDirectory() as d:
        parts = [os.path.join(d, f"{k}.jsonl") for k in range(jobs)]
        workers = []
        for k in range(jobs):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    with open(parts[k], "w") as log:
                        run_cases(cases[k::jobs], args, log, f"[worker {k}] ")
                    code = 0
                finally:
                    os._exit(code)
            workers.append(pid)
        for pid in workers:
            _, status = os.waitpid(pid, 0)
            if not os.WIFEXITED(status) or os.WEXITSTATUS(status):
                raise SystemExit(f"a fuzz worker failed (status {status})")
        shards = [[harness.Result(**json.loads(x)) for x in open(p)] for p in parts]
    results = [shards[i % jobs][i // jobs] for i in range(len(cases))]
    if args.log:
        with open(args.log, "a") as log:
            log.writelines(json.dumps(r.__dict__) + "\n" for r in results)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--memory-mb", type=int, default=3072)
    ap.add_argument("--native", default="1", help="ONYX_NATIVE for the cases (0: numpy paths)")
    ap.add_argument("--log", default="")
    ap.add_argument("--summary", default="")
    ap.add_argument("--concurrency-runs", type=int, default=400)
    ap.add_argument("--save-cases", type=int, default=50)
    ap.add_argument("--commit", default="", help="text after the machine, e.g. ', commit abc'")
    ap.add_argument("--case", action="append", default=[], help="seed/mutation/case seed")
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once (forked workers)")
    ap.add_argument("--only", default="", help="comma-separated mutations: only these drawn")
    args = ap.parse_args()
    os.environ["ONYX_NATIVE"] = args.native  # read when onyx's native module is imported
    seeds = harness.node_seeds() + harness.model_seeds()
    harness.warm_up(seeds)
    only = [m for m in args.only.split(",") if m]
    cases = harness.plan(seeds, args.cases, args.seed, only or None)
    if args.case:  # only these cases, again (after a fix)
        named = {s.name: s for s in seeds}
        cases = [(named[n], m, int(c)) for n, m, c in (x.rsplit("/", 2) for x in args.case)]
    start = time.perf_counter()
    results = run_sharded(cases, args)
    by_mutation = collections.defaultdict(collections.Counter)
    for (_, mutation, _), res in zip(cases, results):
        by_mutation[mutation][res.outcome] += 1
    seconds = time.perf_counter() - start
    print(json.dumps(harness.summarize(results)))
    extra = write_failure_check(args.save_cases) + concurrency_check(args.concurrency_runs)
    print("\n".join(extra))
    if args.summary:
        write_summary(args.summary, summary_text(results, by_mutation, args, seconds, extra))


if __name__ == "__main__":
    main()
