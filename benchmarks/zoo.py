"""The real-model zoos for the benchmark harness and the real-model tests.

Two zoos, both made by scripts/make_zoo.py from the same architectures:

- the fixtures, tests/models/ (committed): tiny widths, what the real-model tests run;
- the benchmark zoo, benchmarks/models/ (gitignored, `python scripts/make_zoo.py --bench`):
  realistic sizes, what benchmarks/run.py measures.

Each folder's manifest.json describes its models: family, exporter, opset, quantization, ops,
and the inputs as (name, dtype, shape with "N" for the batch axis, [low, high) value range).

    from benchmarks.zoo import bench_models, zoo_models
    for m in zoo_models():              # or bench_models(): [] until built
        feeds = m.feeds(batch=8)        # deterministic random feeds
        onyx.InferenceSession(m.path).run(None, feeds)

This module needs numpy only (no torch, onnx or onnxruntime).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ZOO_DIR = Path(__file__).resolve().parent.parent / "tests" / "models"
MANIFEST = ZOO_DIR / "manifest.json"
BENCH_DIR = Path(__file__).resolve().parent / "models"


def make_feeds(inputs: list, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for a manifest entry's input specs, the same for the same (batch, seed).

    Floats are uniform in [low, high); integers (token ids) uniform in [low, high); an input named
    attention_mask is a padding mask: ones, then zeros after a random length of at least one.
    """
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, dtype, shape, (low, high) in inputs:
        shape = [batch if d == "N" else d for d in shape]
        if name == "attention_mask":
            lengths = rng.integers(1, shape[1] + 1, size=shape[0])
            feeds[name] = (np.arange(shape[1])[None, :] < lengths[:, None]).astype(dtype)
        elif np.dtype(dtype).kind in "iu":
            feeds[name] = rng.integers(low, high, size=shape, dtype=dtype)
        else:
            feeds[name] = rng.uniform(low, high, size=shape).astype(dtype)
    return feeds


@dataclass(frozen=True)
class ZooModel:
    name: str
    path: Path
    family: str  # resnet, mobilenet, gpt, llama, bert, lstm, gru, unet
    exporter: str  # torchscript or dynamo
    opset: int  # the ai.onnx opset
    quantization: str | None  # None, "dynamic", "qdq" or "qoperator"
    ort_optimized: str | None  # None, "transformers" or "extended" (carries com.microsoft ops)
    inputs: list
    ops: dict

    def feeds(self, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
        return make_feeds(self.inputs, batch, seed)


def read_manifest(folder: Path) -> list[ZooModel]:
    """The models a folder's manifest.json lists, sorted by name ([] without a manifest)."""
    manifest = folder / "manifest.json"
    if not manifest.exists():
        return []
    return [
        ZooModel(
            name=name,
            path=folder / entry["file"],
            family=entry["family"],
            exporter=entry["exporter"],
            opset=entry["opset"],
            quantization=entry.get("quantization"),
            ort_optimized=entry.get("ort_optimized"),
            inputs=entry["inputs"],
            ops=entry["ops"],
        )
        for name, entry in sorted(json.loads(manifest.read_text()).items())
    ]


def zoo_models(quantized: bool = True, ort_optimized: bool = True) -> list[ZooModel]:
    """Every model of the fixture zoo (tests/models), sorted by name.

    quantized=False leaves out the onnxruntime.quantization outputs; ort_optimized=False the
    models onnxruntime's optimizers rewrote (fused com.microsoft ops).
    """
    return [
        m
        for m in read_manifest(ZOO_DIR)
        if (quantized or m.quantization is None) and (ort_optimized or m.ort_optimized is None)
    ]


def bench_models() -> list[ZooModel]:
    """Every model of the realistic-size benchmark zoo (benchmarks/models), sorted by name;
    [] until `python scripts/make_zoo.py --bench` has built it."""
    return [m for m in read_manifest(BENCH_DIR) if m.path.exists()]


if __name__ == "__main__":
    for title, models in (("fixtures", zoo_models()), ("benchmark zoo", bench_models())):
        print(f"{title}: {len(models)} models")
        for m in models:
            size = m.path.stat().st_size / 1024
            print(
                f"  {m.name:28s} {m.exporter:11s} opset {m.opset:2d} {size:9.1f} KiB  "
                f"{sum(m.ops.values())} nodes"
            )
