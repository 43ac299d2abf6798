"""Predictor: a model as a function over tabular and array batches.

Every distributed engine needs the same glue around a model: ship it to the workers once, make
one session per worker process, turn columns into tensors and outputs back into columns, split
large batches, and say which row failed. :class:`Predictor` is that glue, with no engine in it;
the adapters (``onyx.batch.spark``, ``.ray``, ``.dask``) only hand it their batches.

A Predictor pickles as the model's bytes and its options. The session is made on first use in
each process and kept in a per-process cache keyed by the model's digest, so every task that a
worker runs for the same model shares one session, however often the engine unpickles the
Predictor.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import ir
from ..errors import InvalidArgument, OnyxError
from ..ir.dtypes import DataType, to_numpy, type_name
from .frames import Columns, read_batch, write_batch

log = logging.getLogger("onyx.batch")

ON_ERROR = ("raise", "null")


class BatchError(OnyxError):
    """A row of a batch could not be scored; ``row`` is its label (a DataFrame's index value,
    else its position in the batch)."""

    def __init__(self, message: str, row: Any = None):
        super().__init__(message)
        self.row = row


@dataclass(frozen=True)
class InputSpec:
    """A model input and the columns that feed it (one column, or several stacked as features)."""

    name: str
    dtype: np.dtype
    dims: tuple  # declared dims: int, a symbolic name, or None
    columns: tuple[str, ...]
    stacked: bool  # several scalar columns -> [N, len(columns)]


@dataclass(frozen=True)
class OutputField:
    """One output column: ``kind`` is "scalar" (one value per row), "array" (one array per row)
    or "map" (a ZipMap output's class -> probability, written as one column per class unless
    the Predictor was made with ``zipmap="dict"``)."""

    column: str
    output: str
    kind: str
    dtype: np.dtype
    key: Any = None  # the class of a per-class column


# -- the per-process session cache ------------------------------------------------------------
_sessions: dict[tuple, Any] = {}
_sessions_lock = threading.Lock()


def _default_session(model_bytes: bytes, options: Any) -> Any:
    from ..runtime.session import InferenceSession

    return InferenceSession(model_bytes, sess_options=options)


def cached_session(digest: str, model_bytes: bytes, options: Any, factory: Callable | None) -> Any:
    """This process's session for the model: made once, then shared by every batch and task."""
    key = (digest, _options_key(options), _factory_key(factory))
    with _sessions_lock:
        session = _sessions.get(key)
        if session is None:
            start = time.perf_counter()
            session = (factory or _default_session)(model_bytes, options)
            _sessions[key] = session
            log.info(
                "pid %d: session for model %s made in %.1f ms",
                os.getpid(),
                digest[:12],
                (time.perf_counter() - start) * 1e3,
            )
        return session


def _factory_key(factory: Callable | None) -> str:
    # by name: an engine may unpickle a new function object for every task (cloudpickle
    # pickles functions of __main__ by value), and each must find the same session
    if factory is None:
        return ""
    return f"{getattr(factory, '__module__', '')}.{getattr(factory, '__qualname__', repr(factory))}"


def _options_key(options: Any) -> str:
    return "" if options is None else repr(vars(options))


class _Throughput:
    """This process's rows scored and the time spent, logged at INFO every ``every`` seconds:
    with one line per worker, a job's log shows each worker's rows/s."""

    def __init__(self, every: float = 30.0):
        self.every = every
        self.rows = 0
        self.seconds = 0.0
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def add(self, rows: int, seconds: float) -> None:
        with self.lock:
            self.rows += rows
            self.seconds += seconds
            now = time.monotonic()
            if now - self.last < self.every:
                return
            self.last = now
            rate = self.rows / self.seconds if self.seconds else 0.0
            log.info(
                "pid %d: %d rows in %.1f s scoring (%.0f rows/s)",
                os.getpid(),
                self.rows,
                self.seconds,
                rate,
            )


_throughput = _Throughput()


# -- the Predictor ------------------------------------------------------------------------------
class Predictor:
    """Score batches with a model.

    ``Predictor(model, input_columns=None, output_columns=None, batch_size=None,
    on_error="raise", zipmap="columns", sess_options=None, session_factory=None)``

    - ``model``: a path, the model's bytes or an ``onyx.ir.Model`` (read once, here).
    - ``input_columns``: by default each model input is fed by the column of its name. A dict
      maps input names to a column, or to a list of scalar columns stacked into ``[N, k]``
      features; a list of columns serves a model with one input.
    - ``output_columns``: by default each output becomes a column of its name; a dict renames
      (and selects) outputs, a list names them in the model's order.
    - ``batch_size``: rows per run (default: the whole batch the engine hands over).
    - ``on_error``: "raise" (a :class:`BatchError` naming the first bad row) or "null" (the
      bad rows' outputs are null and ``error_column`` says why).
    - ``zipmap``: a ZipMap output (scikit-learn classifiers' probabilities) as one column per
      class named ``<output>_<class>`` ("columns") or one column of dicts ("dict").
    - ``session_factory(model_bytes, sess_options)``: makes the session (default: onyx's
      InferenceSession). It must be picklable (a module-level function); benchmarks use it to
      run onnxruntime in the same glue.
    """

    def __init__(
        self,
        model: str | os.PathLike | bytes | ir.Model,
        *,
        input_columns: Mapping[str, str | Sequence[str]] | Sequence[str] | None = None,
        output_columns: Mapping[str, str] | Sequence[str] | None = None,
        batch_size: int | None = None,
        on_error: str = "raise",
        error_column: str = "onyx_error",
        zipmap: str = "columns",
        pad_value: float = 0,
        sess_options: Any = None,
        session_factory: Callable | None = None,
    ):
        if on_error not in ON_ERROR:
            raise InvalidArgument(f"on_error must be one of {ON_ERROR}, not {on_error!r}")
        if zipmap not in ("columns", "dict"):
            raise InvalidArgument(f"zipmap must be 'columns' or 'dict', not {zipmap!r}")
        if batch_size is not None and batch_size < 1:
            raise InvalidArgument(f"batch_size must be at least 1, not {batch_size}")
        self.model_bytes = _model_bytes(model)
        self.digest = hashlib.sha256(self.model_bytes).hexdigest()
        self.input_columns = input_columns
        self.output_columns = output_columns
        self.batch_size = batch_size
        self.on_error = on_error
        self.error_column = error_column
        self.zipmap = zipmap
        self.pad_value = pad_value
        self.sess_options = sess_options
        self.session_factory = session_factory
        self._signature()  # fail here, on the driver, for a bad model or column mapping

    # pickling: the bytes and the options travel; the session and parsed model do not
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_sig", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    @property
    def session(self) -> Any:
        """This process's session for the model (made on first use)."""
        return cached_session(
            self.digest, self.model_bytes, self.sess_options, self.session_factory
        )

    def _signature(self) -> tuple[list[InputSpec], list[OutputField]]:
        sig = self.__dict__.get("_sig")
        if sig is None:
            from ..serde import loads

            graph = loads(self.model_bytes).graph
            if graph is None:
                raise InvalidArgument("the model has no graph")
            sig = (_input_specs(graph, self.input_columns), self._output_fields(graph))
            self._sig = sig
        return sig

    @property
    def inputs(self) -> list[InputSpec]:
        return self._signature()[0]

    @property
    def outputs(self) -> list[OutputField]:
        """The columns a scored batch gains, in order (with the error column under "null")."""
        return self._signature()[1]

    def output_names(self) -> list[str]:
        return list(dict.fromkeys(f.output for f in self.outputs if f.kind != "error"))

    # -- scoring --------------------------------------------------------------------------------
    def __call__(self, batch: Any) -> Any:
        """Score one batch; return it (same kind) with the output columns added."""
        start = time.perf_counter()
        cols = read_batch(batch)
        missing = [c for spec in self.inputs for c in spec.columns if c not in cols.data]
        if missing:
            raise InvalidArgument(
                f"the batch has no column {', '.join(map(repr, missing))} "
                f"(it has {', '.join(cols.data)})"
            )
        for f in self.outputs:
            if f.column in cols.data:
                raise InvalidArgument(
                    f"output column {f.column!r} is already a column of the batch "
                    "(rename it with output_columns=)"
                )
        results = self.predict_columns(cols)
        _throughput.add(cols.n_rows, time.perf_counter() - start)
        return write_batch(cols, results)

    def predict_columns(self, cols: Columns) -> dict[str, np.ndarray]:
        """Output columns (name -> one value per row) for a batch read by ``read_batch``."""
        step = self.batch_size or max(cols.n_rows, 1)
        parts = [
            self._score_rows(cols, np.arange(lo, min(lo + step, cols.n_rows)))
            for lo in range(0, cols.n_rows, step)
        ]
        return _concat_parts(parts, self.outputs, self.on_error == "null", self.error_column)

    def _score_rows(self, cols: Columns, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Run the rows; on failure find the bad rows by halving and raise or null them."""
        try:
            return self._run(cols, rows)
        except (OnyxError, ValueError, TypeError) as error:
            if len(rows) == 1:
                return self._bad_row(cols, int(rows[0]), error)
            if len(rows) == 0:
                raise
        half = len(rows) // 2
        parts = [self._score_rows(cols, rows[:half]), self._score_rows(cols, rows[half:])]
        return _concat_parts(parts, self.outputs, self.on_error == "null", self.error_column)

    def _bad_row(self, cols: Columns, row: int, error: Exception) -> dict[str, np.ndarray]:
        label = cols.label(row)
        message = f"row {label!r}: {error}"
        if self.on_error == "raise":
            raise BatchError(message, row=label) from error
        return {"__failed__": np.array([message], dtype=object)}

    def _run(self, cols: Columns, rows: np.ndarray) -> dict[str, np.ndarray]:
        feeds = {spec.name: self._feed(spec, cols, rows) for spec in self.inputs}
        names = self.output_names()
        values = dict(zip(names, self.session.run(names, feeds)))
        return {f.column: _column_of(f, values.get(f.output), len(rows)) for f in self.outputs}

    def _feed(self, spec: InputSpec, cols: Columns, rows: np.ndarray) -> np.ndarray:
        if spec.stacked:
            parts = [_scalars(cols.data[c][rows], spec, c) for c in spec.columns]
            return _cast(np.stack(parts, axis=1), spec, f"columns {', '.join(spec.columns)}")
        column = spec.columns[0]
        values = cols.data[column][rows]
        if values.dtype == object and len(values) and isinstance(values[0], np.ndarray):
            values = _stack_cells(values, spec, column, self.pad_value)
        values = _unflatten(values, spec)
        return _cast(_fit_rank(values, spec, column), spec, f"column {column!r}")

    def _output_fields(self, graph: ir.Graph) -> list[OutputField]:
        names = _output_names(graph, self.output_columns)
        fields = []
        for value in graph.outputs:
            if value.name in names:
                fields += _fields_of(value, names[value.name], self.zipmap == "dict")
        if self.on_error == "null":
            fields.append(OutputField(self.error_column, "", "error", np.dtype(object)))
        return fields


# -- model signature ----------------------------------------------------------------------------
def _model_bytes(model: Any) -> bytes:
    if isinstance(model, bytes | bytearray | memoryview):
        return bytes(model)
    if isinstance(model, ir.Model):
        from ..serde import dumps

        return dumps(model)
    if isinstance(model, str | os.PathLike):
        try:
            with open(model, "rb") as f:
                return f.read()
        except OSError as e:
            raise InvalidArgument(f"cannot read the model {os.fspath(model)!r}: {e}") from e
    raise InvalidArgument(f"model must be a path, bytes or an onyx.ir.Model, not {type(model)}")


def _model_inputs(graph: ir.Graph) -> list[ir.Value]:
    inits = set(graph.initializers)
    return [v for v in graph.inputs if v.name not in inits]


def _input_specs(graph: ir.Graph, mapping: Any) -> list[InputSpec]:
    inputs = _model_inputs(graph)
    if mapping is None:
        mapping = {v.name: v.name for v in inputs}
    elif not isinstance(mapping, Mapping):
        if len(inputs) != 1:
            raise InvalidArgument(
                "input_columns as a list serves a model with one input; this model has "
                f"{len(inputs)} ({', '.join(v.name for v in inputs)}): pass a dict"
            )
        mapping = {inputs[0].name: list(mapping)}
    unknown = set(mapping) - {v.name for v in inputs}
    if unknown:
        raise InvalidArgument(
            f"input_columns names no model input {sorted(unknown)} "
            f"(model inputs: {', '.join(v.name for v in inputs)})"
        )
    specs = []
    for v in inputs:
        if v.name not in mapping:
            raise InvalidArgument(
                f"no column feeds model input {v.name!r}: add it to input_columns"
            )
        specs.append(_input_spec(v, mapping[v.name]))
    return specs


def _input_spec(value: ir.Value, columns: str | Sequence[str]) -> InputSpec:
    t = value.type
    if not isinstance(t, ir.TensorType):
        raise InvalidArgument(f"model input {value.name!r} is {t}: batches feed tensors only")
    dims = tuple(t.shape.dims) if t.shape is not None else ()
    stacked = not isinstance(columns, str)
    columns = (columns,) if isinstance(columns, str) else tuple(columns)
    if stacked and len(dims) != 2:
        raise InvalidArgument(
            f"model input {value.name!r} has shape {t.shape}: stacking columns needs [N, k]"
        )
    dtype = np.dtype(object) if t.elem_type == DataType.STRING else to_numpy(t.elem_type)
    return InputSpec(value.name, dtype, dims, columns, stacked)


def _output_names(graph: ir.Graph, mapping: Any) -> dict[str, str]:
    outputs = [v.name for v in graph.outputs]
    if mapping is None:
        return {n: n for n in outputs}
    if not isinstance(mapping, Mapping):
        mapping = dict(zip(outputs, mapping))
    unknown = set(mapping) - set(outputs)
    if unknown:
        raise InvalidArgument(
            f"output_columns names no model output {sorted(unknown)} (outputs: {', '.join(outputs)})"
        )
    return dict(mapping)


def _fields_of(value: ir.Value, column: str, zipmap_as_dict: bool) -> list[OutputField]:
    t = value.type
    if isinstance(t, ir.TensorType):
        dims = t.shape.dims if t.shape is not None else (None, None)
        per_row = [d for d in dims[1:] if d != 1]
        kind = "array" if per_row else "scalar"
        dtype = np.dtype(object) if t.elem_type == DataType.STRING else to_numpy(t.elem_type)
        return [OutputField(column, value.name, kind, dtype)]
    if isinstance(t, ir.SequenceType) and isinstance(t.elem, ir.MapType):
        value_type = t.elem.value
        dtype = to_numpy(value_type.elem_type) if isinstance(value_type, ir.TensorType) else None
        dtype = np.dtype(dtype or np.float32)
        if zipmap_as_dict:
            return [OutputField(column, value.name, "map", np.dtype(object))]
        classes = _zipmap_classes(value)
        if classes is None:
            return [OutputField(column, value.name, "map", np.dtype(object))]
        return [OutputField(f"{column}_{c}", value.name, "class", dtype, key=c) for c in classes]
    raise InvalidArgument(f"model output {value.name!r} is {t}: not a column type")


def _zipmap_classes(value: ir.Value) -> list | None:
    node = value.producer
    if node is None or node.op_type != "ZipMap":
        return None
    for name in ("classlabels_int64s", "classlabels_strings"):
        labels = node.attr(name, None)
        if labels:
            return [x.decode() if isinstance(x, bytes) else x for x in labels]
    return None


# -- columns -> tensors -------------------------------------------------------------------------
def _scalars(values: np.ndarray, spec: InputSpec, column: str) -> np.ndarray:
    if values.dtype == object and len(values) and isinstance(values[0], np.ndarray):
        raise InvalidArgument(
            f"column {column!r} holds arrays: stacked feature columns must hold one value a row"
        )
    return values


def _stack_cells(cells: np.ndarray, spec: InputSpec, column: str, pad: float) -> np.ndarray:
    """Rows holding one array each (images, token ids) as one tensor, padded along the dims the
    model leaves free; a row that cannot fit is named."""
    shapes = [c.shape for c in cells]
    target = shapes[0]
    if any(s != target for s in shapes):
        ranks = {len(s) for s in shapes}
        if len(ranks) > 1:
            bad = next(i for i, s in enumerate(shapes) if len(s) != len(target))
            raise InvalidArgument(
                f"column {column!r}: row {bad} has shape {shapes[bad]}, row 0 {target}"
            )
        target = tuple(max(s[i] for s in shapes) for i in range(len(target)))
        fixed = spec.dims[1:] if len(spec.dims) == len(target) + 1 else ()
        for axis, want in enumerate(fixed):
            if isinstance(want, int):
                bad = next((i for i, s in enumerate(shapes) if s[axis] != want), None)
                if bad is not None:
                    raise InvalidArgument(
                        f"column {column!r}: row {bad} has shape {shapes[bad]}, but model input "
                        f"{spec.name!r} fixes dimension {axis + 1} to {want}"
                    )
    out = np.full((len(cells), *target), pad, dtype=_cell_dtype(cells, spec))
    for i, cell in enumerate(cells):
        out[(i, *(slice(0, n) for n in cell.shape))] = cell
    return out


def _unflatten(values: np.ndarray, spec: InputSpec) -> np.ndarray:
    """Flat rows (Arrow and Spark array columns are 1-D lists) take the input's fixed row shape:
    784 numbers a row feed [N, 1, 28, 28]."""
    row = spec.dims[1:]
    if values.ndim != 2 or len(row) < 2 or not all(isinstance(d, int) for d in row):
        return values
    if values.shape[1] != int(np.prod(row)):
        return values
    return values.reshape(len(values), *row)


def _cell_dtype(cells: np.ndarray, spec: InputSpec) -> np.dtype:
    return spec.dtype if spec.dtype != object else cells[0].dtype


def _fit_rank(values: np.ndarray, spec: InputSpec, column: str) -> np.ndarray:
    """A scalar column feeds [N] or [N, 1] inputs (scikit-learn's per-column inputs)."""
    rank = len(spec.dims)
    if values.ndim == rank:
        return values
    if (
        values.ndim == 1
        and rank == 2
        and spec.dims[1] in (1, None)
        or (values.ndim == rank - 1 and spec.dims and spec.dims[-1] == 1)
    ):
        return values.reshape(*values.shape, 1)
    raise InvalidArgument(
        f"column {column!r} gives rows of rank {values.ndim - 1}; model input {spec.name!r} "
        f"wants {list(spec.dims)}"
    )


def _cast(values: np.ndarray, spec: InputSpec, source: str) -> np.ndarray:
    if values.dtype == spec.dtype:
        return values
    if spec.dtype == object:
        return values.astype(str).astype(object)
    if values.dtype == object or values.dtype.kind in "USO":
        try:
            return values.astype(spec.dtype)
        except (TypeError, ValueError) as e:
            raise InvalidArgument(
                f"{source} cannot feed model input {spec.name!r} "
                f"(tensor({type_name(_data_type(spec.dtype))})): {e}"
            ) from e
    return values.astype(spec.dtype)


def _data_type(dtype: np.dtype) -> DataType:
    from ..ir.dtypes import from_numpy

    return from_numpy(dtype)


# -- outputs -> columns -------------------------------------------------------------------------
def _column_of(field: OutputField, value: Any, n_rows: int) -> np.ndarray:
    if field.kind in ("class", "map"):
        if not isinstance(value, list) or len(value) != n_rows:
            raise InvalidArgument(f"output {field.output!r}: expected one map per row")
        if field.kind == "class":
            return np.array([row[field.key] for row in value], dtype=field.dtype)
        cells = np.empty(n_rows, dtype=object)
        cells[:] = [dict(row) for row in value]
        return cells
    if field.kind == "error":
        return np.full(n_rows, None, dtype=object)
    array = np.asarray(value)
    if array.ndim == 0 or array.shape[0] != n_rows:
        raise InvalidArgument(
            f"output {field.output!r} has shape {list(array.shape)}: its first dimension is not "
            f"the batch's {n_rows} rows, so it cannot be a column"
        )
    if field.kind == "scalar" and array.ndim > 1:
        array = array.reshape(n_rows)
    return array


def _null_column(field: OutputField, n_rows: int, message: str) -> np.ndarray:
    if field.kind == "error":
        return np.full(n_rows, message, dtype=object)
    if field.dtype.kind == "f" and field.kind in ("scalar", "class"):
        return np.full(n_rows, np.nan, dtype=field.dtype)
    return np.full(n_rows, None, dtype=object)


def _concat_parts(
    parts: list[dict[str, np.ndarray]], fields: list[OutputField], nullable: bool, error: str
) -> dict[str, np.ndarray]:
    """Join scored parts in row order; a failed part (one bad row) becomes nulls."""
    columns: dict[str, list[np.ndarray]] = {f.column: [] for f in fields}
    for part in parts:
        failed = part.get("__failed__")
        for f in fields:
            if failed is not None:
                columns[f.column].append(_null_column(f, 1, failed[0]))
            else:
                columns[f.column].append(part[f.column])
    return {name: _join(chunks, f) for (name, chunks), f in zip(columns.items(), fields)}


def _join(chunks: list[np.ndarray], field: OutputField) -> np.ndarray:
    if not chunks:
        return _empty_column(field)
    if any(c.dtype == object for c in chunks) and not all(c.dtype == object for c in chunks):
        # a null row among arrays: one cell per row
        cells = np.empty(sum(len(c) for c in chunks), dtype=object)
        cells[:] = [row if c.dtype == object else np.asarray(row) for c in chunks for row in c]
        return cells
    if len({c.shape[1:] for c in chunks}) > 1:
        cells = np.empty(sum(len(c) for c in chunks), dtype=object)
        cells[:] = [row for c in chunks for row in c]
        return cells
    return np.concatenate(chunks)


def _empty_column(field: OutputField) -> np.ndarray:
    if field.kind in ("scalar", "class"):
        return np.empty(0, dtype=field.dtype)
    return np.empty(0, dtype=object)
