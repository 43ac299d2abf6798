"""What the engine adapters share: importing an optional engine with a clear error, and making
the Predictor from a model or reusing one."""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import OnyxError
from .core import Predictor

EXTRAS = {"pyspark": "spark", "ray": "ray", "dask": "dask", "distributed": "dask"}


def require(module: str) -> Any:
    """Import an engine, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        raise OnyxError(
            f"{top} is not installed: pip install 'onyx[{EXTRAS.get(top, top)}]' ({e})"
        ) from e


def as_predictor(model: Any, options: dict) -> Predictor:
    if isinstance(model, Predictor):
        if options:
            raise OnyxError("pass options to the Predictor, or a model and options, not both")
        return model
    return Predictor(model, **options)


def empty_frame(predictor: Predictor, columns: Any) -> Any:
    """A zero-row pandas frame with the input's columns and the outputs' dtypes (Dask's meta)."""
    import pandas as pd

    frame = columns.iloc[:0].copy() if hasattr(columns, "iloc") else pd.DataFrame()
    for f in predictor.outputs:
        frame[f.column] = pd.Series([], dtype=f.dtype if f.dtype.kind in "biuf" else object)
    return frame
