"""onyx.batch on real local engines: Spark (local mode), Ray (local) and Dask (a LocalCluster of
two worker processes). Each scores the same three workloads (a scikit-learn pipeline with a
string column, a LightGBM classifier with ZipMap, the bundled CNN on an array column) and must
give the rows in-process ``InferenceSession.run`` gives, in the same order."""

from __future__ import annotations

import os
import shutil
import sys

import batch_models as bm
import numpy as np
import pytest

import onyx

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

N_ROWS = 120


@pytest.fixture(scope="module")
def workloads():
    pytest.importorskip("skl2onnx")
    data = bm.table(N_ROWS, seed=5)
    x = bm.features(N_ROWS, seed=6)
    cells = bm.images(24, seed=7)
    pipeline = bm.sklearn_pipeline()
    return [
        # name, model, frame, Predictor options, expected columns
        ("pipeline", pipeline, pd.DataFrame(data), {}, _pipeline_expected(pipeline, data)),
        (
            "lightgbm",
            str(bm.LIGHTGBM),
            pd.DataFrame(x, columns=[f"f{i}" for i in range(6)]),
            {"input_columns": [f"f{i}" for i in range(6)]},
            _lightgbm_expected(x),
        ),
        (
            "cnn",
            str(bm.CNN),
            pd.DataFrame({"row": range(len(cells)), "image": [c.ravel() for c in cells]}),
            {"batch_size": 1, "input_columns": {"image": "image"}},
            {"probabilities": _cnn_expected(cells)},
        ),
    ]


def _run(model, feeds):
    sess = onyx.InferenceSession(model)
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _pipeline_expected(model, data):
    out = _run(model, {k: v.reshape(-1, 1) for k, v in data.items()})
    expected = {"output_label": out["output_label"]}
    for cls in (0, 1, 2):
        expected[f"output_probability_{cls}"] = np.array(
            [r[cls] for r in out["output_probability"]]
        )
    return expected


def _lightgbm_expected(x):
    out = _run(str(bm.LIGHTGBM), {"features": x})
    expected = {"label": out["label"]}
    for cls in (0, 1, 2):
        expected[f"probabilities_{cls}"] = np.array([r[cls] for r in out["probabilities"]])
    return expected


def _cnn_expected(cells):
    sess = onyx.InferenceSession(str(bm.CNN))
    return np.stack([sess.run(None, {"image": c[None]})[0][0] for c in cells])


def _check(name, scored: pd.DataFrame, frame: pd.DataFrame, expected: dict):
    assert len(scored) == len(frame), name
    key = frame.columns[0]
    pd.testing.assert_series_equal(
        scored[key].reset_index(drop=True), frame[key].reset_index(drop=True), check_dtype=False
    )  # the same rows, in the same order
    for column, want in expected.items():
        got = scored[column].to_numpy()
        if want.ndim > 1:
            got = np.stack([np.asarray(v) for v in got])
        np.testing.assert_array_equal(got, want, err_msg=f"{name}: {column}")


# -- Dask -------------------------------------------------------------------------------------
def test_dask_local_cluster_two_workers(workloads):
    pytest.importorskip("distributed")
    import dask
    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    from onyx.batch import dask as onyx_dask

    # Dask turns object columns into strings by default, arrays included (their repr): array
    # columns need this off (docs/distributed.md)
    config = dask.config.set({"dataframe.convert-string": False})
    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    with config, cluster, Client(cluster):
        for name, model, frame, options, expected in workloads:
            ddf = dd.from_pandas(frame, npartitions=4)
            scored = onyx_dask.predict(ddf, model, **options).compute()
            _check(name, scored, frame, expected)


# -- Ray --------------------------------------------------------------------------------------
def test_ray_local_actor_pool(workloads):
    ray = pytest.importorskip("ray")
    from onyx.batch import ray as onyx_ray

    # logical CPUs: two actors hold one each, and the reading tasks need their own
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        for name, model, frame, options, expected in workloads:
            ds = ray.data.from_pandas(frame).repartition(3)
            scored = onyx_ray.predict(
                ds, model, concurrency=2, rows_per_batch=32, **options
            ).to_pandas()
            _check(name, scored, frame, expected)
    finally:
        ray.shutdown()


# -- Spark ------------------------------------------------------------------------------------
def test_spark_local_mode(workloads, monkeypatch):
    pytest.importorskip("pyspark")
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime (.ci/run installs one)")
    from pyspark.sql import SparkSession

    # Spark's Python workers must run this interpreter (the one with onyx and pyarrow)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)

    from onyx.batch import spark as onyx_spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("onyx-batch-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    try:
        for name, model, frame, options, expected in workloads:
            sdf = session.createDataFrame(frame).repartition(3, frame.columns[0])
            sdf = sdf.sortWithinPartitions(frame.columns[0])
            scored = onyx_spark.predict(sdf, model, **options).toPandas()
            scored = scored.sort_values(frame.columns[0], kind="stable").reset_index(drop=True)
            ordered = frame.sort_values(frame.columns[0], kind="stable")
            order = ordered.index.to_numpy()
            _check(
                name,
                scored,
                ordered.reset_index(drop=True),
                {k: v[order] for k, v in expected.items()},
            )
    finally:
        session.stop()
