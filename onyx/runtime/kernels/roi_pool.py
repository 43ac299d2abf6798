"""Region-of-interest pooling: MaxRoiPool (Caffe's integer bins) and RoiAlign (bilinear
samples per bin, averaged or maxed)."""

from __future__ import annotations

import math

import numpy as np

from ..registry import op
from .low_floats import compute_dtype
from .pool import _lowest


def _roi_bins(start, size, pooled, limit):
    """Caffe-style integer bin edges [lo, hi) of one RoI along one axis, clipped to the map."""
    bin_size = size / pooled
    p = np.arange(pooled)
    lo = np.clip(np.floor(p * bin_size).astype(np.int64) + start, 0, limit)
    hi = np.clip(np.ceil((p + 1) * bin_size).astype(np.int64) + start, 0, limit)
    return lo, hi


def _round_half_away(v: float) -> int:
    """C's round(): halves away from zero (Caffe's RoI pooling, onnxruntime)."""
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


@op("MaxRoiPool", since=1)
def max_roi_pool(X, rois, *, pooled_shape, spatial_scale=1.0):
    N, C, H, W = X.shape
    PH, PW = pooled_shape
    y = np.zeros((rois.shape[0], C, PH, PW), dtype=X.dtype)
    low = _lowest(X.dtype)
    for r, (b, x1, y1, x2, y2) in enumerate(rois.astype(np.float64)):  # per RoI, vectorized inside
        sx, sy, ex, ey = (_round_half_away(v * spatial_scale) for v in (x1, y1, x2, y2))
        h_lo, h_hi = _roi_bins(sy, max(ey - sy + 1, 1), PH, H)
        w_lo, w_hi = _roi_bins(sx, max(ex - sx + 1, 1), PW, W)
        rows = np.arange(H)
        cols = np.arange(W)
        in_h = (rows >= h_lo[:, None]) & (rows < h_hi[:, None])  # (PH, H)
        in_w = (cols >= w_lo[:, None]) & (cols < w_hi[:, None])  # (PW, W)
        img = X[int(b)]
        # max over w within each w-bin, then over h within each h-bin (max is separable)
        tw = np.where(in_w[None, None], img[:, :, None, :], low).max(axis=-1)  # (C, H, PW)
        th = np.where(in_h[None, :, :, None], tw[:, None], low).max(axis=2)  # (C, PH, PW)
        empty = (h_hi <= h_lo)[:, None] | (w_hi <= w_lo)[None, :]
        y[r] = np.where(empty, 0, th)
    return y


# ----------------------------------------------------------------------------- RoiAlign


def _bilinear_taps(coord, size):
    """RoiAlign's bilinear taps along one axis: (low, high, w_low, w_high), zero outside [-1, size]."""
    outside = (coord < -1.0) | (coord > size)
    c = np.maximum(coord, 0.0)
    low = np.floor(c).astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    c = np.where(at_end, low, c)
    frac = c - low
    w_low, w_high = 1.0 - frac, frac
    w_low[outside] = 0.0
    w_high[outside] = 0.0
    return low, high, w_low, w_high


def _roi_align(
    X,
    rois,
    batch_indices,
    *,
    mode,
    output_height,
    output_width,
    sampling_ratio,
    spatial_scale,
    half_pixel,
):
    ct = compute_dtype(X.dtype)
    x = X.astype(ct, copy=False)
    N, C, H, W = x.shape
    PH, PW = output_height, output_width
    y = np.zeros((rois.shape[0], C, PH, PW), dtype=ct)
    shift = 0.5 if half_pixel else 0.0
    for r, roi in enumerate(
        rois.astype(np.float64)
    ):  # per RoI (grid sizes differ), vectorized inside
        x1, y1, x2, y2 = roi * spatial_scale - shift
        rw, rh = x2 - x1, y2 - y1
        if not half_pixel:  # legacy mode: force malformed RoIs to be 1x1
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / PH, rw / PW
        gh = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rh / PH))
        gw = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rw / PW))
        gh, gw = max(gh, 1), max(gw, 1)
        ys = y1 + (np.arange(PH)[:, None] * bh + (np.arange(gh)[None, :] + 0.5) * bh / gh).reshape(
            -1
        )
        xs = x1 + (np.arange(PW)[:, None] * bw + (np.arange(gw)[None, :] + 0.5) * bw / gw).reshape(
            -1
        )
        yl, yh, wyl, wyh = _bilinear_taps(ys, H)
        xl, xh, wxl, wxh = _bilinear_taps(xs, W)
        img = x[int(batch_indices[r])]
        if mode == "avg":
            rows = img[:, yl, :] * wyl[:, None].astype(ct) + img[:, yh, :] * wyh[:, None].astype(ct)
            vals = rows[:, :, xl] * wxl.astype(ct) + rows[:, :, xh] * wxh.astype(ct)
            y[r] = vals.reshape(C, PH, gh, PW, gw).mean(axis=(2, 4))
        else:
            # onnxruntime's max mode: the max over samples of the largest weighted corner.
            corners = [
                img[:, yi][:, :, xi] * (wy[:, None] * wx[None, :]).astype(ct)
                for yi, wy in ((yl, wyl), (yh, wyh))
                for xi, wx in ((xl, wxl), (xh, wxh))
            ]
            vals = np.maximum.reduce(corners)
            y[r] = vals.reshape(C, PH, gh, PW, gw).max(axis=(2, 4))
    return y.astype(X.dtype, copy=False)


@op("RoiAlign", since=16)
def roi_align(
    X,
    rois,
    batch_indices,
    *,
    coordinate_transformation_mode="half_pixel",
    mode="avg",
    output_height=1,
    output_width=1,
    sampling_ratio=0,
    spatial_scale=1.0,
):
    return _roi_align(
        X,
        rois,
        batch_indices,
        mode=mode,
        output_height=output_height,
        output_width=output_width,
        sampling_ratio=sampling_ratio,
        spatial_scale=spatial_scale,
        half_pixel=coordinate_transformation_mode == "half_pixel",
    )


@op("RoiAlign", since=10)
def roi_align_10(
    X,
    rois,
    batch_indices,
    *,
    mode="avg",
    output_height=1,
    output_width=1,
    sampling_ratio=0,
    spatial_scale=1.0,
):
    # RoiAlign-10 had no pixel shift (what version 16 calls output_half_pixel).
    return _roi_align(
        X,
        rois,
        batch_indices,
        mode=mode,
        output_height=output_height,
        output_width=output_width,
        sampling_ratio=sampling_ratio,
        spatial_scale=spatial_scale,
        half_pixel=False,
    )
