"""onyx view at scale: the time to build a page (Python) and to open it in headless Chromium
(parse, layout, first drawing), the page's size, and the time of one pan step (at the opening
zoom, and fitted: the whole graph in view), for graphs of
1k to 30k nodes (residual blocks of 5 nodes) and for the transformer exports in tests/models.

    python benchmarks/bench_viewer.py [--sizes 1000,10000,30000] [--repeat 3]

Needs playwright (pip) and Debian's chromium (apt-get install chromium); medians of --repeat.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from test_viewer import BERT, mlp_model  # noqa: E402

import onyx  # noqa: E402

GPT = os.path.join(HERE, "..", "tests", "models", "gpt_dynamo_op18.onnx")


def measure(browser, source, repeat: int) -> dict:
    build, opened, script, layout, pan, overview = [], [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "page.html")
        for _ in range(repeat):
            t = time.perf_counter()
            html = onyx.view(source).html
            build.append(time.perf_counter() - t)
            with open(path, "w", encoding="utf-8") as f:
                f.write(html)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            t = time.perf_counter()
            page.goto("file://" + path)
            page.wait_for_selector("body[data-ready]", timeout=120_000)
            opened.append(time.perf_counter() - t)
            timings = page.evaluate("window.onyxView.timings")
            script.append(timings["total"] / 1000)
            layout.append(timings["layout"] / 1000)
            pan.append(
                page.evaluate(
                    """(() => { const t = performance.now();
                    for (let i = 0; i < 40; i++) window.onyxView.pan(0, -40);
                    return (performance.now() - t) / 40; })()"""
                )
            )
            page.evaluate("window.onyxView.fit()")  # zoomed out: the overview (canvas past 2500)
            overview.append(
                page.evaluate(
                    """(() => { const t = performance.now();
                    for (let i = 0; i < 20; i++) window.onyxView.pan(0, -5);
                    return (performance.now() - t) / 20; })()"""
                )
            )
            page.close()
    nodes = len(onyx.view(source, weight_stats=False).document["graphs"][0]["nodes"])
    return {
        "nodes": nodes,
        "page MB": len(html.encode()) / 1e6,
        "build s": statistics.median(build),
        "open s": statistics.median(opened),
        "script s": statistics.median(script),
        "layout s": statistics.median(layout),
        "pan ms": statistics.median(pan),
        "pan fitted ms": statistics.median(overview),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--sizes", default="1000,10000,30000", help="node counts of the generated graphs"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    cases = [("bert_dynamo_op18", BERT), ("gpt_dynamo_op18", GPT)]
    cases += [(f"blocks {n}", mlp_model(n // 5)) for n in map(int, args.sizes.split(","))]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        rows = [(name, measure(browser, src, args.repeat)) for name, src in cases]
        browser.close()
    keys = list(rows[0][1])
    print("| case | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, r in rows:
        print(f"| {name} | " + " | ".join(f"{r[k]:.3g}" for k in keys) + " |")


if __name__ == "__main__":
    main()
