"""ai.onnx.ml preprocessing: scaling, encoders, lookups, and conversions between maps and tensors."""

from __future__ import annotations

import functools

import numpy as np

from ....utils import unique
from ... import native
from ...registry import op
from ...values import FreshList
from ..derived import derived, from_attributes, prepared
from . import _common
from ._common import as_2d, row_max, row_sum

ML = "ai.onnx.ml"


def _is_string(x: np.ndarray) -> bool:
    return x.dtype == object or x.dtype.kind in "US"


def _lookup(keys, values, default, x: np.ndarray, last_wins: bool = True) -> np.ndarray:
    """Map each element of x through keys -> values, else default.

    Of repeated keys the last one wins (LabelEncoder v4 says so), or the first.

    Vectorized with a sorted key table; float NaN keys match any NaN.
    """
    keys, values = np.asarray(keys), np.asarray(values)
    return _LookupTable(keys, values, last_wins, _is_string(keys) or _is_string(x))(x, default)


class _LookupTable:
    """keys -> values as a sorted key table, built once where the keys are a node's attributes
    (see one_hot_encoder): sorting them was most of a one-row call."""

    def __init__(self, keys: np.ndarray, values: np.ndarray, last_wins: bool, string: bool):
        self.string, self.values = string, values
        self.keys = keys.astype(str) if string else keys
        self.out_dtype = object if _is_string(values) else values.dtype
        if self.keys.size == 0:
            return
        # np.unique keeps the first occurrence: run it on the reversed keys to keep the last.
        if last_wins:
            keys, values = self.keys[::-1], values[::-1]
        else:
            keys = self.keys
        self.unique, first = np.unique(keys, return_index=True)
        self.table = values[first]
        self.nan_last = not string and keys.dtype.kind == "f" and bool(np.isnan(self.unique[-1]))

    def __call__(self, x: np.ndarray, default) -> np.ndarray:
        if self.string:
            x = np.asarray(x).astype(str)
        if self.keys.size == 0:
            return np.full(x.shape, default, dtype=self.out_dtype)
        unique, table = self.unique, self.table
        pos = np.minimum(_sorted_position(unique, x), unique.size - 1)
        found = unique[pos] == x
        out = np.where(found, table[pos], np.asarray(default, dtype=self.out_dtype))
        if self.nan_last:
            out = np.where(np.isnan(x), table[-1], out)
        return out.astype(self.out_dtype, copy=False)


def _sorted_position(unique: np.ndarray, x: np.ndarray) -> np.ndarray:
    """np.searchsorted(unique, x); for a small x, trees.c's, which keeps the GIL (numpy's
    lets it go at every call, whatever its size: _common.row_argmax's comment), while other
    threads run (_common.other_threads)."""
    pos = native.sorted_position(unique, x) if _common.other_threads() else None
    return np.searchsorted(unique, x) if pos is None else pos


#: whether a kept table serves string or numeric inputs (the keys' form differs)
_STRING_INPUT, _NUMBER_INPUT = object(), object()


def _node_table(kernel, attributes: tuple, x, keys_and_values, last_wins=True) -> _LookupTable:
    """The _LookupTable of ``keys_and_values()``, built once per node (its attribute objects,
    see from_attributes) and per kind of input: sorting the keys was most of a one-row call
    (an IsolationForest runs two LabelEncoders per tree)."""
    string_x = _is_string(x)

    def build():
        keys, values = keys_and_values()
        return _LookupTable(keys, values, last_wins, _is_string(keys) or string_x)

    tag = _STRING_INPUT if string_x else _NUMBER_INPUT
    return from_attributes((kernel, tag, *attributes), build)


def bound_scaler(attrs: dict):
    """Scaler bound to its node: offset and scale as float32 arrays once."""
    offset = np.asarray(attrs["offset"] or [0.0], np.float32)
    scale = np.asarray(attrs["scale"] or [1.0], np.float32)

    def call(x):
        y = np.subtract(x.astype(np.float32, copy=False), offset)  # (a fresh array)
        if y.ndim and scale.size in (1, y.shape[-1]):
            return np.multiply(y, scale, out=y)
        return y * scale

    return call


@op("Scaler", since=1, domain=ML)
@prepared(bound_scaler)
def scaler(x, *, scale=None, offset=None):
    # onnxruntime computes in float: (float(x) - offset) * scale.
    x = x.astype(np.float32)
    offset = np.asarray(offset if offset is not None and len(offset) else [0.0], np.float32)
    scale = np.asarray(scale if scale is not None and len(scale) else [1.0], np.float32)
    return ((x - offset) * scale).astype(np.float32)


# Each row's divisor (x.max and x.sum over the last axis, without their wrappers).
NORMS = {
    "MAX": row_max,
    "L1": lambda x: row_sum(np.abs(x)),
    # onnxruntime keeps the sign (x / ||x||), which is what scikit-learn's Normalizer does.
    "L2": lambda x: np.sqrt(row_sum(x * x)),
}


@op("Normalizer", since=1, domain=ML)
def normalizer(x, *, norm="MAX"):
    if norm not in NORMS:
        raise ValueError(f"Normalizer: unknown norm {norm!r}")
    if x.__class__ is np.ndarray and x.dtype == np.float32 and x.ndim == 2 and x.shape[0]:
        y = native.normalize_rows(x, norm)  # (trees.c: one pass a row, numpy's bits)
        if y is not None:
            return y
    x = x.astype(np.float32)  # (a copy: divided in place)
    divisor = NORMS[norm](x)
    # "if the divisor is zero, Y == X" (no zero divisor, the common case: a plain division,
    # the same quotients; a masked one cost a one-row call a third of its time)
    if np.count_nonzero(divisor) == divisor.size:
        return np.divide(x, divisor, out=x)
    return np.divide(x, divisor, out=x, where=divisor != 0)


@op("Binarizer", since=1, domain=ML)
def binarizer(x, *, threshold=0.0):
    return (x > np.asarray(threshold).astype(x.dtype)).astype(x.dtype)


@op("Imputer", since=1, domain=ML)
def imputer(
    x,
    *,
    replaced_value_int64=0,
    imputed_value_int64s=None,
    replaced_value_float=0.0,
    imputed_value_floats=None,
):
    if x.dtype.kind == "f":
        imputed = np.asarray(imputed_value_floats or [], np.float32)
        replaced = np.float32(replaced_value_float)
        hit = np.isnan(x) if np.isnan(replaced) else x == replaced
    else:
        imputed = np.asarray(imputed_value_int64s or [], np.int64)
        hit = x == replaced_value_int64
    if imputed.size not in (1, x.shape[-1] if x.ndim else 1):
        raise ValueError(f"Imputer: {imputed.size} imputed values for {x.shape[-1]} features")
    return np.where(hit, imputed.astype(x.dtype), x)


def _one_hot_model(attrs: dict):
    """OneHotEncoder bound to its node: distinct integer categories compare numeric rows with
    them directly (the lookup table's answer: a row's column is its category's); other
    inputs and categories take the kernel."""
    zeros, cats_strings, cats_int64s = attrs["zeros"], attrs["cats_strings"], attrs["cats_int64s"]
    cats = np.asarray(cats_int64s or [], np.int64)
    if cats_strings or unique(cats).size != cats.size:
        return lambda x: one_hot_encoder(x, **attrs)

    def encode(x):
        if _is_string(x):
            return one_hot_encoder(x, **attrs)
        # (floats are truncated to integers; an int64 x is compared as it is)
        hot = x.astype(np.int64, copy=False)[..., None] == cats
        if not zeros and not hot.any(axis=-1).all():
            raise ValueError("OneHotEncoder: an input value is not among the categories (zeros=0)")
        return hot.astype(np.float32)

    return encode


@op("OneHotEncoder", since=1, domain=ML)
@prepared(_one_hot_model)
def one_hot_encoder(x, *, zeros=1, cats_strings=None, cats_int64s=None):
    if cats_strings:
        values = x
    else:
        values = x if _is_string(x) else x.astype(np.int64)  # floats are truncated to integers
    lookup = _node_table(
        one_hot_encoder,
        (cats_strings, cats_int64s),
        values,
        lambda: _categories(cats_strings, cats_int64s),
    )
    pos = lookup(values, -1)
    if not zeros and np.any(pos < 0):
        raise ValueError("OneHotEncoder: an input value is not among the categories (zeros=0)")
    return (pos[..., None] == lookup.values).astype(np.float32)


def _categories(cats_strings, cats_int64s) -> tuple[np.ndarray, np.ndarray]:
    """OneHotEncoder's categories -> their column."""
    if cats_strings:
        cats = np.asarray(cats_strings, dtype=object)
    else:
        cats = np.asarray(cats_int64s or [], np.int64)
    return cats, np.arange(cats.size)


@op("LabelEncoder", since=1, domain=ML)
def label_encoder_1(x, *, default_string="_Unused", default_int64=-1, classes_strings=None):
    classes = np.asarray(classes_strings or [], dtype=object)
    if _is_string(x):
        return _lookup(classes, np.arange(classes.size, dtype=np.int64), default_int64, x)
    return _lookup(np.arange(classes.size, dtype=np.int64), classes, default_string, x)


def _typed(ints, floats, strings, tensor=None):
    """The one keys_*/values_* attribute that is set, as a typed array."""
    if tensor is not None:
        return np.asarray(tensor).reshape(-1)
    if strings is not None:
        return np.asarray(strings, dtype=object)
    if floats is not None:
        return np.asarray(floats, np.float32)
    if ints is not None:
        return np.asarray(ints, np.int64)
    raise ValueError("LabelEncoder: no keys_*/values_* attribute is set")


def _default_for(values, default_tensor, default_int64, default_float, default_string):
    if default_tensor is not None:
        return np.asarray(default_tensor).reshape(-1)[0]
    if _is_string(values):
        return default_string
    if values.dtype.kind == "f":
        return default_float
    return default_int64


@op("LabelEncoder", since=2, domain=ML)
def label_encoder_2(
    x,
    *,
    default_int64=-1,
    default_float=-0.0,
    default_string="_Unused",
    keys_int64s=None,
    keys_floats=None,
    keys_strings=None,
    values_int64s=None,
    values_floats=None,
    values_strings=None,
):
    attributes = (
        keys_int64s,
        keys_floats,
        keys_strings,
        values_int64s,
        values_floats,
        values_strings,
    )
    # v2 does not say which of repeated keys wins: onnxruntime keeps the first.
    table = _node_table(
        label_encoder_2,
        attributes,
        x,
        lambda: (
            _typed(keys_int64s, keys_floats, keys_strings),
            _typed(values_int64s, values_floats, values_strings),
        ),
        last_wins=False,
    )
    default = _default_for(table.values, None, default_int64, default_float, default_string)
    return table(x, default)


@op("LabelEncoder", since=4, domain=ML)
def label_encoder_4(
    x,
    *,
    default_tensor=None,
    default_int64=-1,
    default_float=-0.0,
    default_string="_Unused",
    keys_int64s=None,
    keys_floats=None,
    keys_strings=None,
    keys_tensor=None,
    values_int64s=None,
    values_floats=None,
    values_strings=None,
    values_tensor=None,
):
    attributes = (
        keys_int64s,
        keys_floats,
        keys_strings,
        keys_tensor,
        values_int64s,
        values_floats,
        values_strings,
        values_tensor,
    )
    table = _node_table(
        label_encoder_4,
        attributes,
        x,
        lambda: (
            _typed(keys_int64s, keys_floats, keys_strings, keys_tensor),
            _typed(values_int64s, values_floats, values_strings, values_tensor),
        ),
    )
    default = _default_for(
        table.values, default_tensor, default_int64, default_float, default_string
    )
    return table(x, default)


@op("CategoryMapper", since=1, domain=ML)
def category_mapper(
    x, *, default_int64=-1, default_string="_Unused", cats_int64s=None, cats_strings=None
):
    ints = np.asarray(cats_int64s or [], np.int64)
    strings = np.asarray(cats_strings or [], dtype=object)
    if _is_string(x):
        return _lookup(strings, ints, default_int64, x)
    return _lookup(ints, strings, default_string, x)


@op("DictVectorizer", since=1, domain=ML)
def dict_vectorizer(x, *, int64_vocabulary=None, string_vocabulary=None):
    """A map -> [1, V] (as onnxruntime shapes it); a sequence of maps -> [N, V]."""
    vocabulary = string_vocabulary if string_vocabulary else list(int64_vocabulary or [])
    rows = x if isinstance(x, list) else [x]
    position = {k: i for i, k in enumerate(vocabulary)}
    values = [v for row in rows for v in row.values()]
    dtype = np.asarray(values).dtype if values else np.float32
    if dtype.kind in "US":
        dtype = np.dtype(object)
    out = np.zeros((len(rows), len(vocabulary)), dtype=dtype)
    if dtype.kind == "O":
        out[:] = ""
    for r, row in enumerate(rows):  # one pass over the map items: maps are Python dicts
        cols = [position.get(k, -1) for k in row]
        keep = [i for i, c in enumerate(cols) if c >= 0]
        if keep:
            vals = list(row.values())
            out[r, [cols[i] for i in keep]] = [vals[i] for i in keep]
    return out


@op("FeatureVectorizer", since=1, domain=ML)
def feature_vectorizer(*inputs, inputdimensions=None):
    dims = list(inputdimensions or [])
    parts = []
    for i, x in enumerate(inputs):
        x = as_2d(x).astype(np.float32)
        width = dims[i] if i < len(dims) else x.shape[1]
        # Each input fills exactly its declared width: truncate or zero-pad.
        part = np.zeros((x.shape[0], width), np.float32)
        part[:, : min(width, x.shape[1])] = x[:, :width]
        parts.append(part)
    return np.concatenate(parts, axis=1)


def _feature_indices(y) -> tuple[np.ndarray, int, int]:
    """ArrayFeatureExtractor's indices, flat int64, with their least and greatest."""
    indices = np.asarray(y, np.int64).reshape(-1)
    if not indices.size:
        return indices, 0, 0
    return indices, int(indices.min()), int(indices.max())


#: Elements up to which ArrayFeatureExtractor copies its columns by slices, keeping the GIL
#: (take and fancy indexing let it go at every call: row_argmax's comment)
SMALL_TAKE = 1024


def _take_columns(x: np.ndarray, indices: np.ndarray, y) -> np.ndarray:
    """x.take(indices, axis=-1) (indices checked in range): for a small x whose indices step
    evenly (one column, a range), a copy of a slice, which keeps the GIL."""
    if x.size > SMALL_TAKE or not indices.size or x.ndim == 0:
        return x.take(indices, axis=-1)
    step = derived(y, ("feature slice",), lambda: _even_slice(indices))
    if step is None:
        return x.take(indices, axis=-1)
    return x[..., step].copy()


def _even_slice(indices: np.ndarray) -> slice | None:
    """The slice that picks ``indices`` (in range, not empty) in order, if one does."""
    first = int(indices[0])
    step = int(indices[1]) - first if indices.size > 1 else 1
    if step < 1 or not np.array_equal(indices, np.arange(indices.size) * step + first):
        return None
    return slice(first, first + step * (indices.size - 1) + 1, step)


@op("ArrayFeatureExtractor", since=1, domain=ML)
def array_feature_extractor(x, y):
    # (y is mostly an initializer: its flattened form and bounds are kept per array)
    indices, low, high = derived(y, ("feature indices",), lambda: _feature_indices(y))
    if indices.size and (low < 0 or high >= x.shape[-1]):
        raise IndexError(f"ArrayFeatureExtractor: index out of range [0, {x.shape[-1]})")
    out = _take_columns(x, indices, y)
    # onnxruntime returns [1, K] for a 1-D input.
    return out.reshape(1, -1) if x.ndim <= 1 else out


CAST_TO = {"TO_FLOAT": np.float32, "TO_INT64": np.int64, "TO_STRING": object}


@op("CastMap", since=1, domain=ML)
def cast_map(x, *, max_map=1, map_form="DENSE", cast_to="TO_FLOAT"):
    keys = np.asarray(sorted(x), np.int64)
    values = np.asarray([x[k] for k in keys.tolist()])
    dtype = CAST_TO[cast_to]
    if dtype is object:
        # Numbers print as C's std::to_string does ("%f"), as onnxruntime writes them.
        values = values.astype(object) if _is_string(values) else np.char.mod("%f", values)
        values = np.asarray(values, dtype=object)
    else:
        values = values.astype(np.float64 if _is_string(values) else values.dtype).astype(dtype)
    if map_form == "DENSE":
        return values.reshape(1, -1)
    if map_form != "SPARSE":
        raise ValueError(f"CastMap: unknown map_form {map_form!r}")
    out = np.full(max_map, "" if dtype is object else 0, dtype=dtype)
    inside = (keys >= 0) & (keys < max_map)
    out[keys[inside]] = values[inside]
    return out.reshape(1, -1)


def _bound_zip_map(attrs: dict):
    """ZipMap bound to its node: its labels and row builder found once (at one row, finding
    them was a third of the call)."""
    strings, ints = attrs["classlabels_strings"], attrs["classlabels_int64s"]
    labels = list(strings) if strings else list(ints or [])
    n = len(labels)
    rows = _row_dicts(*labels) if n <= _DISPLAY_LABELS else None

    def call(x):
        if x.__class__ is not np.ndarray or x.ndim != 2:
            x = as_2d(x)
        if x.shape[1] != n:
            raise ValueError(f"ZipMap: {x.shape[1]} columns for {n} labels")
        if rows is None:
            return FreshList([dict(zip(labels, row)) for row in x.tolist()])
        return rows(x.tolist())

    return call


@op("ZipMap", since=1, domain=ML)
@prepared(_bound_zip_map)
def zip_map(x, *, classlabels_int64s=None, classlabels_strings=None):
    """[N, C] scores -> a list of N dicts {label: score} (onnxruntime's seq(map))."""
    return _bound_zip_map(
        {"classlabels_int64s": classlabels_int64s, "classlabels_strings": classlabels_strings}
    )(x)


#: labels up to which ZipMap builds each row's dict as one dict display (BUILD_MAP: half the
#: time of dict(zip(...)) a row)
_DISPLAY_LABELS = 64


@functools.lru_cache(maxsize=64, typed=True)  # (typed: each label keeps its own type)
def _row_dicts(*labels):
    """``f(rows)``: FreshList([{labels[0]: row[0], ...} for row in rows]), the labels the
    function's globals (passing them as arguments, and making the FreshList apart, cost a
    one-row call a third of its time)."""
    n = len(labels)
    keys, values = [f"k{i}" for i in range(n)], [f"v{i}" for i in range(n)]
    pairs = ", ".join(f"{k}: {v}" for k, v in zip(keys, values))
    row = f"{', '.join(values)}," if n else "()"
    source = "def row_dicts(rows):\n"
    source += f"    return _FreshList([{{{pairs}}} for {row} in rows])\n"
    namespace: dict = {"_FreshList": FreshList, **dict(zip(keys, labels))}
    exec(source, namespace)
    return namespace["row_dicts"]


# ---------------------------------------------------------------------------------------------
# BinsOneHot: KBinsDiscretizer's batched one-hot chain as one kernel (optimizer/bins.py)


@op("BinsOneHot", since=1, domain="ai.onyx")
def bins_one_hot(features, columns, edges, ones, axes, expand, shape, *, cats_int64s):
    """Reshape(OneHotEncoder(ArgMax(Concat(Cast(Less(Unsqueeze(AFE(features, columns), axes),
    edges)), Expand(Unsqueeze(ones, axes), expand)), axis=2)), shape): the chain optimizer/bins.py
    batches, its function body. The layout the pass writes (edges [n, k], ones [N, 1]
    float32, categories 0..k) takes one buffer: Less writes its 0.0 / 1.0 where Cast put them
    and the ones column lands where Concat put it, so ArgMax and the one-hot compare read
    the chain's values (its twelve steps were half a one-row pipeline's run). Any other
    layout runs the chain's kernels one after the other."""
    cols = array_feature_extractor(features, columns)
    if not _bins_layout(cols, edges, ones, axes, expand, shape, cats_int64s):
        return _bins_chain(cols, edges, ones, axes, expand, shape, cats_int64s)
    n, k = edges.shape
    if cols.shape[0] and n * (k + 1):  # (trees.c: the same rules, one pass)
        out = native.bins_one_hot(cols, edges, ones)
        if out is not None:
            return out
    # ArgMax over [Less's 0.0 / 1.0 ..., v]: where v is 1 (the ones column: x * 0 + 1 of a
    # finite x), the first 1 of the row with v last, so the first True of the booleans with
    # True last; other rows (v NaN: an infinite x) take the floats, as the chain builds them
    below = np.empty((*cols.shape, k + 1), np.bool_)
    np.less(cols[..., None], edges, out=below[..., :k])
    below[..., k] = True
    bins = np.argmax(below, axis=2)
    odd = ones[:, 0] != 1
    if odd.any():
        joined = below[odd].astype(np.float32)
        joined[..., k] = ones[odd]
        bins[odd] = np.argmax(joined, axis=2)
    # (the compare's 1.0 / 0.0, Cast's: rows of the identity)
    return _identity(k + 1).take(bins, axis=0).reshape(-1, n * (k + 1))


@functools.lru_cache(maxsize=64)
def _identity(n: int) -> np.ndarray:
    eye = np.eye(n, dtype=np.float32)
    eye.flags.writeable = False
    return eye


def _bins_layout(cols, edges, ones, axes, expand, shape, cats) -> bool:
    """Whether the inputs have the layout bins.py writes (what the one-buffer path assumes)."""
    if cols.ndim != 2 or edges.ndim != 2 or cols.shape[1] != edges.shape[0]:
        return False
    n, k = edges.shape
    try:  # (a 0-d array's tolist is a number: no match)
        sizes = (axes.tolist(), expand.tolist(), shape.tolist())
    except AttributeError:
        return False
    return (
        sizes == ([2], [1, n, 1], [-1, n * (k + 1)])
        and cols.dtype in _BIN_FLOATS
        and edges.dtype is cols.dtype
        and ones.__class__ is np.ndarray
        and ones.dtype is _BIN_FLOATS[0]
        and ones.shape == (cols.shape[0], 1)
        and cats == list(range(k + 1))
    )


#: the feature types the one-buffer path takes (other dtype objects: the body's kernels)
_BIN_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _bins_chain(cols, edges, ones, axes, expand, shape, cats) -> np.ndarray:
    """The function body's kernels, one after the other (their opset 13 forms)."""
    from ...registry import lookup

    def k(op_type: str):
        return lookup(op_type, "", 13).fn

    below = k("Cast")(k("Less")(k("Unsqueeze")(cols, axes), edges), to=1)
    column = k("Expand")(k("Unsqueeze")(ones, axes), expand)
    bins = k("ArgMax")(k("Concat")(below, column, axis=2), axis=2, keepdims=0)
    return k("Reshape")(one_hot_encoder(bins, cats_int64s=cats), shape)
