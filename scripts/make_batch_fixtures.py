"""Make the batch-inference test fixtures: a LightGBM classifier (tests/models/batch/).

LightGBM and onnxmltools are not test dependencies, so the converted model is committed (a few
KB). Run in a venv that has them:

    python -m venv /tmp/lgbm && /tmp/lgbm/bin/pip install -e . lightgbm onnxmltools
    /tmp/lgbm/bin/python scripts/make_batch_fixtures.py

The data is seeded, so the model is the same on every run of the same library versions.
"""

from __future__ import annotations

import pathlib

import numpy as np

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "models" / "batch"


def lightgbm_classifier() -> bytes:
    import lightgbm
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType

    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 6)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(np.int64) + (x[:, 3] > 1)
    model = lightgbm.LGBMClassifier(n_estimators=20, num_leaves=8, verbose=-1).fit(x, y)
    onx = convert_lightgbm(
        model,
        initial_types=[("features", FloatTensorType([None, 6]))],
        target_opset=15,
        zipmap=True,
    )
    return onx.SerializeToString()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "lightgbm_classifier.onnx").write_bytes(lightgbm_classifier())
    print("wrote", OUT / "lightgbm_classifier.onnx")


if __name__ == "__main__":
    main()
