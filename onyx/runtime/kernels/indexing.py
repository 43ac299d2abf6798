"""Indexing: Slice, Gather*, Scatter*, TensorScatter, OneHot, NonZero, TopK, Unique, Compress,
ReverseSequence, Pad."""

from __future__ import annotations

import math

import numpy as np

from ..registry import binds, op
from .mapped import LARGE_TABLE_BYTES, take_rows


def _ints(x) -> list[int]:
    if type(x) is np.ndarray:
        return x.reshape(-1).tolist()  # one C call: the hot path of every index input
    return [int(v) for v in np.asarray(x).reshape(-1)]


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def _wrap(indices: np.ndarray, dim: int) -> np.ndarray:
    """Negative indices count from the back; anything left out of [0, dim) is an error."""
    indices = np.where(indices < 0, indices + dim, indices)
    if indices.size and (indices.min() < 0 or indices.max() >= dim):
        raise IndexError(f"index out of bounds for a dimension of size {dim}")
    return indices


def _along(axis: int, n: int, rank: int) -> np.ndarray:
    """arange(n) shaped to broadcast along ``axis`` of a rank-``rank`` array."""
    return np.arange(n).reshape([n if d == axis else 1 for d in range(rank)])


def _sort_key(x: np.ndarray) -> np.ndarray:
    # ml_dtypes (bfloat16, float8, int4, ...) sort through float32, which holds them exactly
    return x.astype(np.float32) if x.dtype.kind == "V" else x


# --- Slice ---------------------------------------------------------------------------------------


def _slice(data: np.ndarray, starts, ends, axes=None, steps=None) -> np.ndarray:
    starts, ends = _ints(starts), _ints(ends)
    axes = list(range(len(starts))) if axes is None else _ints(axes)
    steps = [1] * len(starts) if steps is None else _ints(steps)
    index = [slice(None)] * data.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = _axis(axis, data.ndim)
        dim = data.shape[axis]
        if step == 0:
            raise ValueError("Slice: step cannot be 0")
        start += dim if start < 0 else 0
        end += dim if end < 0 else 0
        # the spec's clamping; an end of -1 with a negative step means "past the first element"
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        index[axis] = slice(start, end if end >= 0 else None, step)
    return data[tuple(index)]


@op("Slice", since=1)
def slice_1(data, *, starts, ends, axes=None):
    return _slice(data, starts, ends, axes)


@op("Slice", since=10)
def slice_(data, starts, ends, axes=None, steps=None):
    return _slice(data, starts, ends, axes, steps)


# --- Gather --------------------------------------------------------------------------------------


@op("Gather", since=1)
def gather(data, indices, *, axis=0):
    axis = _axis(axis, data.ndim)
    if indices.ndim == 0 and data.ndim > 1:
        # one index: a view of the slab (BERT's TorchScript export splits q/k/v this way)
        i, n = int(indices), data.shape[axis]
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
        return data[(slice(None),) * axis + (i,)]
    if axis == 0 and data.nbytes >= LARGE_TABLE_BYTES and not data.flags.writeable:
        # (an embedding table in a mapped file; a small table's Gather pays one compare)
        rows = take_rows(data, indices)
        if rows is not None:
            return rows
    # take's default mode='raise' is the spec: negative indices count from the back, anything
    # out of [-dim, dim) is an error
    return np.asarray(np.take(data, indices, axis=axis))


@op("GatherElements", since=11)
def gather_elements(data, indices, *, axis=0):
    axis = _axis(axis, data.ndim)
    return np.take_along_axis(data, _wrap(indices, data.shape[axis]), axis=axis)


@op("GatherND", since=11)
def gather_nd(data, indices, *, batch_dims=0):
    k = indices.shape[-1]
    batch_shape = data.shape[:batch_dims]
    nb = int(np.prod(batch_shape, dtype=np.int64))
    # flatten the batch dims: data (B, d...), indices (B, Q, k)
    flat = data.reshape((nb,) + data.shape[batch_dims:])
    idx = indices.reshape(nb, -1, k)
    q = idx.shape[1]
    where = [np.broadcast_to(np.arange(nb)[:, None], (nb, q))]
    where += [_wrap(idx[..., j], flat.shape[1 + j]) for j in range(k)]
    gathered = flat[tuple(where)]  # (B, Q, rest...)
    return gathered.reshape(batch_shape + indices.shape[batch_dims:-1] + flat.shape[1 + k :])


# --- Scatter -------------------------------------------------------------------------------------

_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(data: np.ndarray, where: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    out = data.copy()
    if reduction == "none":
        out[where] = updates  # duplicate indices are undefined by the spec; the last one wins
    elif reduction in _REDUCTIONS:
        _REDUCTIONS[reduction].at(out, where, updates)  # unbuffered: duplicates all apply
    else:
        raise ValueError(f"unknown reduction {reduction!r}")
    return out


def _scatter_elements(data, indices, updates, axis: int, reduction: str) -> np.ndarray:
    axis = _axis(axis, data.ndim)
    where = tuple(
        _wrap(indices, data.shape[axis]) if d == axis else _along(d, n, indices.ndim)
        for d, n in enumerate(indices.shape)
    )
    return _scatter(data, where, updates, reduction)


@op("Scatter", since=9)
def scatter(data, indices, updates, *, axis=0):
    return _scatter_elements(data, indices, updates, axis, "none")


@op("ScatterElements", since=11)
def scatter_elements(data, indices, updates, *, axis=0, reduction="none"):
    return _scatter_elements(data, indices, updates, axis, reduction)


@op("ScatterND", since=11)
def scatter_nd(data, indices, updates, *, reduction="none"):
    k = indices.shape[-1]
    where = tuple(_wrap(indices[..., j], data.shape[j]) for j in range(k))
    return _scatter(data, where, updates, reduction)


@op("TensorScatter", since=24)
def tensor_scatter(past_cache, update, write_indices=None, *, mode="linear", axis=-2):
    axis = _axis(axis, past_cache.ndim)
    if axis == 0:
        raise ValueError("TensorScatter: axis cannot be the batch axis")
    batch, max_len, seq_len = past_cache.shape[0], past_cache.shape[axis], update.shape[axis]
    start = np.zeros(batch, np.int64) if write_indices is None else write_indices.astype(np.int64)
    pos = start[:, None] + np.arange(seq_len)[None, :]  # (batch, seq_len) cache positions
    if mode == "circular":
        pos %= max_len
    elif mode != "linear":
        raise ValueError(f"TensorScatter: unknown mode {mode!r}")
    if pos.size and (pos.min() < 0 or pos.max() >= max_len):
        raise IndexError("TensorScatter: write past the end of the cache")
    out = past_cache.copy()
    # with the sequence axis moved next to the batch axis, one fancy assignment writes all
    view = np.moveaxis(out, axis, 1)
    view[np.arange(batch)[:, None], pos] = np.moveaxis(update, axis, 1)
    return out


# --- OneHot / NonZero ----------------------------------------------------------------------------


def _one_hot(indices, depth, values, axis: int, negative: bool) -> np.ndarray:
    depth = int(np.asarray(depth).reshape(-1)[0])
    idx = np.asarray(indices).astype(np.int64)  # non-integer indices are cast to int64
    if negative:
        idx = np.where(idx < 0, idx + depth, idx)
    rank = idx.ndim + 1
    axis = _axis(axis, rank)
    # out-of-range indices match no class and give an all-off slice
    hot = np.expand_dims(idx, axis) == _along(axis, depth, rank)
    values = np.asarray(values).reshape(-1)
    return np.where(hot, values[1], values[0]).astype(values.dtype)


@op("OneHot", since=9)
def one_hot_9(indices, depth, values, *, axis=-1):
    return _one_hot(indices, depth, values, axis, negative=False)


@op("OneHot", since=11)
def one_hot(indices, depth, values, *, axis=-1):
    return _one_hot(indices, depth, values, axis, negative=True)


@op("NonZero", since=9)
def non_zero(X):
    # a scalar is taken as a 1-element vector, as onnxruntime does
    x = X.reshape(1) if X.ndim == 0 else X
    nz = np.nonzero(x != np.zeros((), x.dtype) if x.dtype.kind == "V" else x)
    return np.array(nz, dtype=np.int64).reshape(x.ndim, -1)


# --- TopK / Unique -------------------------------------------------------------------------------


def _top_k(x: np.ndarray, k: int, axis: int, largest: int) -> tuple[np.ndarray, np.ndarray]:
    axis = _axis(axis, x.ndim)
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ValueError(f"TopK: k={k} out of range for a dimension of size {n}")
    key = _sort_key(x)
    if 0 < k and 8 * k <= n and n >= 64:  # a few of many (kNN over distances): no full sort
        indices = top_few(key, k, axis, largest)
        if indices is not None:
            return np.take_along_axis(x, indices, axis=axis), indices
    if largest:
        # ties go to the lower index: a stable ascending sort of the reversed axis, read backwards,
        # orders by (value descending, index ascending)
        order = n - 1 - np.flip(np.argsort(np.flip(key, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(key, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, indices, axis=axis), indices.astype(np.int64)


#: elements per group in top_few: the least of each group bounds a row's k-th key
_TOP_GROUP = 8


def top_few(key: np.ndarray, k: int, axis: int, largest: int) -> np.ndarray | None:
    """TopK's int64 indices when k is small (n >= _TOP_GROUP * k), without sorting or
    partitioning whole rows. Each row's elements form n // _TOP_GROUP groups (every
    (n // _TOP_GROUP)-th element); the k-th least of the groups' least keys bounds the row's
    k-th key from above (k groups hold a key at most that), so the keys at most that bound
    (a few times k, ties included) are the candidates: sorted stably by (row, key), the first
    k of each row are _top_k's answer, ties ordered by index as its stable sort orders them.
    largest: the keys negated (floats) or inverted (integers), which reverses their order
    exactly. None for a NaN (which _top_k's sort places) or where ties make most of the keys
    candidates (the full sort is as fast)."""
    if key.dtype.kind == "f":
        if np.isnan(key).any():
            return None
        order_key = -key if largest else key
    elif key.dtype.kind in "iu":
        order_key = ~key if largest else key
    else:
        return None
    rows = np.moveaxis(order_key, axis, -1)
    flat = rows.reshape(-1, rows.shape[-1])
    count, n = flat.shape
    groups = n // _TOP_GROUP
    least = flat[:, :groups].copy()  # (slab by slab: numpy's min over a middle axis is slower)
    for g in range(1, _TOP_GROUP):
        np.minimum(least, flat[:, g * groups : (g + 1) * groups], out=least)
    bound = np.partition(least, k - 1, axis=1)[:, k - 1 : k]
    chosen = np.flatnonzero(flat <= bound)  # (in row order, then index order)
    if chosen.size > flat.size // 4:
        return None
    row, column = np.divmod(chosen, n)
    ranked = np.lexsort((flat.reshape(-1)[chosen], row))  # stable: ties keep index order
    starts = np.searchsorted(row[ranked], np.arange(count))
    if (np.diff(np.append(starts, chosen.size)) < k).any():
        return None  # (cannot happen: k groups' least keys are at most the bound)
    indices = column[ranked[starts[:, None] + np.arange(k)]].astype(np.int64, copy=False)
    return np.moveaxis(indices.reshape(rows.shape[:-1] + (k,)), -1, axis)


@op("TopK", since=1)
def top_k_1(X, *, k, axis=-1):
    return _top_k(X, k, axis, 1)


@op("TopK", since=10)
def top_k(X, K, *, axis=-1, largest=1, sorted=1):
    # 'sorted'=0 leaves the order unspecified; the sorted order is as good as any
    return _top_k(X, int(np.asarray(K).reshape(-1)[0]), axis, largest)


@op("Unique", since=11)
def unique(X, *, axis=None, sorted=1):
    if axis is None:
        rows = X.reshape(-1, 1)
    else:
        axis = _axis(axis, X.ndim)
        rows = np.moveaxis(X, axis, 0).reshape(X.shape[axis], -1)
    n = rows.shape[0]
    # a stable lexicographic sort puts equal rows together, first occurrence first
    key = _sort_key(rows)
    order = np.lexsort(key.T[::-1]) if key.shape[1] else np.arange(n)
    ordered = rows[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
    group = np.cumsum(starts) - 1  # unique id of each sorted row
    first = order[starts]  # first occurrence of each unique row, in sorted order
    counts = np.diff(np.append(np.flatnonzero(starts), n))
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = group
    if not sorted:  # renumber the unique rows by first occurrence
        by_first = np.argsort(first, kind="stable")
        renumber = np.empty_like(by_first)
        renumber[by_first] = np.arange(len(by_first))
        first, counts, inverse = first[by_first], counts[by_first], renumber[inverse]
    if axis is None:
        y = X.reshape(-1)[first]
    else:
        y = np.take(X, first, axis=axis)
    as64 = np.int64
    return y, first.astype(as64), inverse.astype(as64), counts.astype(as64)


# --- Compress / ReverseSequence ------------------------------------------------------------------


@op("Compress", since=9)
def compress(input, condition, *, axis=None):
    cond = np.asarray(condition, dtype=bool).reshape(-1)
    if axis is None:
        return np.compress(cond, input.reshape(-1))
    return np.compress(cond, input, axis=_axis(axis, input.ndim))


@op("ReverseSequence", since=10)
def reverse_sequence(input, sequence_lens, *, batch_axis=1, time_axis=0):
    rank = input.ndim
    t = _along(time_axis, input.shape[time_axis], rank)
    lens = np.asarray(sequence_lens, dtype=np.int64).reshape(
        [input.shape[batch_axis] if d == batch_axis else 1 for d in range(rank)]
    )
    # the first lens[b] steps are read backwards, the rest stay in place
    source = np.where(t < lens, lens - 1 - t, t)
    return np.take_along_axis(input, np.broadcast_to(source, input.shape), axis=time_axis)


# --- Pad -----------------------------------------------------------------------------------------

_NUMPY_PAD_MODES = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad(data: np.ndarray, pads, mode: str, value, axes=None) -> np.ndarray:
    crop, widths = _pad_widths(data.shape, pads, axes)
    data = data[crop]
    if mode == "constant":
        if value is None:
            value = "" if data.dtype == object else 0
        shape, middle = _placement(data.shape, widths)
        out = np.full(shape, value, dtype=data.dtype)
        out[middle] = data
        return out
    if mode not in _NUMPY_PAD_MODES:
        raise ValueError(f"Pad: unknown mode {mode!r}")
    if mode in ("reflect", "edge") and _sliceable(data.shape, widths):
        return _pad_by_slices(data, widths, mode == "reflect")
    return np.pad(data, widths, mode=_NUMPY_PAD_MODES[mode])


def _pad_widths(shape: tuple, pads, axes) -> tuple[tuple, list]:
    """Pad's crop of the data (negative pads remove elements: crop first, then pad with the
    positive amounts), as slices, and the (before, after) widths per axis."""
    rank = len(shape)
    pads = _ints(pads)
    axes = list(range(rank)) if axes is None else [_axis(a, rank) for a in _ints(axes)]
    if len(pads) != 2 * len(axes):
        raise ValueError(f"Pad: {len(pads)} pads for {len(axes)} axes")
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + len(axes)]
    crop = tuple(slice(max(-b, 0), n + e if e < 0 else n) for b, e, n in zip(begin, end, shape))
    return crop, [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]


def _placement(shape: tuple, widths: list) -> tuple[list, tuple]:
    """The padded output's shape for (cropped) data of ``shape``, and the data's place in it."""
    out_shape = [n + b + e for n, (b, e) in zip(shape, widths)]
    return out_shape, tuple(slice(b, b + n) for n, (b, _) in zip(shape, widths))


def _sliceable(shape: tuple, widths: list) -> bool:
    """Whether reflect / edge pads of (cropped) data of ``shape`` are _pad_by_slices's few
    copies: data there, and every pad shorter than its axis."""
    return bool(math.prod(shape)) and all(b < n and e < n for n, (b, e) in zip(shape, widths))


def _pad_by_slices(data: np.ndarray, widths: list, reflect: bool) -> np.ndarray:
    """np.pad's reflect / edge for pads shorter than each axis, as a few slice copies (its
    general machinery cost a small image 30 us): the data in the middle, then axis by axis
    each border from what is already there (later axes copy the earlier ones' borders too,
    so corners come out as np.pad's)."""
    shape, middle, borders = _slice_plan(data.shape, widths, reflect)
    out = np.empty(shape, data.dtype)
    out[middle] = data
    for at, src in borders:
        out[at] = out[src]
    return out


def _slice_plan(shape: tuple, widths: list, reflect: bool) -> tuple:
    """_pad_by_slices's copies: the output's shape, the data's place, then (destination,
    source) index tuples of each border in order."""
    out_shape, middle = _placement(shape, widths)
    whole, borders = [slice(None)] * len(shape), []
    for axis, (n, (b, e)) in enumerate(zip(shape, widths)):
        at = whole.copy()
        if b:
            at[axis] = slice(0, b)
            src = slice(2 * b, b, -1) if reflect else slice(b, b + 1)
            borders.append((tuple(at), tuple(whole[:axis] + [src])))
        if e:
            last = b + n - 1  # (the data's last index here)
            at[axis] = slice(last + 1, last + 1 + e)
            stop = last - 1 - e
            src = (
                slice(last - 1, None if stop < 0 else stop, -1)
                if reflect
                else slice(last, last + 1)
            )
            borders.append((tuple(at), tuple(whole[:axis] + [src])))
    return out_shape, middle, borders


def _bind_pad(inputs, attrs, constant):
    """registry.binds for Pad-11+ with constant pads, value and axes: the crop, widths and
    copies worked out once; the constant and reflect / edge modes (others: as written)."""
    data, pads, value, axes = (tuple(inputs) + (None,) * 4)[:4]
    mode = attrs["mode"]
    if data.dtype == object or mode not in ("constant", "reflect", "edge"):
        return None
    crop, widths = _pad_widths(data.shape, pads, axes)
    cropped = data[crop].shape
    if mode == "constant":
        value = 0 if value is None else np.asarray(value).reshape(-1)[0]
        (shape, middle), full, dtype = _placement(cropped, widths), np.full, data.dtype

        def constant_pad(data, *_):
            out = full(shape, value, dtype=dtype)
            out[middle] = data[crop]
            return out

        return constant_pad
    if not _sliceable(cropped, widths):
        return None
    shape, middle, borders = _slice_plan(cropped, widths, mode == "reflect")
    empty, dtype = np.empty, data.dtype

    def sliced_pad(data, *_):
        out = empty(shape, dtype)
        out[middle] = data[crop]
        for at, src in borders:
            out[at] = out[src]
        return out

    return sliced_pad


@op("Pad", since=1)
def pad_1(data, *, paddings, mode="constant", value=0.0):
    return _pad(data, paddings, mode, value)


@op("Pad", since=2)
def pad_2(data, *, pads, mode="constant", value=0.0):
    return _pad(data, pads, mode, value)


@binds(_bind_pad, constants=(1, 2, 3))
@op("Pad", since=11)
def pad(data, pads, constant_value=None, axes=None, *, mode="constant"):
    value = None if constant_value is None else np.asarray(constant_value).reshape(-1)[0]
    return _pad(data, pads, mode, value, axes)
