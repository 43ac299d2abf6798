"""Dask: score a DataFrame with ``map_partitions``; the Predictor is one task of the graph, so
each worker receives the model once and makes one session for all its partitions.

    from onyx.batch import dask
    scored = dask.predict(ddf, "model.onnx").compute()
"""

from __future__ import annotations

from typing import Any

from ._engine import as_predictor, empty_frame, require
from .core import Predictor


def _score(frame: Any, predictor: Predictor) -> Any:
    return predictor(frame)


def predict(ddf: Any, model: Any, **options: Any) -> Any:
    """``ddf`` with the model's output columns added (a lazy Dask DataFrame); ``options`` are
    the Predictor's."""
    dask = require("dask")
    predictor = as_predictor(model, options)
    shipped = dask.delayed(predictor, pure=True, traverse=False)
    meta = empty_frame(predictor, ddf._meta)  # noqa: SLF001 (Dask documents _meta)
    return ddf.map_partitions(_score, shipped, meta=meta, align_dataframes=False)
