"""The exporter zoo (tests/models/zoo, made by scripts/zoo/build.sh): onyx against the
onnxruntime outputs stored beside each model.

float32: rtol 1e-3 / atol 1e-4; fp16: 1e-2; quantized: one quantization step of drift (the
manifest's atol, or one integer unit); integer and string outputs exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from onyx.runtime.session import InferenceSession, SessionOptions

ZOO = Path(__file__).parent / "models" / "zoo"
MANIFEST = json.loads((ZOO / "manifest.json").read_text()) if ZOO.exists() else {}
TOLERANCES = {"float32": (1e-3, 1e-4), "fp16": (1e-2, 1e-2), "quantized": (0.0, 1e-2)}


def _expected(data) -> list:
    outs = {}
    for k in data.files:
        if not k.startswith("out:"):
            continue
        i, *rest = k[4:].split(":")
        if rest == ["keys"]:
            continue
        if rest == ["zipmap"]:
            keys = data[f"out:{i}:keys"].tolist()
            outs[int(i)] = [dict(zip(keys, row)) for row in data[k].tolist()]
        else:
            outs[int(i)] = data[k]
    return [outs[i] for i in sorted(outs)]


def _check_output(i: int, expected, actual, kind: str, atol) -> None:
    rtol, default_atol = TOLERANCES[kind]
    atol = default_atol if atol is None else atol
    if isinstance(expected, list):  # ZipMap: a list of {label: probability}
        assert len(actual) == len(expected)
        for e, a in zip(expected, actual):
            assert set(a) == set(e)
            np.testing.assert_allclose([a[k] for k in e], [e[k] for k in e], rtol=rtol, atol=atol)
        return
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, f"output {i}"
    assert actual.dtype == expected.dtype, f"output {i}"
    if expected.dtype.kind in "OUSb":
        np.testing.assert_array_equal(actual, expected)
    elif expected.dtype.kind in "iu":
        slack = 1 if kind == "quantized" else 0  # a quantization step of drift
        diff = np.abs(actual.astype(np.int64) - expected.astype(np.int64)).max(initial=0)
        assert diff <= slack, f"output {i}: integers differ by {diff}"
    else:
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, err_msg=f"output {i}")  # fmt: skip


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_zoo_model_matches_onnxruntime(name):
    entry = MANIFEST[name]
    with np.load(ZOO / entry["data"], allow_pickle=True) as data:
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
        expected = _expected(data)
    options = SessionOptions()
    options.intra_op_num_threads = 1  # the references were computed on one thread
    actual = InferenceSession(str(ZOO / entry["file"]), options).run(None, feeds)
    assert len(actual) == len(expected)
    for i, (e, a) in enumerate(zip(expected, actual)):
        _check_output(i, e, a, entry["kind"], entry.get("atol"))


def test_zoo_covers_the_exporters():
    exporters = {entry["exporter"] for entry in MANIFEST.values()}
    assert {
        "skl2onnx",
        "torch-torchscript",
        "torch-dynamo",
        "ort-quant-dynamic",
        "ort-quant-static",
        "fp16-converter",
    } <= exporters
