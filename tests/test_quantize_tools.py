"""`onyx quantize` on the command line, the accuracy report and the sensitivity analysis."""

from __future__ import annotations

import importlib
import os

import numpy as np
import pytest

import onyx
from onyx.quantization import evaluate, sensitivity
from onyx.tools.cli import main

make_inputs = importlib.import_module("onyx.debug.compare").make_inputs
TINY_CNN = os.path.join(os.path.dirname(onyx.__file__), "examples", "tiny_cnn.onnx")
RESNET = os.path.join(os.path.dirname(__file__), "models", "resnet_torchscript_op17.onnx")


def write_npz_folder(folder, model, n, seed):
    folder.mkdir()
    for i in range(n):
        np.savez(folder / f"{i:03d}.npz", **make_inputs(model, seed=seed + i))
    return str(folder)


def test_cli_static_with_report(tmp_path, capsys):
    cal = write_npz_folder(tmp_path / "cal", TINY_CNN, 3, 0)
    held = write_npz_folder(tmp_path / "held", TINY_CNN, 2, 100)
    out = str(tmp_path / "q.onnx")
    assert main(["quantize", TINY_CNN, out, "--calibration", cal, "--held-out", held,
                 "--report", "--method", "percentile"]) == 0  # fmt: skip
    captured = capsys.readouterr()
    assert "calibrating [" in captured.err and "3/3" in captured.err
    assert "cosine" in captured.out and "top-1" in captured.out
    assert "latency (onyx, median)" in captured.out and "size:" in captured.out
    q = onyx.load(out)
    assert any(n.op_type == "QuantizeLinear" for n in q.graph)


def test_cli_dynamic_and_qoperator(tmp_path, capsys):
    out = str(tmp_path / "d.onnx")
    assert main(["quantize", RESNET, out, "--mode", "dynamic", "-q"]) == 0
    assert any(n.op_type == "ConvInteger" for n in onyx.load(out).graph)
    out = str(tmp_path / "s.onnx")
    assert main(["quantize", TINY_CNN, out, "--random-calibration", "2", "--format",
                 "qoperator", "-q"]) == 0  # fmt: skip
    assert any(n.op_type == "QLinearConv" for n in onyx.load(out).graph)


def test_cli_errors(tmp_path, capsys):
    assert main(["quantize", TINY_CNN, str(tmp_path / "x.onnx")]) == 1
    assert "needs --calibration" in capsys.readouterr().err
    assert main(["quantize", TINY_CNN, str(tmp_path / "x.onnx"), "--calibration",
                 str(tmp_path / "missing")]) == 1  # fmt: skip
    assert "no such file or folder" in capsys.readouterr().err


def test_report_numbers():
    samples = [make_inputs(TINY_CNN, seed=i) for i in range(3)]
    q = onyx.quantize(TINY_CNN, calibration=samples, progress=False)
    r = evaluate(TINY_CNN, q, samples, latency=False)
    (out,) = r.outputs
    assert 0 < out.mean_abs <= out.max_abs < 0.05
    assert 0.99 < out.cosine <= 1.0 + 1e-9 and out.top1 == 1.0
    same = evaluate(TINY_CNN, TINY_CNN, samples, latency=False).outputs[0]
    assert same.max_abs == 0 and same.cosine == pytest.approx(1.0)


def test_sensitivity_excludes_until_target():
    cal = [make_inputs(RESNET, seed=i) for i in range(2)]
    held = [make_inputs(RESNET, seed=10 + i) for i in range(2)]
    full = sensitivity(RESNET, cal, held, progress=False)
    errors = [e for _, _, e in full.ranking]
    assert errors == sorted(errors, reverse=True) and len(errors) > 10
    target = full.final_error * 0.6
    tight = sensitivity(RESNET, cal, held, target=target, progress=False)
    assert tight.excluded and tight.final_error <= target
    kept = {n.name for n in tight.model.graph}
    for name, _ in tight.excluded:  # excluded nodes read float weights again
        node = next(n for n in tight.model.graph if n.name == name) if name in kept else None
        if node is not None and node.op_type == "Conv":
            assert node.inputs[1].producer is None
    capped = sensitivity(RESNET, cal, held, target=0.0, max_exclude=2, progress=False)
    assert len(capped.excluded) == 2


def test_report_without_onnxruntime(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed
    samples = [make_inputs(TINY_CNN, seed=0)]
    q = onyx.quantize(TINY_CNN, calibration=samples, progress=False)
    r = evaluate(TINY_CNN, q, samples, repeat=2)
    assert set(r.latency) == {"onyx"} and "latency (onyx" in str(r)
