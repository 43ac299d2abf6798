"""CausalConvWithState: a depthwise 1-D causal convolution that carries its last k - 1 inputs
from call to call (a streaming model's state), with an optional SiLU."""

from __future__ import annotations

import numpy as np

from ..registry import op
from .low_floats import compute_dtype


def _silu(y: np.ndarray) -> np.ndarray:
    return y / (1 + np.exp(-y))


_ACTIVATIONS = {"none": lambda y: y, "silu": _silu, "swish": _silu}


@op("CausalConvWithState", since=27)
def causal_conv_with_state(input, weight, bias=None, past_state=None, *, activation="none"):
    ct = compute_dtype(input.dtype)
    x = input.astype(ct, copy=False)
    B, C, L = x.shape
    k = weight.shape[-1]
    if past_state is None:
        past = np.zeros((B, C, k - 1), dtype=ct)
    else:
        past = past_state.astype(ct, copy=False)
    seq = np.concatenate([past, x], axis=2)  # (B, C, k - 1 + L)
    wk = weight.astype(ct, copy=False).reshape(C, k)
    y = np.zeros((B, C, L), dtype=ct)
    for j in range(k):  # depthwise: one pass per tap
        y += seq[:, :, j : j + L] * wk[:, j : j + 1]
    if bias is not None:
        y += bias.astype(ct, copy=False)[:, None]
    y = _ACTIVATIONS[activation](y)
    present = seq[:, :, seq.shape[2] - (k - 1) :]
    return y.astype(input.dtype, copy=False), np.ascontiguousarray(present).astype(input.dtype)
