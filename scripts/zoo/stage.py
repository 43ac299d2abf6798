"""What every make_<exporter>.py uses to hand a model to collect.py (no onnxruntime needed).

A staged model is ``<staging>/<exporter>/<name>.onnx`` plus ``<name>.npz`` (its feeds) and
``<name>.json`` (exporter, kind, tolerance, notes). collect.py computes onnxruntime's outputs
in the project's venv, so the exporters' venvs need only their framework and converter.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
STAGING = Path(os.environ.get("ZOO_STAGING", ROOT / "build" / "zoo" / "staging"))


def stage(exporter: str, name: str, model, feeds: dict, kind: str = "float32",
          atol: float | None = None, notes: str = "", framework: list | None = None) -> Path:  # fmt: skip
    """Stage one model: ``model`` a path, bytes or an onnx ModelProto; ``framework``: the
    source framework's outputs, when it ran (compared with onnxruntime's at collection)."""
    out = STAGING / exporter
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.onnx"
    if isinstance(model, str | os.PathLike):
        path.write_bytes(Path(model).read_bytes())
    elif isinstance(model, bytes):
        path.write_bytes(model)
    else:
        path.write_bytes(model.SerializeToString())
    arrays = {f"in:{k}": np.asarray(v) for k, v in feeds.items()}
    for i, v in enumerate(framework or []):
        arrays[f"fw:{i}"] = np.asarray(v)
    np.savez(out / f"{name}.npz", **arrays)
    meta = {"exporter": exporter, "kind": kind, "atol": atol, "notes": notes}
    (out / f"{name}.json").write_text(json.dumps(meta))
    print(f"staged {exporter}/{name}", flush=True)
    return path
