"""Recurrent layers: RNN, GRU, LSTM.

The three share one plan (the spec's equations are per direction; here every direction runs in
the same loop). States are ``h [dirs, batch, H]``, and gate pre-activations are gate-major,
``[gates, dirs, batch, H]``, so that each gate (and the i/o/f block of LSTM) is one contiguous
array for all directions: numpy's elementwise calls on small arrays are much faster contiguous
than strided.

- The input projection X*W^T + Wb (+ the recurrent biases that sit outside any product) of every
  time step and direction is one batched BLAS matmul up front, stored step-major so that each
  step's ``[gates, dirs, batch, H]`` is contiguous too. A reverse direction reads X
  time-reversed (with ``sequence_lens``: each batch entry's valid steps reversed, padding left in
  place), so every direction walks its steps forward.
- The common LSTM and PyTorch's GRU (whole sequences, float32, H a multiple of 16) run in C
  instead (native/rnn.c), their projection a GEMM on the native pool (conv_f32.c) that rnn.c
  reads as it lands, ``[dirs, gates, H, steps, batch]``; sessions count them as pool ops.
- Each step is one batched recurrent matmul ``h [dirs, batch, H] @ R^T [gates, dirs, H, H]``
  followed by gate math in place on preallocated buffers, with activations (and their constants,
  in the compute dtype) compiled before the loop. The new hidden state is written straight into
  ``Ys [steps, dirs, batch, H]``, which is Y (reverse directions are put back in time order
  once at the end).
- ``sequence_lens`` costs nothing per step: batch rows never mix, so a finished entry may run on
  through its padding; afterwards each entry's state at its last valid step is the final state
  and Y is zeroed past its length.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import native
from ..registry import op
from .derived import derived, frozen, prepared
from .sigmoids import hard_sigmoid_into, sigmoid_into

# --- activations ---------------------------------------------------------------------------------
# name -> (factory(alpha, beta, dtype) of a function act(x, out) writing into out (which may be
# x), default alpha, default beta). alpha and beta arrive as 0-d arrays of the compute dtype
# (numpy takes those faster than Python floats). They are drawn, in order, from activation_alpha
# and activation_beta only by the activations that take them (as onnxruntime does); names match
# case-insensitively. Defaults are those of the ONNX operators of the same name (Affine: the
# former Affine op's 1, 0). ScaledTanh has no ONNX default: onnxruntime's 0, 0 is used.
#
# Hot loops pass ufunc outputs positionally (np.add(a, b, out)): numpy parses that faster than
# the out= keyword, which counts where a call costs a few hundred nanoseconds.


def _sigmoid(a, b, dtype):
    return sigmoid_into  # (exp overflows to inf for x < -88: the limit 0)


def _affine(a, b, dtype):
    def affine(x, out):
        np.multiply(x, a, out)
        np.add(out, b, out)

    return affine


def _scaled_tanh(a, b, dtype):
    def scaled_tanh(x, out):
        np.multiply(x, b, out)
        np.tanh(out, out)
        np.multiply(out, a, out)

    return scaled_tanh


def _hard_sigmoid(a, b, dtype):
    return lambda x, out: hard_sigmoid_into(x, a, b, out)


def _plain(fn: Callable) -> Callable:
    """A factory for an activation given as out = fn(x, alpha, beta)."""
    return lambda a, b, dtype: lambda x, out: np.copyto(out, fn(x, a, b))


_ACTIVATIONS: dict[str, tuple[Callable, float | None, float | None]] = {
    "relu": (lambda a, b, dtype: lambda x, out: np.clip(x, 0, np.inf, out), None, None),
    "tanh": (lambda a, b, dtype: lambda x, out: np.tanh(x, out), None, None),
    "sigmoid": (_sigmoid, None, None),
    "affine": (_affine, 1.0, 0.0),
    "leakyrelu": (_plain(lambda x, a, b: np.where(x < 0, a * x, x)), 0.01, None),
    "thresholdedrelu": (_plain(lambda x, a, b: np.where(x > a, x, 0)), 1.0, None),
    "scaledtanh": (_scaled_tanh, 0.0, 0.0),
    "hardsigmoid": (_hard_sigmoid, 0.2, 0.5),
    "elu": (_plain(lambda x, a, b: np.where(x < 0, a * np.expm1(np.minimum(x, 0)), x)), 1.0, None),
    "softsign": (_plain(lambda x, a, b: x / (np.abs(x) + 1)), None, None),
    "softplus": (lambda a, b, dtype: lambda x, out: np.logaddexp(0, x, out), None, None),
}


def _activation_names(names, per_direction: int, n_dirs: int, defaults) -> list[str]:
    """Lower-case activation names, ``per_direction`` for each direction in turn."""
    if not names:
        return defaults * n_dirs
    if len(names) < per_direction * n_dirs:  # one set given for both directions
        names = list(names[:per_direction]) * n_dirs
    return [n.lower() for n in names[: per_direction * n_dirs]]


def _activations(names: list[str], alphas, betas, per_direction: int, dtype) -> list[Callable]:
    """``per_direction`` activations ``act(x, out)``, each over [dirs, ...] (all directions),
    from the names of :func:`_activation_names`."""
    alphas, betas = list(alphas or ()), list(betas or ())
    specs = []  # (factory, alpha, beta) per direction and gate
    for name in names:
        make, alpha, beta = _ACTIVATIONS[name]
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        specs.append((make, alpha, beta))
    return [_over_directions(specs[k::per_direction], dtype) for k in range(per_direction)]


def _over_directions(specs: list, dtype) -> Callable:
    """One activation over all directions: a single call when they agree."""

    def build(make, a, b):
        return make(
            None if a is None else np.asarray(a, dtype),
            None if b is None else np.asarray(b, dtype),
            dtype,
        )

    if all(s == specs[0] for s in specs):
        return build(*specs[0])
    acts = [build(*s) for s in specs]

    def per_direction(x, out):  # x [..., dirs, batch, H]
        for d, act in enumerate(acts):
            act(x[..., d, :, :], out[..., d, :, :])

    return per_direction


def _clipper(clip, dtype) -> Callable | None:
    if clip is None:
        return None
    lo, hi = np.asarray(-clip, dtype), np.asarray(clip, dtype)
    return lambda v: np.clip(v, lo, hi, v)


# --- the recurrent product -----------------------------------------------------------------------

# OpenBLAS packs both operands of a GEMM unless M*N*K is below ~100**3 (and both are row-major),
# where its small-matrix kernels run unpacked. For h [batch, H] @ R^T [H, G*H], repacking R every
# step dominates once the batch is a few rows: one product per gate (and, past that size, per
# chunk of columns) on a contiguous R^T stays under it. One batched np.matmul runs them all.
_SMALL_GEMM = 100**3
_MIN_CHUNK = 32


def _chunks(cols: int, batch: int, k: int) -> int:
    if cols * batch * k <= _SMALL_GEMM:
        return 1
    for n in range(2, cols // _MIN_CHUNK + 1):
        if cols % n == 0 and (cols // n) * batch * k <= _SMALL_GEMM:
            return n
    return 1


def _recurrent_matmul(R: np.ndarray, batch: int) -> Callable:
    """``mm(h, out)``: out [gates, dirs, batch, H] = h [dirs, batch, K] @ R^T, R [gates, dirs,
    H, K]."""
    gates, dirs, cols, k = R.shape
    if batch == 1:  # a matrix-vector product: R is read as it is
        RT = R.transpose(0, 1, 3, 2)
        return lambda h, out: np.matmul(h, RT, out)
    n = _chunks(cols, batch, k)
    RT = np.ascontiguousarray(R.reshape(gates, dirs, n, cols // n, k).transpose(0, 1, 2, 4, 3))
    if n == 1:
        RT = RT[:, :, 0]
        return lambda h, out: np.matmul(h, RT, out)
    shape = (gates, dirs, batch, n, cols // n)
    # splitting the last axis of out is a view, so each chunk's product lands in place
    return lambda h, out: np.matmul(h[:, None], RT, out.reshape(shape).swapaxes(2, 3))


#: Input projections up to this many multiply-adds rnn.c makes itself (project(), one native
#: call), larger ones run as a GEMM on the native pool (a 1x1 conv) before the recurrence.
_SELF_PROJECTED_MACS = 1 << 18

# --- the shared plan -----------------------------------------------------------------------------


class _Layer:
    """One RNN layer's operands, as the recurrence reads them. (A plain class: a dataclass
    compiles its methods when the module is imported, ~0.6 ms of a recurrent model's cold
    start.)"""

    def __init__(
        self,
        *,
        X: np.ndarray,  # [steps, batch, in] in the compute dtype (a view)
        W: np.ndarray,  # [dirs, gates * H, in]
        bias: np.ndarray,  # [dirs, gates * H]: the biases added to the input projections
        R: np.ndarray,  # [gates, dirs, H, H]
        Rb: np.ndarray,  # [gates, dirs, 1, H] (a view): recurrent bias xs does not hold
        h0: np.ndarray,  # [dirs, batch, H]
        c0: np.ndarray,  # [dirs, batch, H]
        lens: np.ndarray | None,  # [batch], None when every entry runs the whole sequence
        reverse: list[bool],  # per direction
        out_dtype: np.dtype,
        layout: int,
    ):
        self.X, self.W, self.bias, self.R, self.Rb = X, W, bias, R, Rb
        self.h0, self.c0, self.lens, self.reverse = h0, c0, lens, reverse
        self.out_dtype, self.layout = out_dtype, layout

    @property
    def dtype(self) -> np.dtype:
        return self.X.dtype

    @property
    def n_dirs(self) -> int:
        return self.R.shape[1]

    @property
    def hidden(self) -> int:
        return self.R.shape[2]

    @property
    def steps(self) -> int:
        return self.X.shape[0]

    @property
    def batch(self) -> int:
        return self.X.shape[1]

    def matmul(self, gates: slice = slice(None)) -> Callable:
        return _recurrent_matmul(self.R[gates], self.batch)

    def history(self) -> np.ndarray:
        """Uninitialised [steps, dirs, batch, H]: the state after each step."""
        return np.empty((self.steps, self.n_dirs, self.batch, self.hidden), self.dtype)

    def gate_buffer(self) -> np.ndarray:
        return np.empty((self.R.shape[0], self.n_dirs, self.batch, self.hidden), self.dtype)

    def step_major(self) -> np.ndarray:
        """[steps, gates, dirs, batch, H]: the input projections of every step, each direction
        in its step order (a reverse one's time-reversed), one batched BLAS matmul."""
        steps, batch, n_in = self.X.shape
        n_gates, dirs, hidden = self.R.shape[:3]
        proj = np.matmul(self.X.reshape(steps * batch, n_in), self.W.transpose(0, 2, 1))
        proj += self.bias[:, None, :]
        proj = proj.reshape(dirs, steps, batch, n_gates, hidden)
        # step-major and contiguous: numpy adds a contiguous step in a fraction of the time of
        # a strided one, which pays for this one copy many times over
        if dirs == 1 and not self.reverse[0]:
            return np.ascontiguousarray(proj.transpose(1, 3, 0, 2, 4))
        xs = np.empty((steps, n_gates, dirs, batch, hidden), self.dtype)
        for d, rev in enumerate(self.reverse):
            xs[:, :, d] = (_in_step_order(proj[d], self.lens) if rev else proj[d]).swapaxes(1, 2)
        return xs

    @property
    def self_projected(self) -> bool:
        """Whether rnn.c projects X itself (a few steps at batch 1, or a product small
        enough that the GEMM's set-up and the transposes around it cost more)."""
        steps, batch, n_in = self.X.shape
        P, M = steps * batch, self.W.shape[0] * self.W.shape[1]
        return P <= native.GEMV_ROWS or P * M * n_in <= _SELF_PROJECTED_MACS

    def native_projection(
        self,
    ) -> np.ndarray | native.RecurrenceInputs | native.RecurrenceRows:
        """[dirs, gates, H, steps, batch], the same projections in time order for rnn.c: one
        GEMM on the native pool, a 1x1 conv of X's transpose, rather than BLAS, whose idle
        threads spin for milliseconds after a call and slowed the recurrence that followed;
        or, for a few steps at batch 1, the inputs for rnn.c to project itself."""
        steps, batch, n_in = self.X.shape
        n_gates, dirs, hidden = self.R.shape[:3]
        P, M, W = steps * batch, dirs * n_gates * hidden, self.W
        if self.self_projected:  # a small product: rnn.c projects X itself
            x = np.ascontiguousarray(self.X)  # (one native call, and no transposes here)
            wt = derived(
                W,
                "rnn weights transposed",
                lambda: frozen(np.ascontiguousarray(W.reshape(M, n_in).T)),
            )
            return native.RecurrenceInputs(x, wt, self.bias.reshape(M))

        if native.sgemm_ok():  # rows [P, M] from the packed GEMM: a step loads its own

            def gemm():
                return native.PackedGemm(np.ascontiguousarray(W.reshape(M, n_in).T))

            product = derived(W, "rnn projection rows", gemm)
            rows = product(np.ascontiguousarray(self.X).reshape(P, n_in), self.bias.reshape(M))
            if rows is not None:
                return native.RecurrenceRows(rows.reshape(steps, batch, M))

        def conv():
            packed = native.pack_conv_f32(W.reshape(M, n_in, 1, 1), 1)
            return native.FloatConv(
                (1, n_in, 1, P), packed, M, (1, 1), (1, P), (1, 1), (1, 1), (0, 0)
            )

        project = derived(W, ("rnn projection", P, native.thread_setting()), conv)
        columns = np.ascontiguousarray(self.X.transpose(2, 0, 1)).reshape(1, n_in, 1, P)
        return project(columns, self.bias.reshape(M)).reshape(dirs, n_gates, hidden, steps, batch)


def _reverse_index(lens: np.ndarray, seq_len: int) -> np.ndarray:
    """[seq, batch] time index that walks each entry's valid steps backwards (padding stays).

    It is its own inverse: it maps step order back to time order too."""
    t = np.arange(seq_len)[:, None]
    return np.where(t < lens, lens - 1 - t, t)


def _in_step_order(x: np.ndarray, lens: np.ndarray | None) -> np.ndarray:
    """[seq, batch, ...] time-reversed per batch entry (the whole sequence when lens is None)."""
    if lens is None:
        return x[::-1]
    return x[_reverse_index(lens, x.shape[0]), np.arange(x.shape[1])]


def _gate_major(a: np.ndarray, n_gates: int) -> np.ndarray:
    """[dirs, gates*H, ...] as a view [gates, dirs, H, ...]."""
    dirs, gh = a.shape[:2]
    return a.reshape(dirs, n_gates, gh // n_gates, *a.shape[2:]).swapaxes(0, 1)


def _prepare(
    X,
    W,
    R,
    B,
    sequence_lens,
    initial_h,
    initial_c,
    *,
    direction,
    layout,
    n_gates,
    folded=lambda rb: rb,
):
    """Layout, dtype, states and biases. ``folded(Rb)`` is the part of the recurrent bias that
    can be added once to the projections (it sits outside any product)."""
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
    zeros = np.zeros((n_dirs, batch, hidden), ct)
    for name, state in (("initial_h", initial_h), ("initial_c", initial_c)):
        # (rnn.c reads a whole state: a smaller one was read past its end)
        if state is not None and np.shape(state) != zeros.shape:
            raise ValueError(
                f"{name} has shape {list(np.shape(state))}, expected "
                f"{list(zeros.shape)} (directions, batch, hidden_size)"
            )
    return _Layer(
        X=X,
        W=W,
        bias=np.ascontiguousarray(Wb + folded(Rb)),
        R=_gate_major(R, n_gates),
        Rb=_gate_major(Rb, n_gates)[:, :, None, :],
        h0=zeros if initial_h is None else np.asarray(initial_h, ct),  # only ever read
        c0=zeros if initial_c is None else np.asarray(initial_c, ct),
        lens=lens,
        reverse=[direction == "reverse" or d == 1 for d in range(n_dirs)],
        out_dtype=out_dtype,
        layout=layout,
    )


def _native_ok(layer: _Layer) -> bool:
    """Whether rnn.c runs the layer's recurrence (the caller checks the activations)."""
    return (
        layer.lens is None
        and layer.dtype == np.float32
        and native.recurrence_ok(layer.hidden, layer.steps, layer.batch)
    )


def _final(layer: _Layer, hist: np.ndarray, initial: np.ndarray, time_order: bool) -> np.ndarray:
    """[dirs, batch, H]: each entry's state after its last valid step (the initial one if none).
    hist is in step order, or in time order (a reverse direction's last step at time 0)."""
    if hist.shape[0] == 0:
        return initial.copy()
    if layer.lens is None:
        if not time_order or not any(layer.reverse):
            return hist[-1].copy()
        return np.stack([hist[0 if rev else -1, d] for d, rev in enumerate(layer.reverse)])
    last = layer.lens - 1
    state = hist[np.maximum(last, 0), :, np.arange(layer.batch)]  # [batch, dirs, H]
    return np.where((last >= 0)[:, None], state.swapaxes(0, 1), initial)


def _finish(layer: _Layer, Ys: np.ndarray, Cs: np.ndarray | None = None, time_order=False):
    """Y, Y_h (and Y_c) in time order and the requested layout and dtype. Y is Ys, reordered
    unless it came in time order (rnn.c's)."""
    outs = [Ys, _final(layer, Ys, layer.h0, time_order)]
    if Cs is not None:
        outs.append(_final(layer, Cs, layer.c0, time_order))
    if layer.lens is not None:
        past_end = np.arange(Ys.shape[0])[:, None] >= layer.lens
        np.copyto(Ys, 0, where=past_end[:, None, :, None])
    for d, rev in enumerate(layer.reverse):
        if rev and not time_order:  # back to time order (numpy buffers the overlapping copy)
            Ys[:, d] = _in_step_order(Ys[:, d], layer.lens)
    if layer.layout:
        outs = [outs[0].transpose(2, 0, 1, 3), *(o.swapaxes(0, 1) for o in outs[1:])]
    return tuple(np.ascontiguousarray(o, layer.out_dtype) for o in outs)


# --- RNN -----------------------------------------------------------------------------------------


def native_or_blas(node) -> str:
    """Where an LSTM's or GRU's heavy work runs: recurrences of a hidden size rnn.c takes (a
    multiple of 16) run on the native pool with their projections; others keep BLAS (the
    exact activations and variants are checked at run time)."""
    hidden = node.attr("hidden_size", 0)
    return "pool" if hidden > 0 and hidden % 16 == 0 else "blas"


@op("RNN", since=1, threads="blas")
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
    layer = _prepare(
        X, W, R, B, sequence_lens, initial_h, None, direction=direction, layout=layout, n_gates=1
    )
    names = _activation_names(activations, 1, layer.n_dirs, ["tanh"])
    (f,) = _activations(names, activation_alpha, activation_beta, 1, layer.dtype)
    clipped, mm = _clipper(clip, layer.dtype), layer.matmul()
    Ys, xs, h = layer.history(), layer.step_major()[:, 0], layer.h0
    for t in range(layer.steps):
        h_new = Ys[t]
        mm(h, h_new[None])
        np.add(h_new, xs[t], h_new)
        if clipped:
            clipped(h_new)
        f(h_new, h_new)
        h = h_new
    return _finish(layer, Ys)


# --- GRU -----------------------------------------------------------------------------------------


def _gru_fold(linear_before_reset) -> Callable:
    """The part of GRU's recurrent bias added to the projections: Rbh sits inside the reset
    product when linear_before_reset."""

    def folded(rb):
        hs = rb.shape[1] // 3
        return np.concatenate([rb[:, : 2 * hs], rb[:, 2 * hs :] * (not linear_before_reset)], 1)

    return folded


def _bound_gru(attrs: dict) -> Callable:
    """GRU bound to its node: PyTorch's GRU (linear_before_reset, default activations, no clip,
    layout 0, whole sequences) of constant weights projected by rnn.c itself keeps its native
    set-up (native.GruRecurrence) per weights and X's shape, as the LSTM's; everything else
    calls the kernel."""

    def general(*inputs):
        return gru(*inputs, **attrs)

    dirs = 2 if attrs["direction"] == "bidirectional" else 1
    names = _activation_names(attrs["activations"], 2, dirs, ["sigmoid", "tanh"])
    if (
        not attrs["linear_before_reset"]
        or attrs["layout"]
        or attrs["clip"] is not None
        or names != ["sigmoid", "tanh"] * dirs
    ):
        return general
    latest: tuple = (None,) * 6  # (X's shape, W, R, B, recurrence, state shape), as the LSTM's

    def call(X, W, R, B=None, sequence_lens=None, initial_h=None):
        nonlocal latest
        shape, w, r, b, run, state = latest
        if sequence_lens is not None or X.dtype != np.float32:
            return general(X, W, R, B, sequence_lens, initial_h)
        if not (X.shape == shape and W is w and R is r and B is b):
            # (kept when rnn.c does not run it too: the kernel's path is not prepared again)
            native_run = _native_gru(X, W, R, B, attrs["direction"])
            run, state = (
                (None, None) if native_run is None else (native_run[0], native_run[1].h0.shape)
            )
            latest = (X.shape, W, R, B, run, state)
        if run is None or not (
            initial_h is None or initial_h.dtype == np.float32 and initial_h.shape == state
        ):
            return general(X, W, R, B, sequence_lens, initial_h)
        return run(X, initial_h)

    return call


def _native_gru(X, W, R, B, direction: str) -> tuple | None:
    """(native.GruRecurrence, its layer) for rnn.c to run X (constant float32 weights, no
    lengths, a small projection), else None."""
    if X.ndim != 3:  # (float32 and no lengths: the caller's)
        return None
    if any(a is not None and (a.flags.writeable or a.dtype != np.float32) for a in (W, R, B)):
        return None
    layer = _prepare(X, W, R, B, None, None, None, direction=direction, layout=0, n_gates=3,
                     folded=_gru_fold(1))  # fmt: skip
    if not _native_ok(layer) or not layer.self_projected:
        return None
    inputs = layer.native_projection()
    rt = derived(R, ("gru rt",), lambda: frozen(_transposed(layer.R)))
    rbh = layer.Rb[2].reshape(layer.n_dirs, layer.hidden)
    run = native.GruRecurrence(rt, inputs.w, inputs.bias, rbh, layer.h0, layer.reverse, X.shape)
    return run, layer


@op("GRU", since=1, threads=native_or_blas)
@prepared(_bound_gru)
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
    layer = _prepare(
        X,
        W,
        R,
        B,
        sequence_lens,
        initial_h,
        None,
        direction=direction,
        layout=layout,
        n_gates=3,
        folded=_gru_fold(linear_before_reset),
    )
    names = _activation_names(activations, 2, layer.n_dirs, ["sigmoid", "tanh"])
    clipped = _clipper(clip, layer.dtype)
    pytorch = (
        linear_before_reset and set(names[0::2]) == {"sigmoid"} and set(names[1::2]) == {"tanh"}
    )
    if pytorch and not clipped and _native_ok(layer):  # the whole recurrence in C (rnn.c)
        rt = derived(R, ("gru rt",), lambda: frozen(_transposed(layer.R)))
        rbh = layer.Rb[2].reshape(layer.n_dirs, layer.hidden)
        Ys = native.gru_f32(layer.native_projection(), rt, rbh, layer.h0, layer.reverse)
        return _finish(layer, Ys, time_order=True)
    f, g = _activations(names, activation_alpha, activation_beta, 2, layer.dtype)  # (see lstm)
    Ys, h, xs = layer.history(), layer.h0, layer.step_major()
    xs_zr, xs_h, Rbh = xs[:, :2], xs[:, 2], np.ascontiguousarray(layer.Rb[2])
    gates = layer.gate_buffer()
    zr, z, r, ht = gates[:2], gates[0], gates[1], gates[2]
    if linear_before_reset:
        mm_all = layer.matmul()
    else:
        mm_zr, mm_h, rh = layer.matmul(slice(0, 2)), layer.matmul(slice(2, 3)), np.empty_like(h)
    for t in range(layer.steps):
        if linear_before_reset:
            mm_all(h, gates)
        else:
            mm_zr(h, zr)
        np.add(zr, xs_zr[t], zr)
        if clipped:
            clipped(zr)
        f(zr, zr)
        if linear_before_reset:
            np.add(ht, Rbh, ht)
            np.multiply(ht, r, ht)
        else:
            np.multiply(r, h, rh)
            mm_h(rh, ht[None])
        np.add(ht, xs_h[t], ht)
        if clipped:
            clipped(ht)
        g(ht, ht)
        h_new = Ys[t]  # ht + zt (.) (Ht-1 - ht)
        np.subtract(h, ht, h_new)
        np.multiply(h_new, z, h_new)
        np.add(h_new, ht, h_new)
        h = h_new
    return _finish(layer, Ys)


# --- LSTM ----------------------------------------------------------------------------------------


def _transposed(R: np.ndarray) -> np.ndarray:
    """R [gates, dirs, H (out), H (in)] as the native LSTM / GRU read it: per direction and
    block of 16 output columns, [in, gates, 16]."""
    gates, dirs, H = R.shape[:3]
    blocks = R.reshape(gates, dirs, H // 16, 16, H)  # [gates, dirs, block, 16 out, in]
    return np.ascontiguousarray(blocks.transpose(1, 2, 4, 0, 3), np.float32)


def _bound_lstm(attrs: dict) -> Callable:
    """LSTM bound to its node (derived.prepared). The common LSTM (default activations, no
    clip, peepholes or sequence_lens; any direction) of constant weights projected by rnn.c
    itself (_Layer.self_projected) keeps its native set-up per weights and X's shape;
    everything else calls the kernel. Layout 1 (batch first: optimizer/rnn.py's RnnBatchFirstInput) runs as
    layout 0 on its inputs' transposed views, its results transposed back (views at batch 1)."""
    if attrs["layout"] == 1:
        return _batch_first(_bound_lstm({**attrs, "layout": 0}))
    if attrs["layout"]:
        return lambda *inputs: lstm(*inputs, **attrs)  # (the kernel's error)

    def general(*inputs):
        return lstm(*inputs, **attrs)

    dirs = 2 if attrs["direction"] == "bidirectional" else 1
    common = ["sigmoid", "tanh", "tanh"]
    names = _activation_names(attrs["activations"], 3, dirs, common)
    if attrs["input_forget"] or attrs["clip"] is not None or names != common * dirs:
        return general
    kept: dict = {}  # (X's shape, W, R, B) -> (W, R, B, recurrence, layer) or None
    # the latest call's (X's shape, W, R, B, recurrence, state shape): a session's next call
    # is checked against it alone (one tuple, replaced whole: calls may come from threads)
    latest: tuple = (None,) * 6

    def latest_run(shape, dtype, W, R, B, sequence_lens, h_shape, c_shape, P):
        """The latest call's recurrence where a call of X's ``shape`` (time-major) and
        ``dtype``, these inputs and states of these shapes (None: no state) runs it too."""
        x_shape, w, r, b, run, state = latest
        if (
            shape == x_shape
            and W is w
            and R is r
            and B is b
            and sequence_lens is None
            and P is None
            and dtype == np.float32
            and (h_shape is None or h_shape == state)
            and (c_shape is None or c_shape == state)
        ):
            return run
        return None

    def call(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None):
        nonlocal latest
        run = latest_run(
            X.shape,
            X.dtype,
            W,
            R,
            B,
            sequence_lens,
            _f32_shape(initial_h),
            _f32_shape(initial_c),
            P,
        )
        if run is not None:
            return run(X, initial_h, initial_c)
        if sequence_lens is not None or P is not None or X.dtype != np.float32:
            return general(X, W, R, B, sequence_lens, initial_h, initial_c, P)
        key = (X.shape, id(W), id(R), id(B))
        entry = kept.get(key)
        if entry is None or entry[0] is not W or entry[1] is not R or entry[2] is not B:
            entry = kept[key] = (W, R, B, *_native_lstm(X, W, R, B, attrs["direction"]))
            if len(kept) > 8:  # (shapes of a dynamic batch: keep the latest few)
                kept.pop(next(iter(kept)))
        run, layer = entry[3], entry[4]
        if run is None or not (_state_fits(initial_h, layer) and _state_fits(initial_c, layer)):
            return general(X, W, R, B, sequence_lens, initial_h, initial_c, P)
        latest = (X.shape, W, R, B, run, layer.h0.shape)
        # (_finish's result for this case: one direction, no lengths, layout 0, float32, in
        # time order; rnn.c takes no empty sequence)
        return run(X, initial_h, initial_c)

    call.latest_run = latest_run
    return call


def _f32_shape(state) -> tuple | None:
    """An initial state's shape, as latest_run compares it: None for no state, () for one
    that is no float32 array (which no kept recurrence takes)."""
    if state is None:
        return None
    return state.shape if state.dtype == np.float32 else ()


def _swapped_shape(state) -> tuple | None:
    """_f32_shape of a batch-first state [batch, dirs, H] as its time-major [dirs, batch, H]."""
    shape = _f32_shape(state)
    return shape if not shape else (shape[1], shape[0], *shape[2:])


def _batch_first(time_major: Callable) -> Callable:
    """An LSTM of layout 1 from ``time_major``, the same node's layout 0: X [batch, steps,
    in] and the states [batch, dirs, H] swapped to time-major views, Y [steps, dirs, batch,
    H] and the states swapped back (_finish's layout-1 outputs, contiguous). At batch 1 a
    call the time-major one's latest recurrence serves runs on it directly: both layouts
    have the same bytes there (the swaps and copies cost a 7-step call a sixth of its time)."""

    def swapped(state):
        return None if state is None else np.asarray(state).swapaxes(0, 1)

    latest_run = getattr(time_major, "latest_run", None)

    def call(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None):
        X = np.asarray(X)
        if X.ndim != 3:
            raise ValueError(f"X has rank {X.ndim}, expected 3 (batch, seq_length, input_size)")
        if latest_run is not None and X.shape[0] == 1:
            shape = (X.shape[1], 1, X.shape[2])
            h, c = _swapped_shape(initial_h), _swapped_shape(initial_c)
            run = latest_run(shape, X.dtype, W, R, B, sequence_lens, h, c, P)
            if run is not None:
                return run.batch_first(X, initial_h, initial_c)
        Y, Y_h, Y_c = time_major(
            X.swapaxes(0, 1), W, R, B, sequence_lens, swapped(initial_h), swapped(initial_c), P
        )
        return (
            np.ascontiguousarray(Y.transpose(2, 0, 1, 3)),
            np.ascontiguousarray(Y_h.swapaxes(0, 1)),
            np.ascontiguousarray(Y_c.swapaxes(0, 1)),
        )

    return call


def _state_fits(state, layer: _Layer) -> bool:
    """An initial state rnn.c takes as given: none, or float32 of the layer's state shape."""
    return state is None or (state.dtype == np.float32 and state.shape == layer.h0.shape)


def _native_lstm(X, W, R, B, direction: str) -> tuple:
    """(native.LstmRecurrence, the layer for _finish) for rnn.c to project X itself, or
    (None, None) where the kernel's own path runs (weights that may change, other sizes)."""
    if any(a is not None and (a.flags.writeable or a.dtype != np.float32) for a in (W, R, B)):
        return None, None
    layer = _prepare(X, W, R, B, None, None, None, direction=direction, layout=0, n_gates=4)
    if not _native_ok(layer) or not layer.self_projected:
        return None, None
    inputs = layer.native_projection()
    rt = derived(R, ("lstm rt",), lambda: frozen(_transposed(layer.R)))
    run = native.LstmRecurrence(
        rt, inputs.w, inputs.bias, layer.h0, layer.c0, layer.reverse, X.shape
    )
    return run, layer


@op("LSTM", since=1, threads=native_or_blas)
@prepared(_bound_lstm)
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
    layer = _prepare(
        X,
        W,
        R,
        B,
        sequence_lens,
        initial_h,
        initial_c,
        direction=direction,
        layout=layout,
        n_gates=4,
    )
    names = _activation_names(activations, 3, layer.n_dirs, ["sigmoid", "tanh", "tanh"])
    clipped = _clipper(clip, layer.dtype)
    peep = None
    if P is not None and np.any(P):
        peep = _gate_major(np.asarray(P, layer.dtype), 3)[:, :, None, :]  # [3, dirs, 1, H]
        peep = np.ascontiguousarray(peep)
    # the i, o, f gates take one activation call unless the output gate must wait for Ct
    fused = peep is None and not input_forget
    # and the usual f = Sigmoid, g = Tanh take 4 calls instead of 5, one tanh for all four gates:
    # sigmoid(x) = (1 + tanh(x / 2)) / 2
    one_tanh = fused and set(names[0::3]) == {"sigmoid"} and set(names[1::3]) == {"tanh"}
    common = one_tanh and set(names[2::3]) == {"tanh"} and not clipped  # (H = o tanh(C))
    if common and _native_ok(layer):  # the whole recurrence in C (rnn.c)
        rt = derived(R, ("lstm rt",), lambda: frozen(_transposed(layer.R)))
        projections = layer.native_projection()
        Ys, Cs = native.lstm_f32(projections, rt, layer.h0, layer.c0, layer.reverse)
        return _finish(layer, Ys, Cs, time_order=True)
    # (built after the native path, which needs no activation functions: per-call cost at batch 1)
    f, g, h_act = _activations(names, activation_alpha, activation_beta, 3, layer.dtype)
    mm, xs = layer.matmul(), layer.step_major()
    Ys, Cs, h, c = layer.history(), layer.history(), layer.h0, layer.c0
    half = np.asarray(0.5, layer.dtype)
    gates = layer.gate_buffer()
    i, o, fg, cg = gates
    iof, fc = gates[:3], gates[2:]
    tmp, one = np.empty_like(h), np.array(1, layer.dtype)
    for t in range(layer.steps):
        mm(h, gates)
        np.add(gates, xs[t], gates)
        if peep is not None:
            np.add(i, np.multiply(peep[0], c, tmp), i)
            np.add(fg, np.multiply(peep[2], c, tmp), fg)
        if clipped:  # with peepholes the output gate's input is complete only once Ct is known
            clipped(gates if peep is None else i)
            if peep is not None:
                clipped(fc)
        if one_tanh:
            np.multiply(iof, half, iof)
            np.tanh(gates, gates)
            np.multiply(iof, half, iof)
            np.add(iof, half, iof)
        else:
            if fused:
                f(iof, iof)
            else:
                f(i, i)
                if input_forget:
                    np.subtract(one, i, fg)
                else:
                    f(fg, fg)
            g(cg, cg)
        c_new = Cs[t]
        np.multiply(fg, c, c_new)
        np.multiply(cg, i, cg)
        np.add(c_new, cg, c_new)
        if not fused:
            if peep is not None:
                np.add(o, np.multiply(peep[1], c_new, tmp), o)
                if clipped:
                    clipped(o)
            f(o, o)
        h_new = Ys[t]
        h_act(c_new, h_new)
        np.multiply(h_new, o, h_new)
        h, c = h_new, c_new
    return _finish(layer, Ys, Cs)
