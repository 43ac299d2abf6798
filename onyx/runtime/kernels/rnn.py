"""Recurrent layers: RNN, GRU, LSTM.

The three share one plan (the spec's equations are per direction; here every direction runs in
the same loop), with states kept feature-major (``h [dirs, H, batch]``) so that the recurrent
product is ``R @ h`` with the weights as given:

- The input projection W*Xt + Wb (+ the recurrent biases that sit outside any product) of every
  time step and direction is one batched BLAS matmul up front: ``xs [dirs, G*H, steps, batch]``.
  A reverse direction reads X time-reversed (with ``sequence_lens``: each batch entry's valid
  steps reversed, padding left in place), so every direction walks its steps forward.
- Each step is one batched recurrent matmul ``R [dirs, G*H, H] @ h [dirs, H, batch]`` followed
  by gate math in place on preallocated buffers, with activations compiled to in-place
  functions before the loop. The new hidden state is written straight into ``Ys [steps, dirs,
  H, batch]``; Y is rearranged from it once at the end.
- ``sequence_lens`` costs nothing per step: batch columns never mix, so a finished entry may run
  on through its padding; afterwards each entry's state at its last valid step is the final
  state and Y is zeroed past its length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..registry import op

# --- activations ---------------------------------------------------------------------------------
# name -> (function(x, out, alpha, beta) writing into out (which may be x), default alpha, default
# beta). alpha/beta are drawn, in order, from activation_alpha/activation_beta only by the
# activations that take them (as onnxruntime does); names match case-insensitively. Defaults are
# those of the ONNX operators of the same name (Affine: the former Affine op's 1, 0). ScaledTanh
# has no ONNX default: onnxruntime's 0, 0 is used.


def _sigmoid(x, out, a, b):
    # 1 / (1 + exp(-x)): exp overflows to inf for x < -88 and the result is the exact limit 0
    np.negative(x, out=out)
    np.exp(out, out=out)
    np.add(out, 1, out=out)
    np.reciprocal(out, out=out)


def _affine(x, out, a, b):
    np.multiply(x, a, out=out)
    np.add(out, b, out=out)


def _leaky_relu(x, out, a, b):
    np.multiply(x, np.where(x < 0, a, 1).astype(x.dtype), out=out)


def _thresholded_relu(x, out, a, b):
    np.copyto(out, np.where(x >= a, x, 0))


def _scaled_tanh(x, out, a, b):
    np.multiply(x, b, out=out)
    np.tanh(out, out=out)
    np.multiply(out, a, out=out)


def _hard_sigmoid(x, out, a, b):
    _affine(x, out, a, b)
    np.clip(out, 0, 1, out=out)


def _elu(x, out, a, b):
    np.copyto(out, np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))))


def _softsign(x, out, a, b):
    np.divide(x, np.abs(x) + 1, out=out)


_ACTIVATIONS: dict[str, tuple[Callable, float | None, float | None]] = {
    "relu": (lambda x, out, a, b: np.maximum(x, 0, out=out), None, None),
    "tanh": (lambda x, out, a, b: np.tanh(x, out=out), None, None),
    "sigmoid": (_sigmoid, None, None),
    "affine": (_affine, 1.0, 0.0),
    "leakyrelu": (_leaky_relu, 0.01, None),
    "thresholdedrelu": (_thresholded_relu, 1.0, None),
    "scaledtanh": (_scaled_tanh, 0.0, 0.0),
    "hardsigmoid": (_hard_sigmoid, 0.2, 0.5),
    "elu": (_elu, 1.0, None),
    "softsign": (_softsign, None, None),
    "softplus": (lambda x, out, a, b: np.logaddexp(0, x, out=out), None, None),
}


def _activations(names, alphas, betas, per_direction: int, n_dirs: int, defaults: list[str]):
    """``per_direction`` activations ``act(x, out)``, each over [dirs, ...] (all directions)."""
    names = list(names) if names else defaults * n_dirs
    if len(names) < per_direction * n_dirs:  # one set given for both directions
        names = names[:per_direction] * n_dirs
    alphas, betas = list(alphas or []), list(betas or [])
    specs = []  # (function, alpha, beta) per direction and gate
    for name in names[: per_direction * n_dirs]:
        fn, alpha, beta = _ACTIVATIONS[name.lower()]
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        specs.append((fn, alpha, beta))
    return [_over_directions(specs[k::per_direction]) for k in range(per_direction)]


def _over_directions(specs: list) -> Callable:
    """One activation over all directions: a single call when they agree."""
    if all(s == specs[0] for s in specs):
        fn, a, b = specs[0]
        return lambda x, out: fn(x, out, a, b)

    def per_direction(x, out):
        for d, (fn, a, b) in enumerate(specs):
            fn(x[d], out[d], a, b)

    return per_direction


def _clipper(clip) -> Callable | None:
    if clip is None:
        return None
    return lambda v: np.clip(v, -clip, clip, out=v)


# --- the recurrent product -----------------------------------------------------------------------

# OpenBLAS packs both operands of a GEMM unless M*N*K is below ~100**3, where its small-matrix
# kernels run unpacked. For R [G*H, H] @ h [H, batch], repacking R every step dominates once the
# batch is a few columns: split R's rows into chunks under that size (measured at batch 8,
# H 256, G 4: 84 us -> 43 us a step, onnxruntime's MatMul 46 us). One batched np.matmul runs them.
_SMALL_GEMM = 100**3
_MIN_CHUNK_ROWS = 32


def _row_chunks(rows: int, batch: int, k: int) -> int:
    if batch == 1 or rows * batch * k <= _SMALL_GEMM:
        return 1
    for n in range(2, rows // _MIN_CHUNK_ROWS + 1):
        if rows % n == 0 and (rows // n) * batch * k <= _SMALL_GEMM:
            return n
    return 1


def _recurrent_matmul(R: np.ndarray, batch: int) -> Callable:
    """``mm(h, out)``: out [dirs, rows, batch] = R [dirs, rows, K] @ h [dirs, K, batch]."""
    dirs, rows, k = R.shape
    n = _row_chunks(rows, batch, k)
    if n == 1:
        return lambda h, out: np.matmul(R, h, out=out)
    chunked = np.ascontiguousarray(R).reshape(dirs, n, rows // n, k)
    shape = (dirs, n, rows // n, batch)
    # splitting the rows axis of out is always a view, so the product lands in out
    return lambda h, out: np.matmul(chunked, h[:, None], out=out.reshape(shape))


# --- the shared plan -----------------------------------------------------------------------------


@dataclass
class _Layer:
    xs: np.ndarray  # [dirs, G*H, steps, batch]: input projections in each direction's step order
    R: np.ndarray  # [dirs, G*H, H]
    Rb: np.ndarray  # [dirs, G*H, 1]: recurrent bias (the part not folded into xs is still needed)
    h0: np.ndarray  # [dirs, H, batch]
    c0: np.ndarray  # [dirs, H, batch]
    lens: np.ndarray | None  # [batch], None when every entry runs the whole sequence
    reverse: list[bool]  # per direction
    out_dtype: np.dtype
    layout: int

    @property
    def n_dirs(self) -> int:
        return self.R.shape[0]

    @property
    def hidden(self) -> int:
        return self.R.shape[2]

    @property
    def steps(self) -> int:
        return self.xs.shape[2]

    @property
    def batch(self) -> int:
        return self.xs.shape[3]

    def matmul(self, lo: int = 0, hi: int | None = None) -> Callable:
        """The recurrent product for gate rows lo:hi."""
        return _recurrent_matmul(self.R[:, lo:hi], self.batch)

    def history(self) -> np.ndarray:
        """Uninitialised [steps, dirs, H, batch]: the state after each step."""
        return np.empty((self.steps, self.n_dirs, self.hidden, self.batch), self.xs.dtype)

    def buffer(self, rows: int) -> np.ndarray:
        return np.empty((self.n_dirs, rows, self.batch), self.xs.dtype)


def _reverse_index(lens: np.ndarray, seq_len: int) -> np.ndarray:
    """[seq, batch] time index that walks each entry's valid steps backwards (padding stays).

    It is its own inverse: it maps step order back to time order too."""
    t = np.arange(seq_len)[:, None]
    return np.where(t < lens, lens - 1 - t, t)


def _feature_major(state, shape, ct) -> np.ndarray:
    """[dirs, batch, H] (zeros when absent) as a contiguous [dirs, H, batch]."""
    if state is None:
        return np.zeros(shape, ct)
    return np.ascontiguousarray(np.asarray(state, ct).transpose(0, 2, 1))


def _prepare(X, W, R, B, sequence_lens, initial_h, initial_c, *, direction, layout, folded):
    """Layout, dtype, states and the input projection. ``folded(Rb)`` is the part of the
    recurrent bias that can be added once to the projection (it sits outside any product)."""
    X = np.asarray(X)
    out_dtype = X.dtype
    ct = np.float64 if out_dtype == np.float64 else np.float32
    if layout:
        X = X.swapaxes(0, 1)
        initial_h = None if initial_h is None else np.asarray(initial_h).swapaxes(0, 1)
        initial_c = None if initial_c is None else np.asarray(initial_c).swapaxes(0, 1)
    X, W, R = X.astype(ct, copy=False), np.asarray(W, ct), np.asarray(R, ct)
    n_dirs, gh, hidden = R.shape
    seq_len, batch, n_in = X.shape
    B = np.zeros((n_dirs, 2 * gh), ct) if B is None else np.asarray(B, ct)
    Wb, Rb = B[:, :gh], B[:, gh:]
    lens = None
    if sequence_lens is not None:
        lens = np.asarray(sequence_lens).astype(np.int64)
        if (lens == seq_len).all():
            lens = None  # the common case: no masking at all
    reverse = [direction == "reverse" or d == 1 for d in range(n_dirs)]
    # one batched GEMM for every step of every direction: [dirs, G*H, in] @ [dirs, in, seq*batch]
    xd = [X if not rev else X[::-1] if lens is None else X[_reverse_index(lens, seq_len),
          np.arange(batch)] for rev in reverse]  # fmt: skip
    stacked = xd[0][None] if n_dirs == 1 else np.stack(xd)
    xs = np.matmul(W, stacked.reshape(n_dirs, seq_len * batch, n_in).transpose(0, 2, 1))
    xs += (Wb + folded(Rb))[:, :, None]
    states = (n_dirs, hidden, batch)
    return _Layer(
        xs=xs.reshape(n_dirs, gh, seq_len, batch),
        R=R,
        Rb=Rb[:, :, None],
        h0=_feature_major(initial_h, states, ct),
        c0=_feature_major(initial_c, states, ct),
        lens=lens,
        reverse=reverse,
        out_dtype=out_dtype,
        layout=layout,
    )


def _final(layer: _Layer, hist: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """[dirs, batch, H]: each entry's state after its last valid step (the initial one if none)."""
    initial = initial.transpose(0, 2, 1)
    if hist.shape[0] == 0:
        return initial.copy()
    if layer.lens is None:
        return hist[-1].transpose(0, 2, 1).copy()
    last = layer.lens - 1
    state = hist[np.maximum(last, 0), :, :, np.arange(layer.batch)]  # [batch, dirs, H]
    return np.where((last >= 0)[:, None], state.swapaxes(0, 1), initial)


def _finish(layer: _Layer, Ys: np.ndarray, Cs: np.ndarray | None = None):
    """Y, Y_h (and Y_c) in time order and the requested layout and dtype."""
    Y_h = _final(layer, Ys, layer.h0)
    Y_c = None if Cs is None else _final(layer, Cs, layer.c0)
    steps, dirs, hidden, batch = Ys.shape
    if layer.lens is not None:
        past_end = np.arange(steps)[:, None] >= layer.lens
        np.copyto(Ys, 0, where=past_end[:, None, None, :])
    Y = np.empty((batch, steps, dirs, hidden) if layer.layout else (steps, dirs, batch, hidden),
                 layer.out_dtype)  # fmt: skip
    view = Y.transpose(1, 2, 0, 3) if layer.layout else Y  # [steps, dirs, batch, H]
    for d, rev in enumerate(layer.reverse):
        hist = Ys[:, d]  # [steps, H, batch]: step order back to time order, batch-major
        if not rev:
            view[:, d] = hist.transpose(0, 2, 1)
        elif layer.lens is None:
            view[:, d] = hist[::-1].transpose(0, 2, 1)
        else:
            view[:, d] = hist[_reverse_index(layer.lens, steps), :, np.arange(batch)]
    outs = [Y_h] if Y_c is None else [Y_h, Y_c]
    if layer.layout:
        outs = [o.swapaxes(0, 1) for o in outs]
    return (Y, *(np.ascontiguousarray(o, layer.out_dtype) for o in outs))


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
    # Ht = f(Xt*(Wi^T) + Ht-1*(Ri^T) + Wbi + Rbi): both biases go into the projection
    layer = _prepare(X, W, R, B, sequence_lens, initial_h, None,
                     direction=direction, layout=layout, folded=lambda rb: rb)  # fmt: skip
    (f,) = _activations(activations, activation_alpha, activation_beta, 1, layer.n_dirs, ["Tanh"])
    clipped, mm = _clipper(clip), layer.matmul()
    Ys, xs, h = layer.history(), layer.xs, layer.h0
    for t in range(layer.steps):
        h_new = Ys[t]
        mm(h, h_new)
        h_new += xs[:, :, t]
        if clipped:
            clipped(h_new)
        f(h_new, h_new)
        h = h_new
    return _finish(layer, Ys)


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
    # zt = f(Xt*Wz^T + Ht-1*Rz^T + Wbz + Rbz), rt likewise
    # ht = g(Xt*Wh^T + (rt (.) Ht-1)*Rh^T + Rbh + Wbh)     linear_before_reset = 0
    # ht = g(Xt*Wh^T + rt (.) (Ht-1*Rh^T + Rbh) + Wbh)     linear_before_reset != 0
    # Ht = (1 - zt) (.) ht + zt (.) Ht-1
    hs = np.shape(R)[-1]

    def folded(rb):  # Rbh sits inside the reset product when linear_before_reset
        return np.concatenate([rb[:, : 2 * hs], rb[:, 2 * hs :] * (not linear_before_reset)], 1)

    layer = _prepare(X, W, R, B, sequence_lens, initial_h, None,
                     direction=direction, layout=layout, folded=folded)  # fmt: skip
    f, g = _activations(
        activations, activation_alpha, activation_beta, 2, layer.n_dirs, ["Sigmoid", "Tanh"]
    )
    clipped = _clipper(clip)
    Ys, h = layer.history(), layer.h0
    xs_zr, xs_h = layer.xs[:, : 2 * hs], layer.xs[:, 2 * hs :]
    Rbh = layer.Rb[:, 2 * hs :]
    gates = layer.buffer(3 * hs)
    zr, z, r, ht = gates[:, : 2 * hs], gates[:, :hs], gates[:, hs : 2 * hs], gates[:, 2 * hs :]
    if linear_before_reset:
        mm_all = layer.matmul()
    else:
        mm_zr, mm_h, rh = layer.matmul(0, 2 * hs), layer.matmul(2 * hs), np.empty_like(h)
    for t in range(layer.steps):
        if linear_before_reset:
            mm_all(h, gates)
        else:
            mm_zr(h, zr)
        zr += xs_zr[:, :, t]
        if clipped:
            clipped(zr)
        f(zr, zr)
        if linear_before_reset:
            ht += Rbh
            ht *= r
        else:
            np.multiply(r, h, out=rh)
            mm_h(rh, ht)
        ht += xs_h[:, :, t]
        if clipped:
            clipped(ht)
        g(ht, ht)
        h_new = Ys[t]  # ht + zt (.) (Ht-1 - ht)
        np.subtract(h, ht, out=h_new)
        h_new *= z
        h_new += ht
        h = h_new
    return _finish(layer, Ys)


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
    # it = f(Xt*Wi^T + Ht-1*Ri^T + Pi (.) Ct-1 + Wbi + Rbi)      (gate order i, o, f, c)
    # ft = f(Xt*Wf^T + Ht-1*Rf^T + Pf (.) Ct-1 + Wbf + Rbf)      (1 - it when input_forget)
    # ct = g(Xt*Wc^T + Ht-1*Rc^T + Wbc + Rbc)
    # Ct = ft (.) Ct-1 + it (.) ct
    # ot = f(Xt*Wo^T + Ht-1*Ro^T + Po (.) Ct + Wbo + Rbo)
    # Ht = ot (.) h(Ct)
    layer = _prepare(X, W, R, B, sequence_lens, initial_h, initial_c,
                     direction=direction, layout=layout, folded=lambda rb: rb)  # fmt: skip
    f, g, h_act = _activations(
        activations, activation_alpha, activation_beta, 3, layer.n_dirs, ["Sigmoid", "Tanh", "Tanh"]
    )
    clipped, mm, xs = _clipper(clip), layer.matmul(), layer.xs
    Ys, Cs, h, c = layer.history(), layer.history(), layer.h0, layer.c0
    hs = layer.hidden
    peep = None
    if P is not None and np.any(P):
        peep = np.asarray(P, Ys.dtype)[:, :, None]  # [dirs, 3H, 1]
        p_i, p_o, p_f = peep[:, :hs], peep[:, hs : 2 * hs], peep[:, 2 * hs :]
    # the i, o, f gates take one activation call unless the output gate must wait for Ct
    fused = peep is None and not input_forget
    gates = layer.buffer(4 * hs)
    i, o, fg, cg = (gates[:, k * hs : (k + 1) * hs] for k in range(4))
    iof, ifc = gates[:, : 3 * hs], gates[:, 2 * hs :]
    tmp = np.empty_like(h)
    for t in range(layer.steps):
        mm(h, gates)
        gates += xs[:, :, t]
        if peep is not None:
            i += np.multiply(p_i, c, out=tmp)
            fg += np.multiply(p_f, c, out=tmp)
        if clipped:  # with peepholes the output gate's input is complete only once Ct is known
            clipped(gates if peep is None else i)
            if peep is not None:
                clipped(ifc)
        if fused:
            f(iof, iof)
        else:
            f(i, i)
            if input_forget:
                np.subtract(1, i, out=fg)
            else:
                f(fg, fg)
        g(cg, cg)
        c_new = Cs[t]
        np.multiply(fg, c, out=c_new)
        cg *= i
        c_new += cg
        if not fused:
            if peep is not None:
                o += np.multiply(p_o, c_new, out=tmp)
                if clipped:
                    clipped(o)
            f(o, o)
        h_new = Ys[t]
        h_act(c_new, h_new)
        h_new *= o
        h, c = h_new, c_new
    return _finish(layer, Ys, Cs)
