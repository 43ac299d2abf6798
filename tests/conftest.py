"""Shared test helpers."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def run_onnx(model, feeds: dict) -> list:
    """Run an onnx ModelProto with onyx and return its outputs in graph order.

    Tests call this rather than a runtime API directly, so the runtime behind it can change.
    """
    from node_harness import Runner

    runner = Runner(model)
    graph = model.graph
    init_names = {t.name for t in graph.initializer}
    inputs = [feeds[i.name] for i in graph.input if i.name not in init_names]
    return runner.run_graph(graph, inputs)
