"""Signal processing: DFT, STFT, MelWeightMatrix and the Hann, Hamming and Blackman windows.
(Out of nn.py: an audio front-end's ops, imported only where a model holds one.)"""

from __future__ import annotations

import math

import numpy as np

from ..ir import DataType
from .engine import InferenceError, NodeContext, rule


@rule("DFT")
def dft(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    if x is None:
        ctx.set(0, ctx.dtype(0), None)
        return
    dims = list(x)
    axis = ctx.attr("axis", 1) if ctx.opset < 20 else ctx.value(2) if ctx.has(2) else -2
    if axis is None:
        # unknown axis: only a resized or one-sided axis changes, besides the last dim
        changes = ctx.has(1) or ctx.attr("onesided", 0)
        dims = [None] * (len(x) - 1) if changes else dims[:-1]
        ctx.set(0, ctx.dtype(0), [*dims, 1 if ctx.attr("inverse", 0) and changes else 2])
        return
    axis = int(np.ravel(axis)[0])
    axis = axis + len(x) if axis < 0 else axis
    length = ctx.value(1) if ctx.has(1) else None
    if ctx.has(1) and length is not None:
        dims[axis] = int(np.ravel(length)[0])
    elif ctx.has(1):
        dims[axis] = None
    onesided, inverse = ctx.attr("onesided", 0), ctx.attr("inverse", 0)
    if onesided and inverse:  # inverse of a one-sided spectrum: a real signal
        if not ctx.has(1) and isinstance(dims[axis], int):
            dims[axis] = 2 * (dims[axis] - 1)
        dims[-1] = 1
    else:
        if onesided and isinstance(dims[axis], int):
            dims[axis] = dims[axis] // 2 + 1
        dims[-1] = 2
    ctx.set(0, ctx.dtype(0), dims)


def _ceil_div(a, b):
    return math.ceil(a / b)


@rule("MelWeightMatrix")
def mel_weight_matrix(ctx: NodeContext) -> None:
    n, bins = ctx.value(1), ctx.value(0)
    dims = (
        int(np.ravel(n)[0]) // 2 + 1 if n is not None else None,
        int(np.ravel(bins)[0]) if bins is not None else None,
    )
    ctx.set(0, DataType(ctx.attr("output_datatype", 1)), dims)


@rule("HannWindow", "HammingWindow", "BlackmanWindow")
def window(ctx: NodeContext) -> None:
    n = ctx.value(0)
    size = int(np.ravel(n)[0]) if n is not None else None
    ctx.set(0, DataType(ctx.attr("output_datatype", 1)), (size,))


@rule("STFT")
def stft(ctx: NodeContext) -> None:
    x = ctx.shape(0)
    step, length = ctx.value(1), ctx.value(3) if ctx.has(3) else None
    window_shape = ctx.shape(2)
    if length is None and window_shape is not None:
        length = window_shape[0] if isinstance(window_shape[0], int) else None
    length = None if length is None else int(np.ravel(length)[0])
    if x is None:
        ctx.set(0, ctx.dtype(0), (None, None, None, 2))
        return
    if len(x) == 2 and ctx.engine.strict:  # onnxruntime's leniency: runs it as a real signal
        raise InferenceError(f"STFT signal has rank 2 {list(x)}; the spec asks for rank 3")
    frames = None
    if step is not None and length is not None and isinstance(x[1], int):
        frames = (x[1] - length) // int(np.ravel(step)[0]) + 1
    bins = None if length is None else (length // 2 + 1 if ctx.attr("onesided", 1) else length)
    ctx.set(0, ctx.dtype(0), (x[0], frames, bins, 2))
