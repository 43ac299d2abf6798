"""com.microsoft ops that onnxruntime's quantization tool emits outside transformers and that
contrib.py does not hold: DynamicQuantizeLSTM (``quantize_dynamic`` turns every LSTM into one)
and QLinearWhere (static QOperator quantization of Where).

Semantics follow onnxruntime's ContribOperators docs and CPU kernels (the oracle in the tests).
"""

from __future__ import annotations

import os

import numpy as np

from .. import native
from ..registry import op
from .contrib import MS, _deq, _q
from .quantize import dynamic_quantize_linear
from .quantized_matmul import integer_matmul
from .rnn import _activation_names, _activations, _clipper


def _quantized_product(a: np.ndarray, wq: np.ndarray, w_zp: np.ndarray, w_scale: np.ndarray):
    """a [M, K] (float32) @ dequantized W [K, N], as onnxruntime's quantized GEMM computes it:
    a quantized dynamically to uint8 over the whole matrix (DynamicQuantizeLinear's rule), the
    exact integer product, then times the float32 a_scale * w_scale[n]."""
    aq, a_scale, a_zp = dynamic_quantize_linear(a)
    acc = integer_matmul(aq, wq, a_zp, w_zp)
    return acc.astype(np.float32) * (a_scale * w_scale)


def _product(wq: np.ndarray, w_zp: np.ndarray, w_scale: np.ndarray):
    """a -> _quantized_product(a, wq, w_zp, w_scale), on native.DynamicMatMul where it applies
    (the same operations: quantized as DynamicQuantizeLinear, the exact product, times the
    float32 a_scale * w_scale): set up once, where the general path's set-up came every step."""
    K, N = wq.shape
    if not (
        native.int8_gemm_ok(K)
        and wq.dtype in native.BYTES
        and w_scale.dtype == np.float32
        and w_scale.size in (1, N)
        and w_zp.dtype == wq.dtype
        and w_zp.size in (1, N)
    ):
        return lambda a: _quantized_product(a, wq, w_zp, w_scale)
    dm = native.DynamicMatMul(wq, w_scale, w_zp, None)

    def run(a: np.ndarray) -> np.ndarray:
        y = dm(np.ascontiguousarray(a, np.float32)) if a.size else None
        return _quantized_product(a, wq, w_zp, w_scale) if y is None else y  # (NaN, infinity)

    return run


def _per_direction(p, d: int, n: int) -> np.ndarray:
    """Direction d's scale or zero point: [dirs] (per tensor) or [dirs, n] (per column)."""
    p = np.asarray(p)
    if p.ndim == 0 or p.size == 1:
        return p.reshape(())
    p = p.reshape(p.shape[0], -1)
    return p[d] if p.shape[1] == n else p[d, 0]


@op("DynamicQuantizeLSTM", since=1, domain=MS)
def dynamic_quantize_lstm(
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    initial_c=None,
    P=None,
    W_scale=None,
    W_zero_point=None,
    R_scale=None,
    R_zero_point=None,
    *,
    activation_alpha=None,
    activation_beta=None,
    activations=None,
    clip=None,
    direction="forward",
    hidden_size=None,
    input_forget=0,
):
    """LSTM with 8-bit weights W [dirs, in, 4H] and R [dirs, H, 4H] (transposed against LSTM's,
    gates i, o, f, c). Inputs and hidden states are quantized dynamically before each product
    (the input projection once for the whole sequence, the recurrence once a step), as
    onnxruntime does: results agree to within the drift of one quantization step."""
    X = np.asarray(X, np.float32)
    steps, batch, _ = X.shape
    dirs, hidden = R.shape[0], R.shape[1]
    gates = 4 * hidden
    names = _activation_names(activations, 3, dirs, ["sigmoid", "tanh", "tanh"])
    acts = [
        _activations(names[3 * d : 3 * d + 3], activation_alpha, activation_beta, 3, np.float32)
        for d in range(dirs)
    ]
    clipped = _clipper(clip, np.float32)
    lens = np.full(batch, steps) if sequence_lens is None else np.asarray(sequence_lens)
    B = np.zeros((dirs, 2 * gates), np.float32) if B is None else np.asarray(B, np.float32)
    P = np.zeros((dirs, 3 * hidden), np.float32) if P is None else np.asarray(P, np.float32)
    zeros = np.zeros((dirs, batch, hidden), np.float32)
    h0 = zeros if initial_h is None else np.asarray(initial_h, np.float32)
    c0 = zeros if initial_c is None else np.asarray(initial_c, np.float32)
    Y = np.zeros((steps, dirs, batch, hidden), np.float32)
    Y_h, Y_c = h0.copy(), c0.copy()
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        w = (W[d], _per_direction(W_zero_point, d, gates), _per_direction(W_scale, d, gates))
        r = (R[d], _per_direction(R_zero_point, d, gates), _per_direction(R_scale, d, gates))
        proj = _product(*w)(X.reshape(steps * batch, -1)).reshape(steps, batch, gates)
        proj += B[d, :gates] + B[d, gates:]
        _run_direction(
            proj,
            _product(*r),
            P[d],
            acts[d],
            clipped,
            input_forget,
            lens,
            reverse,
            Y[:, d],
            Y_h[d],
            Y_c[d],
        )
    return Y, Y_h, Y_c


def _run_direction(proj, product, peep, acts, clipped, input_forget, lens, reverse, Y, h, c):
    """One direction's recurrence over proj [steps, batch, 4H] (``product``: h -> its quantized
    product with R, _product's); writes Y [steps, batch, H]
    and the final states h, c [batch, H] in place (each row's state stops at its length; a
    reverse direction starts at each row's last valid step)."""
    steps, batch, gates = proj.shape
    hidden = gates // 4
    f_act, g_act, h_act = acts
    p_i, p_o, p_f = peep[:hidden], peep[hidden : 2 * hidden], peep[2 * hidden :]
    chunks = _batch_chunks(batch)
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        live = (t < lens)[:, None]
        # a finished row's state enters the product as zeros: with those, the states quantized
        # together are onnxruntime's (to the bit without sequence_lens; with it, within a
        # quantization step)
        h_in = np.where(live, h, 0)
        z = proj[t] + np.concatenate([product(h_in[part]) for part in chunks])
        if clipped is not None:
            clipped(z)
        zi, zo, zf, zc = (z[:, g * hidden : (g + 1) * hidden] for g in range(4))
        i = _act(f_act, zi + p_i * c)
        f = 1 - i if input_forget else _act(f_act, zf + p_f * c)
        c_new = f * c + i * _act(g_act, zc)
        o = _act(f_act, zo + p_o * c_new)
        h_new = o * _act(h_act, c_new)
        Y[t] = np.where(live, h_new, 0)
        h[...] = np.where(live, h_new, h)
        c[...] = np.where(live, c_new, c)


def _batch_chunks(batch: int) -> list[slice]:
    """The row blocks whose hidden states are quantized together. onnxruntime splits the batch
    evenly over its intra-op threads (default: one per core) and quantizes each block on its
    own, so the same thread count gives the same quantization (a different one: results
    within a quantization step)."""
    threads = native.thread_setting() or os.cpu_count() or 1
    size = -(-batch // threads)
    return [slice(b, b + size) for b in range(0, batch, size)]


def _act(fn, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    fn(x, out)
    return out


@op("QLinearWhere", since=1, domain=MS)
def q_linear_where(
    condition, X, x_scale, x_zero_point, Y, y_scale, y_zero_point, z_scale, z_zero_point
):
    """Where(condition, X, Y) requantized to z's scale and zero point: each branch is
    dequantized and quantized again (an identity when its parameters equal z's)."""
    z_dtype = np.asarray(z_zero_point).dtype

    def requantized(v, scale, zp):
        if np.array_equal(scale, z_scale) and np.array_equal(zp, z_zero_point):
            return np.asarray(v)
        return _q(_deq(v, scale, zp), z_scale, z_zero_point, z_dtype)

    x = requantized(X, x_scale, x_zero_point)
    y = requantized(Y, y_scale, y_zero_point)
    return np.where(np.asarray(condition, bool), x, y).astype(z_dtype, copy=False)
