"""PaddlePaddle models through paddle2onnx (``paddle.onnx.export``).

Runs in its own venv (build.sh: paddlepaddle, paddle2onnx). PaddlePaddle writes the dynamic
batch dim as ``dim_value: -1``, which onnxruntime (and onyx) run as a dynamic dim.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import paddle
from paddle import nn
from stage import stage

paddle.seed(0)
RNG = np.random.default_rng(11)


class Vision(nn.Layer):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2D(3, 8, 3, padding=1), nn.BatchNorm2D(8), nn.ReLU(),
            nn.Conv2D(8, 8, 3, padding=1, groups=8), nn.Hardswish(), nn.MaxPool2D(2),
            nn.Conv2D(8, 16, 1), nn.Sigmoid(),
        )  # fmt: skip
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        y = self.body(x)
        y = nn.functional.interpolate(y, size=[16, 16], mode="bilinear")
        return nn.functional.softmax(self.head(y.mean(axis=[2, 3])), axis=-1)


class Sequence(nn.Layer):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(40, 12)
        self.lstm = nn.LSTM(12, 16, direction="bidirect")
        self.norm = nn.LayerNorm(32)
        self.out = nn.Linear(32, 3)

    def forward(self, tokens):
        y, _ = self.lstm(self.emb(tokens))
        return self.out(self.norm(y[:, -1]))


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    models = {
        "vision": (Vision(), {"x": RNG.random((2, 3, 16, 16), dtype=np.float32)}),
        "sequence": (Sequence(), {"tokens": RNG.integers(0, 40, (3, 9)).astype(np.int64)}),
    }
    for name, (layer, feeds) in models.items():
        layer.eval()
        ((k, v),) = feeds.items()
        fw = [layer(paddle.to_tensor(v)).numpy()]
        spec = [paddle.static.InputSpec([None, *v.shape[1:]], str(v.dtype), k)]
        for opset in (11, 17):
            prefix = tmp / f"{name}_{opset}"
            try:
                paddle.onnx.export(layer, str(prefix), input_spec=spec, opset_version=opset)
            except (Exception, SystemExit) as e:  # (paddle2onnx exits on a failed conversion)
                print(f"export failed: {name} opset {opset}: {type(e).__name__}: {e}"[:300])
                continue
            stage("paddle2onnx", f"{name}_op{opset}", f"{prefix}.onnx", feeds, framework=fw)


if __name__ == "__main__":
    main()
