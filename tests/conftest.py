"""Shared test helpers."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def run_onnx(model, feeds: dict, output_names=None) -> list:
    """Run an onnx ModelProto (or serialized bytes) with onyx.InferenceSession; outputs in order."""
    import onyx

    data = model if isinstance(model, bytes) else model.SerializeToString()
    return onyx.InferenceSession(data).run(output_names, feeds)


#: numpy references of FusedConv's activations with the parameters the conv tests give them
#: (LeakyRelu [0.1], Clip [-0.5, 0.7]).
FUSED_ACTIVATIONS = {
    "Relu": lambda v: np.maximum(v, 0),
    "LeakyRelu": lambda v: np.where(v < 0, 0.1 * v, v),
    "Clip": lambda v: np.clip(v, -0.5, 0.7),
    "Sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "Tanh": np.tanh,
}
