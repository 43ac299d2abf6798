"""Spark: score a DataFrame with ``mapInPandas``; the Predictor (the model's bytes) is broadcast
once, and each Python worker makes one session, reused by every partition it scores.

    from onyx.batch import spark
    scored = spark.predict(df, "model.onnx", input_columns={"input": ["a", "b", "c"]})
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._engine import as_predictor, require
from .core import OutputField, Predictor


def predict(
    df: Any, model: Any, *, max_records_per_batch: int | None = None, **options: Any
) -> Any:
    """``df`` with the model's output columns added (a lazy Spark DataFrame).

    ``model``: a path, bytes, an onyx.ir.Model or a :class:`Predictor`; ``options`` are the
    Predictor's. ``max_records_per_batch`` sets Arrow's batch size for this job."""
    require("pyspark")
    predictor = as_predictor(model, options)
    session = df.sparkSession
    if max_records_per_batch:
        session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(max_records_per_batch))
    shipped = session.sparkContext.broadcast(predictor)
    return df.mapInPandas(_scorer(shipped), schema=output_schema(df.schema, predictor))


def _scorer(shipped: Any):
    def score(frames: Iterator[Any]) -> Iterator[Any]:
        predictor = shipped.value
        for frame in frames:
            yield predictor(frame)

    return score


def output_schema(schema: Any, predictor: Predictor) -> Any:
    """The input schema with one field per output column."""
    types = require("pyspark.sql.types")
    fields = list(schema.fields)
    for f in predictor.outputs:
        fields.append(types.StructField(f.column, _spark_type(types, f), nullable=True))
    return types.StructType(fields)


_SCALARS = {
    "f4": "FloatType",
    "f8": "DoubleType",
    "i1": "ByteType",
    "i2": "ShortType",
    "i4": "IntegerType",
    "i8": "LongType",
    "u1": "ShortType",
    "u2": "IntegerType",
    "u4": "LongType",
    "b1": "BooleanType",
}


def _spark_type(types: Any, field: OutputField) -> Any:
    if field.kind == "error" or field.dtype.kind == "O" and field.kind == "scalar":
        return types.StringType()
    if field.kind == "map":
        return types.MapType(types.StringType(), types.FloatType())
    name = _SCALARS.get(field.dtype.str[1:], "DoubleType")
    scalar = getattr(types, name)()
    return types.ArrayType(scalar) if field.kind == "array" else scalar
