"""onyx.batch.Predictor in one process: columns to tensors and back, every batch kind, ZipMap,
padding, per-row errors, pickling. Each result is checked against InferenceSession.run."""

from __future__ import annotations

import pickle

import batch_models as bm
import numpy as np
import pytest

import onyx
from onyx.batch import BatchError, Predictor
from onyx.batch.core import cached_session

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def pipeline() -> bytes:
    pytest.importorskip("skl2onnx")
    return bm.sklearn_pipeline()


def _direct(model, feeds):
    sess = onyx.InferenceSession(model)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def _pipeline_feeds(data):
    return {k: v.reshape(-1, 1) for k, v in data.items()}


def test_pandas_pipeline_with_strings_matches_session(pipeline):
    data = bm.table(37)
    frame = pd.DataFrame(data)
    scored = Predictor(pipeline, batch_size=10)(frame)
    want = _direct(pipeline, _pipeline_feeds(data))
    assert list(scored.columns[:3]) == ["city", "age", "income"]
    np.testing.assert_array_equal(scored["output_label"].to_numpy(), want["output_label"])
    for cls in (0, 1, 2):
        got = scored[f"output_probability_{cls}"].to_numpy()
        np.testing.assert_array_equal(got, [row[cls] for row in want["output_probability"]])
    assert "output_label" not in frame  # the caller's frame is left alone


def test_dict_and_arrow_batches_give_the_same_columns(pipeline):
    data = bm.table(12, seed=3)
    predictor = Predictor(pipeline, zipmap="dict")
    from_dict = predictor(dict(data))
    columns = {k: list(v) for k, v in data.items()}
    from_batch = predictor(pa.RecordBatch.from_pydict(columns))
    from_table = predictor(pa.table(columns))
    assert isinstance(from_batch, pa.RecordBatch) and isinstance(from_table, pa.Table)
    want = _direct(pipeline, _pipeline_feeds(data))
    for scored in (from_batch, from_table):
        labels = scored.column("output_label").to_numpy()
        np.testing.assert_array_equal(labels, want["output_label"])
        maps = [dict(row) for row in scored.column("output_probability").to_pylist()]
        assert maps == [{k: float(v) for k, v in row.items()} for row in want["output_probability"]]
    np.testing.assert_array_equal(from_dict["output_label"], want["output_label"])
    assert from_dict["output_probability"][0].keys() == {0, 1, 2}


def test_lightgbm_zipmap_columns_and_stacked_features():
    x = bm.features(50, seed=2)
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(6)])
    predictor = Predictor(bm.LIGHTGBM, input_columns=list(frame.columns), batch_size=16)
    scored = predictor(frame)
    want = _direct(str(bm.LIGHTGBM), {"features": x})
    np.testing.assert_array_equal(scored["label"].to_numpy(), want["label"])
    for cls in (0, 1, 2):
        np.testing.assert_array_equal(
            scored[f"probabilities_{cls}"].to_numpy(), [r[cls] for r in want["probabilities"]]
        )
    assert scored["probabilities_0"].dtype == np.float32


def test_cnn_on_an_array_column():
    cells = bm.images(9)
    frame = pd.DataFrame({"id": range(9), "image": cells})
    scored = Predictor(bm.CNN, batch_size=4)(frame)
    # the same batches as the Predictor's: a conv's sums may round differently by batch size
    want = np.concatenate(
        [
            _direct(str(bm.CNN), {"image": np.stack(cells[i : i + 4])})["probabilities"]
            for i in (0, 4, 8)
        ]
    )
    got = np.stack(scored["probabilities"].to_numpy())
    np.testing.assert_array_equal(got, want)


def test_output_columns_rename_and_select(pipeline):
    predictor = Predictor(pipeline, output_columns={"output_label": "label"})
    scored = predictor(pd.DataFrame(bm.table(5)))
    assert list(scored.columns) == ["city", "age", "income", "label"]
    with pytest.raises(onyx.OnyxError, match="already a column"):
        Predictor(pipeline, output_columns={"output_label": "age"})(pd.DataFrame(bm.table(2)))
    with pytest.raises(onyx.OnyxError, match="names no model output"):
        Predictor(pipeline, output_columns={"nope": "x"})


def test_missing_column_and_bad_mapping_are_named(pipeline):
    with pytest.raises(onyx.OnyxError, match="the batch has no column 'city'"):
        Predictor(pipeline)(pd.DataFrame({"age": [1.0], "income": [2.0]}))
    with pytest.raises(onyx.OnyxError, match="names no model input"):
        Predictor(pipeline, input_columns={"town": "city"})
    with pytest.raises(onyx.OnyxError, match="one input"):
        Predictor(pipeline, input_columns=["city", "age"])


def test_bad_row_raises_with_its_index_label():
    x = bm.features(6)
    frame = pd.DataFrame(x, columns=list("abcdef"), index=[10, 11, 12, 13, 14, 15]).astype(object)
    frame.loc[13, "c"] = "not a number"
    predictor = Predictor(bm.LIGHTGBM, input_columns=list("abcdef"))
    with pytest.raises(BatchError, match="row 13") as info:
        predictor(frame)
    assert info.value.row == 13


def test_bad_rows_become_null_with_a_reason():
    x = bm.features(8)
    frame = pd.DataFrame(x, columns=list("abcdef")).astype(object)
    frame.loc[2, "a"] = "bad"
    frame.loc[5, "f"] = "worse"
    scored = Predictor(bm.LIGHTGBM, input_columns=list("abcdef"), on_error="null")(frame)
    errors = scored["onyx_error"].to_numpy()
    assert [i for i, e in enumerate(errors) if not pd.isna(e)] == [2, 5]
    assert "row 2" in errors[2] and "'bad'" in errors[2]
    assert np.isnan(scored["probabilities_1"].to_numpy()[[2, 5]]).all()
    good = [0, 1, 3, 4, 6, 7]
    want = _direct(str(bm.LIGHTGBM), {"features": x[good]})
    np.testing.assert_array_equal(
        scored["probabilities_1"].to_numpy()[good], [r[1] for r in want["probabilities"]]
    )


def _sum_over_time_model() -> bytes:
    """y[N] = ReduceSum(x[N, T]) over T: a model whose second dim is free, for padding."""
    from onyx import ir, serde

    x = ir.Value("tokens", ir.TensorType(ir.DataType.FLOAT, ir.Shape(("N", "T"))))
    axes = ir.Value("axes", const_value=ir.Tensor(np.array([1], np.int64)))
    node = ir.Node("ReduceSum", [x, axes], ["total"], {"keepdims": 0})
    graph = ir.Graph([x], node.outputs, [node], initializers=[axes], name="g")
    node.outputs[0].type = ir.TensorType(ir.DataType.FLOAT, ir.Shape(("N",)))
    return serde.dumps(ir.Model(graph, opset_imports={"": 18}))


def test_ragged_rows_are_padded_where_the_model_allows():
    model = _sum_over_time_model()
    rows = [
        np.array([1, 2, 3], np.float32),
        np.array([4], np.float32),
        np.array([5, 6], np.float32),
    ]
    scored = Predictor(model)({"tokens": rows})
    np.testing.assert_array_equal(scored["total"], [6, 4, 11])


def test_ragged_rows_against_a_fixed_dim_are_named():
    cells = bm.images(3)
    cells[1] = cells[1][:, :20, :]
    with pytest.raises(onyx.OnyxError, match="row 1"):
        Predictor(bm.CNN)({"image": cells})


def test_empty_batch_gives_typed_empty_columns(pipeline):
    scored = Predictor(pipeline)(pd.DataFrame(bm.table(0)))
    assert len(scored) == 0 and "output_probability_1" in scored


def test_pickles_as_bytes_and_shares_one_session_per_process(pipeline):
    predictor = Predictor(pipeline)
    first = predictor.session
    clone = pickle.loads(pickle.dumps(predictor))
    assert "_sig" not in clone.__dict__
    assert clone.session is first  # the per-process cache: one session for the model
    frame = pd.DataFrame(bm.table(7))
    pd.testing.assert_frame_equal(clone(frame), predictor(frame))
    assert cached_session(predictor.digest, pipeline, None, None) is first


def test_bad_options_are_refused(pipeline):
    with pytest.raises(onyx.OnyxError, match="on_error"):
        Predictor(pipeline, on_error="ignore")
    with pytest.raises(onyx.OnyxError, match="batch_size"):
        Predictor(pipeline, batch_size=0)
    with pytest.raises(onyx.OnyxError, match="cannot read the model"):
        Predictor("/nonexistent/model.onnx")
    with pytest.raises(onyx.OnyxError, match="DataFrame"):
        Predictor(pipeline)([1, 2, 3])
