"""Recurrent layers: RNN, GRU, LSTM.

All three share one driver: the input projection X*W^T + Wb of every time step is one matmul up
front; each time step then costs one recurrent matmul for the whole batch and all gates. Reverse
directions and ``sequence_lens`` are handled by gathering each batch entry's valid steps in
reverse, so every direction runs the same forward loop.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..registry import op

# --- activations: name -> (function(x, alpha, beta), default alpha, default beta) ---------------
# alpha/beta are drawn, in order, from activation_alpha/activation_beta only by the activations
# that take them (as onnxruntime does); names match case-insensitively. Defaults are those of the
# ONNX operators of the same name (Affine: the former Affine op's 1, 0). ScaledTanh has no ONNX
# default: onnxruntime's 0, 0 is used.


def _sigmoid(x, a, b):
    # split by sign so exp never overflows
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_ACTIVATIONS: dict[str, tuple[Callable, float | None, float | None]] = {
    "relu": (lambda x, a, b: np.maximum(x, 0), None, None),
    "tanh": (lambda x, a, b: np.tanh(x), None, None),
    "sigmoid": (_sigmoid, None, None),
    "affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: np.where(x >= a, x, 0), 1.0, None),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), 0.0, 0.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))), 1.0, None),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), None, None),
    "softplus": (lambda x, a, b: np.logaddexp(0, x), None, None),
}


def _activations(names, alphas, betas, per_direction: int, n_dirs: int, defaults: list[str]):
    """One list of ``per_direction`` activation callables per direction."""
    names = list(names) if names else defaults * n_dirs
    if len(names) < per_direction * n_dirs:  # one set given for both directions
        names = names[:per_direction] * n_dirs
    alphas, betas = list(alphas or []), list(betas or [])
    funcs = []
    for name in names[: per_direction * n_dirs]:
        fn, alpha, beta = _ACTIVATIONS[name.lower()]
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        funcs.append(lambda x, fn=fn, a=alpha, b=beta: fn(x, a, b))
    return [funcs[d * per_direction : (d + 1) * per_direction] for d in range(n_dirs)]


# --- the shared driver ---------------------------------------------------------------------------


def _compute_dtype(dtype):
    return np.float64 if dtype == np.float64 else np.float32


def _reverse_index(lens: np.ndarray, seq_len: int) -> np.ndarray:
    """[seq, batch] time index that walks each entry's valid steps backwards (padding stays)."""
    t = np.arange(seq_len)[:, None]
    return np.where(t < lens, lens - 1 - t, t)


def _run(cell, X, lens, h0, c0, direction: str, n_dirs: int):
    """Run ``cell`` over [seq, batch, ...] for each direction.

    ``cell(d, x_t, h, c) -> (h, c)`` computes one step of direction ``d``. Padded steps keep the
    previous state and emit zeros. Returns Y [seq, dirs, batch, hidden], Y_h and Y_c [dirs, ...].
    """
    seq_len, batch = X.shape[:2]
    valid = np.arange(seq_len)[:, None] < lens  # [seq, batch]
    ys, hs, cs = [], [], []
    batch_idx = np.arange(batch)
    for d in range(n_dirs):
        reverse = direction == "reverse" or d == 1
        order = _reverse_index(lens, seq_len) if reverse else None
        xs = X[order, batch_idx] if reverse else X
        h, c = h0[d], c0[d]
        y = np.zeros((seq_len, *h.shape), dtype=h.dtype)
        for t in range(seq_len):
            h_new, c_new = cell(d, xs[t], h, c)
            keep = valid[t][:, None]
            h, c = np.where(keep, h_new, h), np.where(keep, c_new, c)
            y[t] = np.where(keep, h, 0)
        if reverse:
            # the gather is a per-entry permutation of time steps: scatter back the same way
            unrev = np.empty_like(y)
            unrev[order, batch_idx] = y
            y = unrev
        ys.append(y)
        hs.append(h)
        cs.append(c)
    return np.stack(ys, axis=1), np.stack(hs), np.stack(cs)


def _recurrent_layer(
    X, W, R, B, sequence_lens, initial_h, initial_c, *, n_gates, direction, layout
):
    """Common preparation: layout, dtype, bias halves, initial states, the input projection."""
    X = np.asarray(X)
    out_dtype = X.dtype
    ct = _compute_dtype(out_dtype)
    if layout:
        X = X.swapaxes(0, 1)
        initial_h = None if initial_h is None else np.asarray(initial_h).swapaxes(0, 1)
        initial_c = None if initial_c is None else np.asarray(initial_c).swapaxes(0, 1)
    X, W, R = X.astype(ct), np.asarray(W, ct), np.asarray(R, ct)
    n_dirs, hidden = W.shape[0], R.shape[-1]
    seq_len, batch = X.shape[:2]
    B = np.zeros((n_dirs, 2 * n_gates * hidden), ct) if B is None else np.asarray(B, ct)
    Wb, Rb = B[:, : n_gates * hidden], B[:, n_gates * hidden :]
    zeros = np.zeros((n_dirs, batch, hidden), ct)
    h0 = zeros if initial_h is None else np.asarray(initial_h, ct)
    c0 = zeros if initial_c is None else np.asarray(initial_c, ct)
    lens = (
        np.full(batch, seq_len)
        if sequence_lens is None
        else np.asarray(sequence_lens).astype(np.int64)
    )
    # X*W^T + Wb for every step and direction at once: [dirs, seq, batch, gates*hidden]
    flat = X.reshape(seq_len * batch, -1)  # one 2-D GEMM per direction
    xw = np.stack([(flat @ W[d].T).reshape(seq_len, batch, -1) for d in range(n_dirs)])
    xw += Wb[:, None, None, :]
    return dict(xw=xw, R=R, Rb=Rb, h0=h0, c0=c0, lens=lens, n_dirs=n_dirs, out_dtype=out_dtype)


def _finish(Y, Y_h, Y_c, out_dtype, layout):
    if layout:
        Y, Y_h, Y_c = Y.transpose(2, 0, 1, 3), Y_h.swapaxes(0, 1), Y_c.swapaxes(0, 1)
    return Y.astype(out_dtype), Y_h.astype(out_dtype), Y_c.astype(out_dtype)


def _clipper(clip):
    return (lambda v: v) if clip is None else (lambda v: np.clip(v, -clip, clip))


def _run_layer(prep, cell, direction):
    xw = np.moveaxis(prep["xw"], 0, 2)  # [seq, batch, dirs, gates*hidden]: time-major for _run
    return _run(cell, xw, prep["lens"], prep["h0"], prep["c0"], direction, prep["n_dirs"])


# --- RNN -----------------------------------------------------------------------------------------


@op("RNN", since=1)
def rnn(
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    *,
    hidden_size=None,
    activations=("Tanh", "Tanh"),
    activation_alpha=None,
    activation_beta=None,
    clip=None,
    direction="forward",
    layout=0,
    output_sequence=0,
):
    p = _recurrent_layer(
        X, W, R, B, sequence_lens, initial_h, None, n_gates=1, direction=direction, layout=layout
    )
    acts = _activations(activations, activation_alpha, activation_beta, 1, p["n_dirs"], ["Tanh"])
    clipped, R_, Rb = _clipper(clip), p["R"], p["Rb"]

    def cell(d, xw, h, c):
        # Ht = f(Xt*(Wi^T) + Ht-1*(Ri^T) + Wbi + Rbi)
        return acts[d][0](clipped(xw[:, d] + h @ R_[d].T + Rb[d])), c

    Y, Y_h, Y_c = _run_layer(p, cell, direction)
    return _finish(Y, Y_h, Y_c, p["out_dtype"], layout)[:2]


# --- GRU -----------------------------------------------------------------------------------------


@op("GRU", since=1)
def gru(
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    *,
    hidden_size=None,
    activations=None,
    activation_alpha=None,
    activation_beta=None,
    clip=None,
    direction="forward",
    layout=0,
    linear_before_reset=0,
    output_sequence=0,
):
    p = _recurrent_layer(
        X, W, R, B, sequence_lens, initial_h, None, n_gates=3, direction=direction, layout=layout
    )
    acts = _activations(
        activations, activation_alpha, activation_beta, 2, p["n_dirs"], ["Sigmoid", "Tanh"]
    )
    clipped, R_, Rb = _clipper(clip), p["R"], p["Rb"]
    hs = R_.shape[-1]

    def cell(d, xw, h, c):
        f, g = acts[d]
        x_zr, x_h = xw[:, d, : 2 * hs], xw[:, d, 2 * hs :]
        zr = f(clipped(x_zr + h @ R_[d, : 2 * hs].T + Rb[d, : 2 * hs]))
        z, r = zr[:, :hs], zr[:, hs:]
        Rh, Rbh = R_[d, 2 * hs :], Rb[d, 2 * hs :]
        if linear_before_reset:
            h_tilde = g(clipped(x_h + r * (h @ Rh.T + Rbh)))
        else:
            h_tilde = g(clipped(x_h + (r * h) @ Rh.T + Rbh))
        return (1 - z) * h_tilde + z * h, c

    Y, Y_h, Y_c = _run_layer(p, cell, direction)
    return _finish(Y, Y_h, Y_c, p["out_dtype"], layout)[:2]


# --- LSTM ----------------------------------------------------------------------------------------


@op("LSTM", since=1)
def lstm(
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    initial_c=None,
    P=None,
    *,
    hidden_size=None,
    activations=None,
    activation_alpha=None,
    activation_beta=None,
    clip=None,
    direction="forward",
    input_forget=0,
    layout=0,
    output_sequence=0,
):
    p = _recurrent_layer(
        X,
        W,
        R,
        B,
        sequence_lens,
        initial_h,
        initial_c,
        n_gates=4,
        direction=direction,
        layout=layout,
    )
    acts = _activations(
        activations, activation_alpha, activation_beta, 3, p["n_dirs"], ["Sigmoid", "Tanh", "Tanh"]
    )
    clipped, R_, Rb = _clipper(clip), p["R"], p["Rb"]
    hs = R_.shape[-1]
    peep = np.zeros((p["n_dirs"], 3 * hs), R_.dtype) if P is None else np.asarray(P, R_.dtype)

    def cell(d, xw, h, c):
        f, g, hfn = acts[d]
        gates = xw[:, d] + h @ R_[d].T + Rb[d]  # gate order i, o, f, c
        pi, po, pf = peep[d, :hs], peep[d, hs : 2 * hs], peep[d, 2 * hs :]
        i = f(clipped(gates[:, :hs] + pi * c))
        forget = 1 - i if input_forget else f(clipped(gates[:, 2 * hs : 3 * hs] + pf * c))
        c_new = forget * c + i * g(clipped(gates[:, 3 * hs :]))
        o = f(clipped(gates[:, hs : 2 * hs] + po * c_new))
        return o * hfn(c_new), c_new

    return _finish(*_run_layer(p, cell, direction), p["out_dtype"], layout)
