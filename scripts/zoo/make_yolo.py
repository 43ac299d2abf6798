"""Ultralytics YOLO built from its yaml (random weights, no download), exported with and
without NMS, static and dynamic shapes.

Runs in its own venv (build.sh: torch, torchvision, ultralytics, onnx, onnxslim). The export
runs offline: ultralytics reads only the packaged yaml.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import traceback
from pathlib import Path

os.environ.setdefault("YOLO_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from stage import stage  # noqa: E402

RNG = np.random.default_rng(17)


def _framework(weights: Path, image: np.ndarray) -> list | None:
    """The PyTorch model's own first output (boxes and scores, as the export's output0)."""
    from ultralytics import YOLO

    net = YOLO(str(weights)).model.float().eval()
    with torch.no_grad():
        out = net(torch.from_numpy(image))
    first = out[0] if isinstance(out, list | tuple) else out
    return [first.numpy()] if isinstance(first, torch.Tensor) else None


def main() -> None:
    from ultralytics import YOLO

    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp())
    image = RNG.random((1, 3, 160, 160), dtype=np.float32)
    variants = {
        "detect_static": ("yolov8n.yaml", {"imgsz": 160}),
        "detect_dynamic": ("yolov8n.yaml", {"imgsz": 160, "dynamic": True}),
        # NMS with conf=1e-5: the random weights' class scores stay under 2e-4, so the default
        # 0.25 would keep no box and leave NonMaxSuppression nothing to rank
        "detect_nms": ("yolov8n.yaml", {"imgsz": 160, "nms": True, "conf": 1e-5}),
        "detect_nms_dynamic": (
            "yolov8n.yaml",
            {"imgsz": 160, "nms": True, "dynamic": True, "conf": 1e-5},
        ),
        "yolo11_segment": ("yolo11n-seg.yaml", {"imgsz": 160}),
        "yolo11_pose_dynamic": ("yolo11n-pose.yaml", {"imgsz": 160, "dynamic": True}),
    }
    for name, (yaml, kwargs) in variants.items():
        try:
            model = YOLO(yaml)
            src = tmp / f"{name}.pt"
            model.save(src)
            out = YOLO(str(src)).export(format="onnx", simplify=True, opset=17, **kwargs)
            path = tmp / f"{name}.onnx"
            shutil.move(out, path)
        except Exception:
            print(
                f"export failed: {name}: {traceback.format_exc(limit=2).strip().splitlines()[-1]}"
            )
            continue
        # with NMS the export's output0 is the kept boxes, not the network's raw predictions
        framework = None if kwargs.get("nms") else _framework(src, image)
        stage("ultralytics", name, path, {"images": image}, framework=framework)


if __name__ == "__main__":
    main()
