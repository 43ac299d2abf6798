"""Batch inference: a model as a function over DataFrames, Arrow batches and dicts of arrays,
and thin adapters that run it inside Spark, Ray Data and Dask.

    from onyx.batch import Predictor
    predict = Predictor("model.onnx", batch_size=4096)
    scored = predict(df)                          # pandas / pyarrow / dict -> same kind

    from onyx.batch import spark, ray, dask       # each needs its engine: onyx[spark|ray|dask]
    out = spark.predict(spark_df, "model.onnx")   # mapInPandas, the model broadcast once
    out = ray.predict(dataset, "model.onnx")      # map_batches on an actor pool
    out = dask.predict(dask_df, "model.onnx")     # map_partitions with meta

Only the adapter you import needs its engine; the Predictor itself needs pandas or pyarrow only
for batches of theirs.
"""

from __future__ import annotations

import importlib

from .core import BatchError, OutputField, Predictor

_ADAPTERS = {"spark", "ray", "dask"}


def __getattr__(name: str):
    if name in _ADAPTERS:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BatchError", "OutputField", "Predictor", "spark", "ray", "dask"]
