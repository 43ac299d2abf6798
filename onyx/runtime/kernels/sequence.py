"""Sequences (Python lists of arrays) and optionals (a value, or None when empty)."""

from __future__ import annotations

import numpy as np

from ..registry import op


def _position(position, n: int, *, inclusive: bool) -> int:
    """A scalar position in [-n, n-1] ([-n, n] when inclusive), as a non-negative index."""
    p = int(np.asarray(position).reshape(()))
    hi = n if inclusive else n - 1
    if not -n <= p <= hi:
        raise IndexError(f"sequence position {p} out of range for length {n}")
    return p + n if p < 0 else p


@op("SequenceConstruct", since=11)
def sequence_construct(*inputs):
    return list(inputs)


@op("SequenceEmpty", since=11)
def sequence_empty(*, dtype=None):
    return []


@op("SequenceAt", since=11)
def sequence_at(input_sequence, position):
    return input_sequence[_position(position, len(input_sequence), inclusive=False)]


@op("SequenceErase", since=11)
def sequence_erase(input_sequence, position=None):
    n = len(input_sequence)
    p = n - 1 if position is None else _position(position, n, inclusive=False)
    return input_sequence[:p] + input_sequence[p + 1 :]


@op("SequenceInsert", since=11)
def sequence_insert(input_sequence, tensor, position=None):
    n = len(input_sequence)
    p = n if position is None else _position(position, n, inclusive=True)
    return input_sequence[:p] + [tensor] + input_sequence[p:]


@op("SequenceLength", since=11)
def sequence_length(input_sequence):
    return np.array(len(input_sequence), dtype=np.int64)


@op("ConcatFromSequence", since=11)
def concat_from_sequence(input_sequence, *, axis, new_axis=0):
    if new_axis:
        return np.stack(input_sequence, axis=axis)  # axis may be in [-r-1, r]
    return np.concatenate(input_sequence, axis=axis)


@op("SplitToSequence", since=11)
def split_to_sequence(input, split=None, *, axis=0, keepdims=1):
    axis = axis % input.ndim
    dim = input.shape[axis]
    if split is None:
        # chunks of one; keepdims=0 drops the split axis
        parts = np.split(input, range(1, dim), axis=axis) if dim else []
        return parts if keepdims else [np.squeeze(p, axis=axis) for p in parts]
    split = np.asarray(split)
    if split.ndim == 0:  # equal chunks of that size, the last one possibly smaller
        size = int(split)
        bounds = list(range(size, dim, size))
    else:
        sizes = [int(s) for s in split]
        if sum(sizes) != dim:
            raise ValueError(f"SplitToSequence: sizes {sizes} do not add up to dim {dim}")
        bounds = np.cumsum(sizes)[:-1]
    return np.split(input, bounds, axis=axis)


@op("Optional", since=15)
def optional(input=None, *, type=None):
    return input  # an absent input makes an empty optional (None)


@op("OptionalGetElement", since=15)
def optional_get_element(input):
    if input is None:
        raise ValueError("OptionalGetElement: the optional is empty")
    return input


@op("OptionalHasElement", since=15)
def optional_has_element(input=None):
    return np.array(input is not None)
