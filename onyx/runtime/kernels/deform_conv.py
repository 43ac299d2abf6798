"""DeformConv: a convolution whose taps sample the input at learned offsets (multilinear
interpolation), then one batched matmul per group. Python loops only ever run over
interpolation corners, never over pixels."""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..registry import op
from .conv import _add_channels
from .conv_geometry import check_groups, conv_out_shape, spatial_defaults
from .low_floats import compute_dtype


def _sample_multilinear(xg: np.ndarray, pos: list[np.ndarray]) -> np.ndarray:
    """Multilinear samples of xg (N, OG, Cog, *spatial) at positions pos[i] (N, OG, Q) per axis.

    Corners outside the input contribute zero. Returns (N, OG, Cog, Q).
    """
    N, OG, Cog = xg.shape[:3]
    spatial = xg.shape[3:]
    flat_x = xg.reshape(N, OG, Cog, -1)
    base = [np.floor(p) for p in pos]
    frac = [p - b for p, b in zip(pos, base)]
    base = [b.astype(np.int64) for b in base]
    out = np.zeros((N, OG, Cog, pos[0].shape[-1]), dtype=xg.dtype)
    for corner in itertools.product((0, 1), repeat=len(spatial)):
        weight = np.ones_like(pos[0])
        valid = np.ones(pos[0].shape, dtype=bool)
        flat = np.zeros(pos[0].shape, dtype=np.int64)
        for i, bit in enumerate(corner):
            idx = base[i] + bit
            weight = weight * (frac[i] if bit else 1 - frac[i])
            valid &= (idx >= 0) & (idx < spatial[i])
            flat = flat * spatial[i] + np.clip(idx, 0, spatial[i] - 1)
        vals = np.take_along_axis(flat_x, flat[:, :, None, :], axis=3)
        out += vals * (weight * valid)[:, :, None, :]
    return out


def _check_deform_inputs(x_shape, offset, mask, offset_group: int, K: int, out_shape) -> None:
    """ValueError unless offset_group splits X's channels and offset and mask have the shapes
    the spec gives them (numpy's reshape said it in its own words)."""
    N, C, n = x_shape[0], x_shape[1], len(x_shape) - 2
    if offset_group < 1 or C % offset_group:
        raise ValueError(
            f"DeformConv: offset_group {offset_group} does not divide the {C} channels of X"
        )
    for name, v, per in (
        ("offset", offset, offset_group * K * n),
        ("mask", mask, offset_group * K),
    ):
        want = (N, per, *out_shape)
        if v is not None and tuple(v.shape) != want:
            raise ValueError(f"DeformConv: {name} is {list(v.shape)}, expected {list(want)}")


def _deform_conv(
    X, W, offset, B, mask, *, dilations, group, kernel_shape, offset_group, pads, strides
):
    check_groups("DeformConv", X.shape, W.shape, group)
    ct = compute_dtype(X.dtype)
    x, w = X.astype(ct, copy=False), W.astype(ct, copy=False)
    N, C = x.shape[:2]
    in_shape = list(x.shape[2:])
    n = len(in_shape)
    kernel = list(kernel_shape) if kernel_shape else list(w.shape[2:])
    strides, dilations, pads = spatial_defaults(n, strides, dilations, pads)
    out_shape = conv_out_shape(in_shape, kernel, strides, dilations, pads)
    K, P = math.prod(kernel), math.prod(out_shape)
    OG = offset_group
    _check_deform_inputs(x.shape, offset, mask, OG, K, out_shape)
    off = offset.astype(ct, copy=False).reshape(N, OG, K, n, P)
    # Regular sampling grid (K, P) per axis, then shifted by the learned offsets.
    k_idx = np.indices(kernel).reshape(n, K)
    o_idx = np.indices(out_shape).reshape(n, P)
    pos = [
        (o_idx[i] * strides[i] - pads[i])[None, :]
        + (k_idx[i] * dilations[i])[:, None]
        + off[:, :, :, i]
        for i in range(n)
    ]
    cols = _sample_multilinear(
        x.reshape(N, OG, C // OG, *in_shape), [p.reshape(N, OG, K * P) for p in pos]
    )
    if mask is not None:
        cols *= mask.astype(ct, copy=False).reshape(N, OG, 1, K * P)
    cols = cols.reshape(N, group, -1, P)  # (N, G, Cg*K, P): channel-major then kernel offset
    M = w.shape[0]
    y = np.matmul(w.reshape(group, M // group, -1), cols).reshape((N, M, *out_shape))
    return _add_channels(y, B if B is None else B.astype(ct)).astype(X.dtype, copy=False)


@op("DeformConv", since=19)
def deform_conv(
    X,
    W,
    offset,
    B=None,
    mask=None,
    *,
    dilations=None,
    group=1,
    kernel_shape=None,
    offset_group=1,
    pads=None,
    strides=None,
):
    return _deform_conv(
        X,
        W,
        offset,
        B,
        mask,
        dilations=dilations,
        group=group,
        kernel_shape=kernel_shape,
        offset_group=offset_group,
        pads=pads,
        strides=strides,
    )
