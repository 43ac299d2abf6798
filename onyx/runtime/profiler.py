"""Per-node timing written as a Chrome trace (chrome://tracing, Perfetto), as onnxruntime does."""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import Any

from .values import describe


class Profiler:
    def __init__(self, prefix: str):
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        self.path = f"{prefix}_{stamp}.json"
        self.origin = time.perf_counter()
        self.events: list[dict[str, Any]] = []

    def _us(self, t: float) -> int:
        return int((t - self.origin) * 1e6)

    def span(self, cat: str, name: str, start: float, end: float, **args: Any) -> None:
        self.events.append(
            {
                "cat": cat,
                "name": name,
                "ph": "X",
                "pid": os.getpid(),
                "tid": 0,
                "ts": self._us(start),
                "dur": max(0, self._us(end) - self._us(start)),
                "args": args,
            }
        )

    def node(self, step, start: float, end: float, inputs, outputs) -> None:
        node = step.node
        self.span(
            "Node",
            node.name or f"{node.op_type}_{len(self.events)}",
            start,
            end,
            op_name=node.op_type,
            provider="CPUExecutionProvider",
            input_type_shape=[describe(v) for v in inputs],
            output_type_shape=[describe(v) for v in outputs],
        )

    def write(self) -> str:
        import json  # (profiling only: not at every import)

        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.events, f)
        os.replace(tmp, self.path)
        return self.path
