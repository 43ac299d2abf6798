"""MaxUnpool: scatters each value to the position its MaxPool index names, zeros elsewhere."""

from __future__ import annotations

import math

import numpy as np

from ..registry import op
from .conv_geometry import spatial_defaults


@op("MaxUnpool", since=9)
def max_unpool(X, I, output_shape=None, *, kernel_shape, pads=None, strides=None):
    n = X.ndim - 2
    strides, _, pads = spatial_defaults(n, strides, None, pads)
    # The indices address the pooled op's input, whose shape the attributes determine.
    pooled_from = X.shape[:2] + tuple(
        (X.shape[2 + i] - 1) * strides[i] + kernel_shape[i] - pads[i] - pads[n + i]
        for i in range(n)
    )
    shape = pooled_from if output_shape is None else tuple(int(s) for s in output_shape)
    flat = I.reshape(-1).astype(np.int64)
    if shape != pooled_from:  # re-address each index by its coordinates in the larger output
        flat = np.ravel_multi_index(np.unravel_index(flat, pooled_from), shape)
    y = np.zeros(math.prod(shape), dtype=X.dtype)
    y[flat] = X.reshape(-1)
    return y.reshape(shape)
