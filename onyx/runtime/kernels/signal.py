"""Signal processing: DFT, STFT, window functions, MelWeightMatrix.

Complex values travel as a trailing axis of size 2 (real, imaginary); a real signal has a
trailing axis of size 1.
"""

from __future__ import annotations

import numpy as np

from ...ir.dtypes import to_numpy
from ..registry import op


def _scalar(x) -> int:
    return int(np.asarray(x).reshape(-1)[0])


def _to_complex(x: np.ndarray) -> np.ndarray:
    """[..., 1] real or [..., 2] (re, im) -> complex without the trailing axis.

    float64 is transformed in complex128, every narrower type in complex64 (the precision
    onnxruntime computes in; the node suite's expected values carry float32 rounding).
    """
    ctype = np.complex128 if x.dtype == np.float64 else np.complex64
    z = x[..., 0].astype(ctype)
    if x.shape[-1] == 2:
        z.imag = x[..., 1]
    return z


def _from_complex(z: np.ndarray, dtype) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


def _fit(z: np.ndarray, n: int, axis: int) -> np.ndarray:
    """Truncate or zero-pad ``z`` to length ``n`` along ``axis``."""
    size = z.shape[axis]
    if n <= size:
        return np.take(z, np.arange(n), axis=axis)
    pad = [(0, 0)] * z.ndim
    pad[axis] = (0, n - size)
    return np.pad(z, pad)


def _dft(x, dft_length, axis: int, inverse: int, onesided: int) -> np.ndarray:
    x = np.asarray(x)
    rank = x.ndim
    axis = axis + rank if axis < 0 else axis  # counted on the input, trailing complex axis included
    z = _to_complex(x)
    if onesided and inverse:
        # IRFFT: a one-sided spectrum in, a full real signal of dft_length out
        n = 2 * (z.shape[axis] - 1) if dft_length is None else _scalar(dft_length)
        y = np.fft.irfft(z, n=n, axis=axis)
        return y[..., None].astype(x.dtype)
    n = z.shape[axis] if dft_length is None else _scalar(dft_length)
    z = _fit(z, n, axis)
    y = np.fft.ifft(z, axis=axis) if inverse else np.fft.fft(z, axis=axis)
    if onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=axis)
    return _from_complex(y, x.dtype)


@op("DFT", since=20)
def dft(input, dft_length=None, axis=None, *, inverse=0, onesided=0):
    return _dft(input, dft_length, -2 if axis is None else _scalar(axis), inverse, onesided)


@op("DFT", since=17)
def dft_17(input, dft_length=None, *, axis=1, inverse=0, onesided=0):
    return _dft(input, dft_length, axis, inverse, onesided)


@op("STFT", since=17)
def stft(signal, frame_step, window=None, frame_length=None, *, onesided=1):
    signal = np.asarray(signal)
    if signal.ndim == 2:
        # [batch, length] without the trailing axis (torch's legacy exporter writes it):
        # onnxruntime takes it as a real signal, so does onyx (docs/compatibility.md)
        signal = signal[..., None]
    z = _to_complex(signal)  # [batch, signal_length]
    step = _scalar(frame_step)
    if frame_length is not None:
        length = _scalar(frame_length)
    elif window is not None:
        length = len(window)
    else:
        length = z.shape[1]
    frames = np.lib.stride_tricks.sliding_window_view(z, length, axis=1)[:, ::step]
    if window is not None:
        frames = frames * np.asarray(window).astype(frames.real.dtype)
    spectrum = np.fft.fft(frames, axis=-1)  # [batch, frames, length]
    if onesided:
        spectrum = spectrum[..., : length // 2 + 1]
    return _from_complex(spectrum, signal.dtype)


# --- windows: sum of cosines a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N) ---------------------

_WINDOW_COEFFICIENTS = {
    "HannWindow": (0.5, 0.5, 0.0),
    "HammingWindow": (25 / 46, 21 / 46, 0.0),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


def _cosine_window(a0: float, a1: float, a2: float):
    def window(size, *, periodic=1, output_datatype=1):
        n_points = _scalar(size)
        # a periodic window is the first `size` points of a symmetric one of size + 1
        period = n_points if periodic else n_points - 1
        n = np.arange(n_points, dtype=np.float64)
        phase = 2 * np.pi * n / period if period > 0 else np.zeros_like(n)
        w = a0 - a1 * np.cos(phase) + a2 * np.cos(2 * phase)
        return w.astype(to_numpy(output_datatype))

    return window


for _name, _coefficients in _WINDOW_COEFFICIENTS.items():
    op(_name, since=17)(_cosine_window(*_coefficients))


# --- MelWeightMatrix -----------------------------------------------------------------------------


def _hz_to_mel(f):
    return 2595.0 * np.log10(1.0 + f / 700.0)


def _mel_to_hz(m):
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


@op("MelWeightMatrix", since=17)
def mel_weight_matrix(
    num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *, output_datatype=1
):
    n_mel, n_fft, rate = _scalar(num_mel_bins), _scalar(dft_length), _scalar(sample_rate)
    n_bins = n_fft // 2 + 1
    low = _hz_to_mel(float(np.asarray(lower_edge_hertz)))
    high = _hz_to_mel(float(np.asarray(upper_edge_hertz)))
    # n_mel + 2 mel points spaced (high - low) / (n_mel + 2) apart (so `high` itself is never
    # reached, as in onnxruntime), each mapped to the DFT bin floor((dft_length + 1) * hz / rate)
    mel_points = low + np.arange(n_mel + 2) * ((high - low) / (n_mel + 2))
    edges = np.floor((n_fft + 1) * _mel_to_hz(mel_points) / rate).astype(np.int64)
    lower, center, upper = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(n_bins)[:, None]
    rising = (j - lower) / np.maximum(center - lower, 1)
    falling = (upper - j) / np.maximum(upper - center, 1)
    # triangles peaking at 1 on the center bin, even when an edge is degenerate
    weights = np.where((j >= lower) & (j < center), rising, 0.0)
    weights = np.where((j > center) & (j < upper), falling, weights)
    weights = np.where(j == center, 1.0, weights)
    return weights.astype(to_numpy(output_datatype))
