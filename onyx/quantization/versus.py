"""onyx's quantizer against onnxruntime's on the same model and data (needs the ``onnx`` and
``onnxruntime`` packages: a comparison feature, imported lazily, never by onyx itself)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import NotImplementedOp, OnyxError


@dataclass
class Versus:
    model: str
    mode: str
    onyx_error: float  # mean abs output error vs the float model, both run by onnxruntime
    ort_error: float
    parity: float  # max abs difference between onyx and onnxruntime running onyx's model

    @property
    def ratio(self) -> float:
        if self.ort_error == 0:
            return 1.0 if self.onyx_error == 0 else float("inf")
        return self.onyx_error / self.ort_error


def _ort():
    try:
        import onnxruntime
        from onnxruntime import quantization
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise OnyxError(
            "comparing with onnxruntime's quantizer needs onnxruntime and onnx "
            "(pip install onnxruntime onnx)"
        ) from e
    return onnxruntime, quantization


class _Reader:
    def __init__(self, feeds):
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)


def ort_quantize(
    path: str,
    out: str,
    mode: str,
    calibration: list[dict],
    per_channel: bool,
    op_types: list[str] | None,
) -> None:
    _, q = _ort()
    if mode == "dynamic":
        q.quantize_dynamic(
            path,
            out,
            per_channel=per_channel,
            weight_type=q.QuantType.QInt8,
            op_types_to_quantize=op_types,
        )
    else:
        q.quantize_static(
            path,
            out,
            _Reader(calibration),
            quant_format=q.QuantFormat.QDQ,
            per_channel=per_channel,
            activation_type=q.QuantType.QUInt8,
            weight_type=q.QuantType.QInt8,
            op_types_to_quantize=op_types,
        )


def versus(
    path: str,
    mode: str,
    calibration: list[dict],
    held_out: list[dict],
    per_channel: bool = True,
    op_types: list[str] | None = None,
    **options: Any,
) -> Versus:
    """Quantize ``path`` with both tools (onnxruntime's on its own pre-processing) and measure
    each result's mean abs error against the float model, all run in onnxruntime."""
    from .. import save
    from . import quantize
    from .report import run_onyx

    ort, _ = _ort()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    with tempfile.TemporaryDirectory() as tmp:
        mine = quantize(
            path,
            mode=mode,
            calibration=calibration,
            per_channel=per_channel,
            op_types=op_types,
            progress=False,
            **options,
        )
        mine_path = os.path.join(tmp, "onyx.onnx")
        save(mine, mine_path)
        theirs_path = os.path.join(tmp, "ort.onnx")
        ort_quantize(path, theirs_path, mode, calibration, per_channel, op_types)
        sessions = [ort.InferenceSession(p, so) for p in (path, mine_path, theirs_path)]
        names = [o.name for o in sessions[0].get_outputs()]
        runs = [[s.run(names, f) for f in held_out] for s in sessions]
        try:
            onyx_runs = run_onyx(mine, held_out)
        except NotImplementedOp:  # an operator onyx has no kernel for yet: no parity figure
            onyx_runs = None
    ref, a, b = runs

    def err(got):
        return float(
            np.mean(
                [np.mean(np.abs(np.asarray(x[0], np.float64) - y[0])) for x, y in zip(got, ref)]
            )
        )

    parity = float("nan")
    if onyx_runs is not None:
        parity = max(
            float(np.max(np.abs(np.asarray(r[names[0]], np.float64) - o[0]), initial=0.0))
            for r, o in zip(onyx_runs, a)
        )
    return Versus(os.path.basename(path), mode, err(a), err(b), parity)
