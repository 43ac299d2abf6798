"""Shape manipulation: Reshape, Transpose, Concat, Split, Squeeze, Unsqueeze, Flatten, Expand, Tile,
Shape, Size, Identity, DepthToSpace, SpaceToDepth, Trilu."""

from __future__ import annotations

import math

import numpy as np

from ..registry import binds, op


def _ints(x) -> list[int]:
    """An int64 tensor (or attribute list) as a list of Python ints."""
    if type(x) is np.ndarray:
        return x.reshape(-1).tolist()  # one C call: the hot path of every shape input
    return [int(v) for v in np.asarray(x).reshape(-1)]


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


# --- Reshape ------------------------------------------------------------------------------------


def _reshape(data: np.ndarray, shape: list[int], allowzero: int) -> np.ndarray:
    if 0 not in shape and shape.count(-1) <= 1 and data.size:
        return data.reshape(shape)  # numpy infers a -1 as the spec does
    # 0 copies the input's dim (unless allowzero), -1 is inferred from the remaining size
    if not allowzero and 0 in shape[data.ndim :]:
        i = shape.index(0, data.ndim)
        raise ValueError(
            f"Reshape: shape {shape} has 0 at index {i}, which copies the input's dim {i}, "
            f"but the input {list(data.shape)} has rank {data.ndim}"
        )
    dims = [data.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(shape)]
    if dims.count(-1) > 1:
        raise ValueError("Reshape: at most one -1 in shape")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = data.size // known if known else 0
    return data.reshape(dims)


@op("Reshape", since=1)
def reshape_1(data, *, shape=(), consumed_inputs=None):
    return _reshape(data, list(shape), 0)


def _binds_as_reshape(result_of):
    """registry.binds for an op whose output is its data reshaped (Reshape, Squeeze,
    Unsqueeze) where its second input (the shape, the axes) is constant: the output's shape
    worked out once by ``result_of(data, operand, attributes)``, the kernel's own, so its
    errors are raised there."""

    def make(inputs, attrs, constant):
        shape = result_of(inputs[0], inputs[1], attrs).shape
        return lambda data, *_: data.reshape(shape)

    return binds(make, constants=(1,))


@_binds_as_reshape(lambda data, shape, attrs: _reshape(data, _ints(shape), attrs["allowzero"]))
@op("Reshape", since=5)
def reshape(data, shape, *, allowzero=0):
    return _reshape(data, _ints(shape), allowzero)


# --- Transpose, Concat ---------------------------------------------------------------------------


@op("Transpose", since=1)
def transpose(data, *, perm=None):
    return data.transpose(perm)  # the method: no Python-level wrapper (None reverses the axes)


@op("Concat", since=1)
def concat_1(*inputs, axis=1):
    return concat(*inputs, axis=axis)


@op("Concat", since=4)
def concat(*inputs, axis):
    return np.concatenate(inputs, axis=_axis(axis, inputs[0].ndim))


# --- Split ---------------------------------------------------------------------------------------


def _split(x: np.ndarray, axis: int, sizes: list[int] | None, n: int) -> tuple:
    """Split along axis into the given sizes, or into n parts of ceil(dim / n) (last smaller)."""
    axis = _axis(axis, x.ndim)
    dim = x.shape[axis]
    if sizes is None:
        chunk = -(-dim // n) if n else 0
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]
    if sum(sizes) != dim:
        raise ValueError(f"Split: sizes {sizes} do not add up to dim {dim}")
    lead = (slice(None),) * axis
    parts, start = [], 0
    for n in sizes:
        parts.append(x[lead + (slice(start, start + n),)])
        start += n
    return tuple(parts)


@op("Split", since=1)
def split_1(ctx, input, sizes=None, *, axis=0, **attrs):
    # v1 takes the sizes as an optional second input or as the attribute 'split' (a keyword that
    # Python cannot declare beside the input of the same name, hence **attrs)
    if sizes is None:
        sizes = attrs.get("split")
    return _split(input, axis, None if sizes is None else _ints(sizes), ctx.n_outputs)


@op("Split", since=2)
def split_2(ctx, input, *, axis=0, split=None):
    return _split(input, axis, None if split is None else list(split), ctx.n_outputs)


@op("Split", since=13)
def split_13(ctx, input, split=None, *, axis=0, num_outputs=None):
    if split is not None:
        return _split(input, axis, _ints(split), 0)
    return _split(input, axis, None, num_outputs if num_outputs is not None else ctx.n_outputs)


# --- Squeeze / Unsqueeze / Flatten ---------------------------------------------------------------


def _squeeze(data: np.ndarray, axes) -> np.ndarray:
    if axes is None:
        return np.squeeze(data)
    return np.squeeze(data, axis=tuple(_axis(a, data.ndim) for a in _ints(axes)))


@op("Squeeze", since=1)
def squeeze_1(data, *, axes=None):
    return _squeeze(data, axes)


@_binds_as_reshape(lambda data, axes, _: _squeeze(data, axes))
@op("Squeeze", since=13)
def squeeze(data, axes=None):
    return _squeeze(data, axes)


def _unsqueeze(data: np.ndarray, axes) -> np.ndarray:
    axes = _ints(axes)
    rank = data.ndim + len(axes)
    axes = sorted(_axis(a, rank) for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"Unsqueeze: repeated axes {axes}")
    shape = list(data.shape)
    for a in axes:
        shape.insert(a, 1)
    return data.reshape(shape)


@op("Unsqueeze", since=1)
def unsqueeze_1(data, *, axes):
    return _unsqueeze(data, axes)


@_binds_as_reshape(lambda data, axes, _: _unsqueeze(data, axes))
@op("Unsqueeze", since=13)
def unsqueeze(data, axes):
    return _unsqueeze(data, axes)


@op("Flatten", since=1)
def flatten(input, *, axis=1):
    axis = axis + input.ndim if axis < 0 else axis
    if not 0 <= axis <= input.ndim:
        raise ValueError(f"Flatten: axis out of range for rank {input.ndim}")
    return input.reshape(math.prod(input.shape[:axis]), math.prod(input.shape[axis:]))


# --- Expand / Tile -------------------------------------------------------------------------------


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcast of two shapes (np.broadcast_shapes without its Python overhead)."""
    if len(a) < len(b):
        a, b = b, a
    b = (1,) * (len(a) - len(b)) + tuple(b)
    out = []
    for m, n in zip(a, b):
        if m != n and m != 1 and n != 1:
            raise ValueError(f"shapes {a} and {b} do not broadcast")
        out.append(n if m == 1 else m)
    return tuple(out)


@op("Expand", since=8)
def expand(input, shape):
    # a read-only broadcast view, no copy: kernels never write their inputs, and the readers
    # (Add of an attention mask, Reshape) broadcast or copy as they need
    return np.broadcast_to(input, broadcast_shape(input.shape, tuple(_ints(shape))))


@op("Tile", since=1)
def tile_1(input, tiles, axis):
    reps = [1] * input.ndim
    reps[_axis(int(axis), input.ndim)] = int(tiles)
    return np.tile(input, reps)


@op("Tile", since=6)
def tile(input, repeats):
    reps = _ints(repeats)
    if len(reps) != input.ndim:
        raise ValueError(f"Tile: {len(reps)} repeats for rank {input.ndim}")
    return np.tile(input, reps)


# --- Shape / Size / Identity ---------------------------------------------------------------------


@op("Shape", since=1)
def shape(data, *, start=0, end=None):
    rank = data.ndim
    # axes clamp to [0, rank] after adding rank to negatives; start > end gives an empty shape
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = rank if end is None else min(max(end + rank if end < 0 else end, 0), rank)
    return np.array(data.shape[start:end], dtype=np.int64)


@op("Size", since=1)
def size(data):
    return np.array(data.size, dtype=np.int64)


@op("Identity", since=1, elementwise=True)
def identity(input):
    return input  # tensors, sequences and optionals alike; values are never mutated


# --- DepthToSpace / SpaceToDepth -----------------------------------------------------------------


@op("DepthToSpace", since=1)
def depth_to_space(input, *, blocksize, mode="DCR"):
    b, c, h, w = input.shape
    bs = blocksize
    if mode == "DCR":
        tmp = input.reshape(b, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        tmp = input.reshape(b, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise ValueError(f"DepthToSpace: unknown mode {mode!r}")
    return tmp.reshape(b, c // (bs * bs), h * bs, w * bs)


@op("SpaceToDepth", since=1)
def space_to_depth(input, *, blocksize, mode="DCR"):
    # the inverse of DepthToSpace in the same mode
    b, c, h, w = input.shape
    bs = blocksize
    tmp = input.reshape(b, c, h // bs, bs, w // bs, bs)
    if mode == "DCR":
        tmp = tmp.transpose(0, 3, 5, 1, 2, 4)
    elif mode == "CRD":
        tmp = tmp.transpose(0, 1, 3, 5, 2, 4)
    else:
        raise ValueError(f"SpaceToDepth: unknown mode {mode!r}")
    return tmp.reshape(b, c * bs * bs, h // bs, w // bs)


# --- Trilu ---------------------------------------------------------------------------------------


@op("Trilu", since=14)
def trilu(input, k=None, *, upper=1):
    k = 0 if k is None else int(np.asarray(k).reshape(()))
    n, m = input.shape[-2:]
    diff = np.arange(m)[None, :] - np.arange(n)[:, None]  # j - i
    keep = diff >= k if upper else diff <= k
    zero = np.array("" if input.dtype == object else 0, dtype=input.dtype)
    return np.where(keep, input, zero)
