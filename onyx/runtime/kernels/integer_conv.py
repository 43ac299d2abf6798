"""ConvInteger with weights that are not int8 around 0 (quantized_conv.py's implicit GEMM).

onnxruntime's dynamic quantizer writes ConvInteger weights as uint8 with a zero point near
128, and (w - w_zp) spans [-127, 128] or wider: not int8, so the implicit-GEMM conv (int8
weights, zero point 0) did not apply and each call built byte columns and packed them. Here the
weights are split as w - w_zp = (w - shift) + (shift - w_zp) = w_s + c_m with w_s int8 (shift
128 for uint8 weights, 0 for int8) and c_m one integer per output channel:

    sum_k (x_k - x_zp)(w_km - w_zp_m) = sum_k (x_k - x_zp) w_s_km + c_m S_p,
    S_p = sum_k (x_k - x_zp) over output pixel p's window (padding reads as x_zp: adds 0),

the first term the implicit GEMM, the second a rank-1 term its epilogue adds (row_f x col_f),
in wrapping int32 as the GEMM's other corrections: the exact int32 result.
"""

from __future__ import annotations

import numpy as np

from .. import native


def shifted(w: np.ndarray) -> np.ndarray:
    """w_s = w - shift as int8 (a uint8 weight's bytes with the top bit flipped)."""
    return (w ^ np.uint8(128)).view(np.int8) if w.dtype == np.uint8 else w


def channel_terms(w: np.ndarray, w_zero_point) -> np.ndarray:
    """c = shift - w_zero_point per output channel, int32 (shift: 128 for uint8 weights, 0
    for int8)."""
    shift = 128 if w.dtype == np.uint8 else 0
    wz = np.zeros(1, np.int64) if w_zero_point is None else w_zero_point.astype(np.int64)
    return np.broadcast_to(shift - wz.reshape(-1), (w.shape[0],)).astype(np.int32)


def window_sums(
    x: np.ndarray,
    zx: int,
    kernel: tuple,
    geo: dict,
    padded: tuple,
    at: tuple,
    rows_in,
    cols_in,
    nhwc: np.ndarray | None = None,
) -> np.ndarray:
    """S_p for every output pixel of every image, in the GEMM's row order (image, then pixel):
    x's channels summed per pixel, minus C x_zp, placed in the padded plane (zeros around:
    padding is x's zero point), then summed over each window's taps. ``nhwc``: the GEMM's
    padded channels-last copy of x (padding and the channels past C hold x_zp), whose pixel
    rows the native row sums add up (numpy's sum across channels took longer than a
    pointwise conv's GEMM)."""
    N, C = x.shape[:2]
    _, Hp, Wp, _ = padded
    (oh, ow), (sh, sw), (dh, dw) = (geo[k] for k in ("out_shape", "strides", "dilations"))
    kh, kw = kernel
    if nhwc is not None and native.available() and nhwc.shape == padded:
        rows = nhwc.reshape(-1, padded[3])[:, :C]
        plane = native.row_sums(rows, False, x.dtype == np.int8).reshape(N, Hp, Wp)
        if zx:
            plane -= np.int32(C * zx)
        if (kh, kw, sh, sw, oh, ow) == (1, 1, 1, 1, Hp, Wp):  # (a pointwise conv's)
            return plane.reshape(-1)
    else:
        plane = np.zeros((N, Hp, Wp), np.int32)
        r0, c0 = at
        inner = plane[
            :, r0 : r0 + rows_in.stop - rows_in.start, c0 : c0 + cols_in.stop - cols_in.start
        ]
        np.sum(x[:, :, rows_in, cols_in], axis=1, dtype=np.int32, out=inner)
        if zx:
            inner -= np.int32(C * zx)
    # the window's columns summed along each row, then those sums down the window's rows:
    # kh + kw - 2 additions of arrays, where every tap's own was kh * kw (the same integers)
    rows = plane[:, :, : (ow - 1) * sw + 1 : sw].copy()
    for b in range(1, kw):
        rows += plane[:, :, b * dw : b * dw + (ow - 1) * sw + 1 : sw]
    sums = rows[:, : (oh - 1) * sh + 1 : sh].copy()
    for a in range(1, kh):
        sums += rows[:, a * dh : a * dh + (oh - 1) * sh + 1 : sh]
    return sums.reshape(-1)
