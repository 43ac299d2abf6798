"""Batches in and out: pandas DataFrames, pyarrow RecordBatches / Tables and dicts of arrays.

A batch is read into a :class:`Columns` (an ordered dict of column name -> numpy array, plus the
row labels to name in errors) and written back as the kind it came in, with output columns
added. pandas and pyarrow are imported only when a batch of theirs arrives, so the core of
onyx needs neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidArgument


@dataclass
class Columns:
    """One batch as numpy columns. ``kind`` says how to write results back; ``labels`` are the
    rows' names for error messages (a DataFrame's index, else positions)."""

    data: dict[str, np.ndarray]
    n_rows: int
    kind: str  # "pandas" | "arrow-batch" | "arrow-table" | "dict"
    source: Any
    labels: Any = None

    def label(self, row: int) -> Any:
        label = row if self.labels is None else self.labels[row]
        return label.item() if isinstance(label, np.generic) else label


def _module_of(obj: Any) -> str:
    return type(obj).__module__.split(".")[0]


def read_batch(batch: Any) -> Columns:
    """A batch of any supported kind as numpy columns (no copy where the column allows)."""
    if isinstance(batch, dict):
        data = {str(k): _as_column(v) for k, v in batch.items()}
        return Columns(data, _row_count(data), "dict", batch)
    module = _module_of(batch)
    if module == "pandas" and hasattr(batch, "columns") and hasattr(batch, "index"):
        data = {str(c): _pandas_column(batch[c]) for c in batch.columns}
        return Columns(data, len(batch), "pandas", batch, labels=batch.index)
    if module == "pyarrow" and hasattr(batch, "schema") and hasattr(batch, "column"):
        data = {name: _arrow_column(batch.column(i)) for i, name in enumerate(batch.schema.names)}
        kind = "arrow-table" if type(batch).__name__ == "Table" else "arrow-batch"
        return Columns(data, batch.num_rows, kind, batch)
    raise InvalidArgument(
        "a batch must be a pandas DataFrame, a pyarrow RecordBatch or Table, or a dict of "
        f"arrays, not {type(batch).__name__}"
    )


def _row_count(data: dict[str, np.ndarray]) -> int:
    counts = {name: len(col) for name, col in data.items()}
    if len(set(counts.values())) > 1:
        raise InvalidArgument(f"the batch's columns differ in length: {counts}")
    return next(iter(counts.values()), 0)


def _as_column(values: Any) -> np.ndarray:
    if isinstance(values, np.ndarray):
        return values
    if isinstance(values, list | tuple):
        return _object_or_array(list(values))
    raise InvalidArgument(f"a column must be an array or a list, not {type(values).__name__}")


def _object_or_array(values: list) -> np.ndarray:
    """A list as an array; rows that are arrays of different shapes stay an object column
    (one cell per row), which the input binding pads or rejects naming the row."""
    if values and isinstance(values[0], list | tuple | np.ndarray):
        out = np.empty(len(values), dtype=object)
        out[:] = [np.asarray(v) for v in values]
        return out
    return np.asarray(values)


def _pandas_column(series: Any) -> np.ndarray:
    if series.dtype == object or str(series.dtype) in ("string", "str"):
        return series.to_numpy(dtype=object)
    return series.to_numpy()


def _arrow_column(column: Any) -> np.ndarray:
    import pyarrow as pa

    t = column.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _object_or_array(column.to_pylist())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return np.asarray(column.to_pylist(), dtype=object)
    return column.to_numpy(zero_copy_only=False)


def write_batch(cols: Columns, outputs: dict[str, np.ndarray]) -> Any:
    """The batch as it came in, with ``outputs`` (column name -> one value per row) added."""
    if cols.kind == "dict":
        result = dict(cols.source)
        result.update(outputs)
        return result
    if cols.kind == "pandas":
        frame = cols.source.copy(deep=False)
        for name, values in outputs.items():
            frame[name] = _for_pandas(values)
        return frame

    batch = cols.source
    for name, values in outputs.items():
        batch = batch.append_column(name, _arrow_array(values))
    return batch


def _for_pandas(values: np.ndarray) -> Any:
    if values.ndim > 1:  # one array per row
        cells = np.empty(len(values), dtype=object)
        cells[:] = list(values)
        return cells
    return values


def _arrow_array(values: np.ndarray) -> Any:
    import pyarrow as pa

    if values.dtype == object:
        cells = list(values)
        if any(isinstance(c, dict) for c in cells):  # ZipMap rows: an Arrow map per row
            return pa.array(
                [None if c is None else list(c.items()) for c in cells], type=_map_type(cells)
            )
        return pa.array(cells)
    if values.ndim > 1:
        flat = pa.array(values.reshape(len(values), -1).ravel())
        return pa.FixedSizeListArray.from_arrays(flat, int(np.prod(values.shape[1:])))
    return pa.array(values)


def _map_type(cells: list) -> Any:
    import pyarrow as pa

    sample = next(c for c in cells if isinstance(c, dict))
    key = pa.string() if isinstance(next(iter(sample), ""), str) else pa.int64()
    return pa.map_(key, pa.float32())
