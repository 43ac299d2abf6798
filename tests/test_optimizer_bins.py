"""BinsOneHotBatching: skl2onnx's KBinsDiscretizer one-hot chains (8 nodes a column) batched
over a column axis give the chains' bits, non-finite inputs and values on the edges included."""

from __future__ import annotations

import numpy as np
import pytest

import onyx
from onyx.optimizer import optimize

pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")
ort = pytest.importorskip("onnxruntime")


def _model(columns: int, bins: int) -> bytes:
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.preprocessing import KBinsDiscretizer

    x = np.random.default_rng(0).standard_normal((200, columns)).astype(np.float32)
    kb = KBinsDiscretizer(n_bins=bins, encode="onehot-dense", strategy="uniform").fit(x)
    onx = skl2onnx.convert_sklearn(
        kb, initial_types=[("X", FloatTensorType([None, columns]))], target_opset=17
    )
    return onx.SerializeToString(), kb.bin_edges_


def _inputs(edges, rows: int = 40) -> np.ndarray:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((rows, len(edges))) * 2).astype(np.float32)
    for j, e in enumerate(edges):  # values on the edges, and non-finite ones
        x[: len(e), j] = e.astype(np.float32)
    x[-1, 0], x[-2, -1], x[-3, 0], x[-4, -1] = np.nan, np.inf, -np.inf, np.nan
    return x


@pytest.mark.parametrize("columns,bins", [(3, 4), (8, 5), (1, 2)])
def test_batched_chains_keep_the_bits(columns, bins):
    model, edges = _model(columns, bins)
    ops = [n.op_type for n in optimize(onyx.loads(model), for_session=True).graph]
    if columns > 1:
        assert ops.count("OneHotEncoder") == 1 and ops.count("Less") == 1
    x = _inputs(edges)
    fast = onyx.InferenceSession(model)
    chains = onyx.InferenceSession(model, disabled_optimizers=["BinsOneHotBatching"])
    for rows in (x, x[:1], x[-4:]):
        got = fast.run(None, {"X": rows})
        for g, w in zip(got, chains.run(None, {"X": rows}), strict=True):
            np.testing.assert_array_equal(g, w)
    finite = x[:-4]
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(fast.run(None, {"X": finite})[0],
                                  oracle.run(None, {"X": finite})[0])  # fmt: skip
