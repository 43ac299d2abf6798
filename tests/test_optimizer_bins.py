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
        assert ops.count("BinsOneHot") == 1 and "OneHotEncoder" not in ops
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


def test_the_fused_model_runs_its_function_body_elsewhere():
    """The optimized model keeps BinsOneHot's body in standard ops: onnxruntime runs the
    saved model to onyx's answer."""
    model, edges = _model(4, 3)
    saved = onyx.dumps(optimize(onyx.loads(model), for_session=True))
    assert b"BinsOneHot" in saved
    finite = _inputs(edges)[:-4]
    want = onyx.InferenceSession(model).run(None, {"X": finite})
    got = ort.InferenceSession(saved, providers=["CPUExecutionProvider"]).run(None, {"X": finite})
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("fill", [1.0, 0.0, 2.0, -1.0, np.nan])
def test_the_kernel_is_its_body(fill):
    """The one-buffer path gives the body's kernels' bits whatever the ones column holds
    (ArgMax's first maximum, NaN winning), and another layout runs the body's kernels."""
    from onyx.runtime.kernels.ml import preprocess

    rng = np.random.default_rng(4)
    rows, features, n, k = 9, 6, 3, 4
    x = rng.standard_normal((rows, features)).astype(np.float32)
    x[0, 1], x[1, 2], x[2, 0] = np.nan, np.inf, -np.inf
    edges = np.sort(rng.standard_normal((n, k)), axis=1).astype(np.float32)
    edges[1, 2] = x[3, 0]  # (a value on an edge)
    ones = np.ones((rows, 1), np.float32)
    ones[::2] = fill
    columns = np.array([1, 0, 2], np.int64)
    consts = (np.array([2]), np.array([1, n, 1]), np.array([-1, n * (k + 1)]))
    cats = list(range(k + 1))
    got = preprocess.bins_one_hot(x, columns, edges, ones, *consts, cats_int64s=cats)
    cols = preprocess.array_feature_extractor(x, columns)
    want = preprocess._bins_chain(cols, edges, ones, *consts, cats)  # noqa: SLF001
    assert got.dtype == want.dtype and got.shape == want.shape == (rows, n * (k + 1))
    np.testing.assert_array_equal(got, want)
    # edges shared by the columns (1-D): not the layout the pass writes; the body's kernels
    shared = np.broadcast_to(edges[0], (n, k))
    got = preprocess.bins_one_hot(x, columns, edges[0], ones, *consts, cats_int64s=cats)
    want = preprocess.bins_one_hot(x, columns, np.array(shared), ones, *consts, cats_int64s=cats)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError):  # (Concat refuses rows of another count, as the body does)
        preprocess.bins_one_hot(x, columns, edges, ones[:1], *consts, cats_int64s=cats)
