"""Shared test helpers."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def run_onnx(model, feeds: dict, output_names=None) -> list:
    """Run an onnx ModelProto (or serialized bytes) with onyx.InferenceSession; outputs in order."""
    import onyx

    data = model if isinstance(model, bytes) else model.SerializeToString()
    return onyx.InferenceSession(data).run(output_names, feeds)
