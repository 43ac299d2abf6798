"""Audio front-end and 1-D signal ops that onyx's optimizer makes (optimizer/audio.py)."""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from .. import native
from ..registry import binds, op
from .conv_geometry import CONV_ATTRIBUTES as CONV_ATTRS
from .derived import derived


def _index(start, end, axis: int, ndim: int) -> tuple:
    """The index of Slice(x, start, end, axis) with step 1: Python's slice clamps as ONNX's
    Slice does (a negative bound counts from the end, then both are clamped to [0, dim])."""
    index = [slice(None)] * ndim
    index[axis] = slice(start.item(), end.item())
    return tuple(index)


def _indices(ndim: int, re_starts, re_ends, im_starts, im_ends, axes) -> tuple:
    axis = axes.item()
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} out of range for a rank-{ndim} input")
    axis %= ndim
    return _index(re_starts, re_ends, axis, ndim), _index(im_starts, im_ends, axis, ndim)


@op("SpectralMagnitude", since=1, domain="ai.onyx")
def spectral_magnitude(x, re_starts, re_ends, im_starts, im_ends, axes, eps):
    """Sqrt(Add(Add(Mul(re, re), Mul(im, im)), eps)), re and im Slices of x along axes[0]
    (step 1): an STFT's magnitude from its real and imaginary halves, its function body's
    operations in its order on the same dtype (the same bits), in one step and one buffer."""
    bounds = (re_starts, re_ends, im_starts, im_ends, axes)
    # kept per constant bounds (derived.py); the entry holds them, so their ids stay theirs
    key = ("magnitude", x.ndim, *map(id, bounds[1:]))
    kept = derived(re_starts, key, lambda: (bounds, *_indices(x.ndim, *bounds)))
    if not all(map(operator.is_, kept[0], bounds)):
        kept = (bounds, *_indices(x.ndim, *bounds))
    re, im = x[kept[1]], x[kept[2]]
    if re.shape != im.shape or x.dtype != eps.dtype:  # (broadcasts, promotions: as the chain)
        return np.sqrt(np.add(np.add(re * re, im * im), eps))
    y = np.multiply(re, re)
    square = np.multiply(im, im)
    np.add(y, square, y)
    np.add(y, eps, y)
    return np.sqrt(y, y)


def _bound_conv_magnitude(attrs: dict) -> Callable:
    """make(attributes) of ConvMagnitude: the Conv kernel with its attributes bound, then
    :func:`spectral_magnitude` on its result."""
    from .conv import conv  # (a sibling that imports much: on first use)

    conv_attrs = {k: attrs[k] for k in CONV_ATTRS}

    def call(X, W, re_starts, re_ends, im_starts, im_ends, axes, eps):
        y = conv(X, W, None, **conv_attrs)
        return spectral_magnitude(y, re_starts, re_ends, im_starts, im_ends, axes, eps)

    return call


def _conv1d_magnitude(x_shape: tuple, x_dtype, W, bounds: tuple, eps, attrs: dict):
    """``run(X)`` = spectral_magnitude(conv(X, W), *bounds, eps) for a float32 X of x_shape
    (N, C, L): the direct 1-D kernel (conv.conv's first path for it: conv1d.conv1d_runner)
    and the magnitude's slices set up once (registry.binds); None where that does not apply."""
    if x_dtype != np.float32 or W.dtype != np.float32 or len(x_shape) != 3 or 0 in x_shape:
        return None
    from .conv1d import node_conv1d_runner  # (a sibling that imports much: on first use)

    conv = node_conv1d_runner(x_shape, W, attrs)
    if conv is None or eps.__class__ is not np.ndarray or eps.dtype != np.float32:
        return None
    re_index, im_index = _indices(3, *bounds)
    sample = np.empty(conv.shape, np.float32)
    if sample[re_index].shape != sample[im_index].shape:
        return None  # (the broadcasting chain: as written)
    halves = _channel_ranges(re_index, im_index, conv.shape[1])
    if halves is not None and eps.size == 1 and eps.ndim <= 3:
        # the magnitude in conv1d.c's pass after the conv, the conv's output never an array
        return native.conv1d_then(conv, native.MAGNITUDE, *halves, eps.item())
    multiply, add, sqrt = np.multiply, np.add, np.sqrt

    def run(X):
        y = conv(X, None, None)
        re, im = y[re_index], y[im_index]
        out = multiply(re, re)
        square = multiply(im, im)
        add(out, square, out)
        add(out, eps, out)
        return sqrt(out, out)

    return run


def _channel_ranges(re_index: tuple, im_index: tuple, M: int) -> tuple | None:
    """(bins, re0, im0) where both slices take channel ranges of the same length (>= 1) of a
    (N, M, L) output whole along the other axes; else None."""
    if any(i != slice(None) for i in (*re_index[::2], *im_index[::2])):
        return None
    (re0, re1, _), (im0, im1, _) = re_index[1].indices(M), im_index[1].indices(M)
    if re1 - re0 < 1 or re1 - re0 != im1 - im0:
        return None
    return re1 - re0, re0, im0


def _bind_conv_magnitude(inputs, attrs, constant):
    """registry.binds of ConvMagnitude: _conv1d_magnitude, else the node's prepared call."""
    X, W, *bounds, eps = inputs[:8]
    run = _conv1d_magnitude(X.shape, X.dtype, W, bounds, eps, attrs) if all(constant[1:8]) else None
    return _bound_conv_magnitude(attrs) if run is None else lambda X, *_: run(X)


@op("ConvMagnitude", since=1, domain="ai.onyx", threads="pool")
@binds(_bind_conv_magnitude)
def conv_magnitude(X, W, re_starts, re_ends, im_starts, im_ends, axes, eps, *,
                   auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
                   strides=None):  # fmt: skip
    """SpectralMagnitude(Conv(X, W)): an STFT written as a conv and its magnitude in one step
    (optimizer/audio.py), the two kernels' bits."""
    attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group,
                 kernel_shape=kernel_shape, pads=pads, strides=strides)  # fmt: skip
    return _bound_conv_magnitude(attrs)(X, W, re_starts, re_ends, im_starts, im_ends, axes, eps)


def _bound_signal_magnitude(attrs: dict) -> Callable:
    """make(attributes) of SignalMagnitude: Unsqueeze's kernel, then ConvMagnitude's."""
    from .shape import unsqueeze

    conv_magnitude = _bound_conv_magnitude(attrs)

    def call(audio, axes, W, re_starts, re_ends, im_starts, im_ends, axes_, eps):
        x = unsqueeze(audio, axes)
        return conv_magnitude(x, W, re_starts, re_ends, im_starts, im_ends, axes_, eps)

    return call


def _bind_signal_magnitude(inputs, attrs, constant):
    """registry.binds of SignalMagnitude: the Unsqueeze's shape and _conv1d_magnitude, else
    the node's prepared call."""
    from .shape import _unsqueeze

    audio, axes, W, *bounds, eps = inputs[:9]
    run = None
    if all(constant[1:9]):
        shape = _unsqueeze(audio, axes).shape
        run = _conv1d_magnitude(shape, audio.dtype, W, bounds, eps, attrs)
    return _bound_signal_magnitude(attrs) if run is None else lambda a, *_: run(a.reshape(shape))


@op("SignalMagnitude", since=1, domain="ai.onyx", threads="pool")
@binds(_bind_signal_magnitude)
def signal_magnitude(audio, unsqueeze_axes, W, re_starts, re_ends, im_starts, im_ends, axes, eps,
                     *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                     pads=None, strides=None):  # fmt: skip
    """ConvMagnitude(Unsqueeze(audio, unsqueeze_axes), W, ...): the audio's channel axis, the
    STFT's conv and its magnitude in one step (optimizer/audio.py), the kernels' bits."""
    attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group,
                 kernel_shape=kernel_shape, pads=pads, strides=strides)  # fmt: skip
    return _bound_signal_magnitude(attrs)(
        audio, unsqueeze_axes, W, re_starts, re_ends, im_starts, im_ends, axes, eps
    )


# --- a 1-D conv and the MaxPool after it ---------------------------------------------------------

#: The conv attributes ConvMaxPool and FusedConvMaxPool keep under their own names.
FUSED_ATTRS = ("activation", "activation_params")
#: MaxPool's attributes, kept as "pool_" + name.
POOL_ATTRS = ("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order",
              "strides")  # fmt: skip


def _bound_pooled(fused: bool) -> Callable:
    """make(attributes) for a conv (FusedConv where ``fused``) followed by a 1-D MaxPool: the
    conv kernel with its attributes, then MaxPool's 1-D passes (pool.py) on its result: the
    two steps' kernels in one step."""

    def make(attrs: dict) -> Callable:
        from .conv import conv  # (siblings that import much: on first use)
        from .fused import fused_conv
        from .pool import max_pool_values

        conv_attrs = _conv_attrs(attrs, fused)
        pool = [attrs["pool_" + k] for k in ("kernel_shape", "auto_pad", "pads", "strides",
                                             "dilations", "ceil_mode")]  # fmt: skip

        pairs = _pair_pool(attrs, fused)

        def call(X, W, B=None):
            if pairs is not None:
                y = pair_max(X, W, B, conv_attrs, pairs)
                if y is not None:
                    return y
            y = fused_conv(X, W, B, None, **conv_attrs) if fused else conv(X, W, B, **conv_attrs)
            return max_pool_values(y, *pool)

        return call

    return make


def _conv_attrs(attrs: dict, fused: bool) -> dict:
    return {k: attrs[k] for k in CONV_ATTRS + (FUSED_ATTRS if fused else ())}


def _bind_pooled(fused: bool) -> Callable:
    """registry.binds of ConvMaxPool / FusedConvMaxPool: pair_max's native call set up once
    for the signature (a float32 X, constant W), else the pair's kernels (_bound_pooled)."""
    general = _bound_pooled(fused)

    def make(inputs, attrs, constant):
        X, W = inputs[:2]
        if X.ndim == 4:  # (a 2-D conv: a stem and its pool in one native call, or the pair)
            run = _stem_pool_run(X, W, attrs) if fused else None
            if run is None:
                return _bound_conv_then_pool(inputs, attrs, constant, fused) or general(attrs)
            kernel = fused_conv_max_pool
            contiguous = np.ascontiguousarray
            return native.under_setting(lambda X, W, B=None: run(contiguous(X), B), kernel, attrs)
        pairs = _pair_pool(attrs, fused)
        run = None if pairs is None else _pair_run(X, W, _conv_attrs(attrs, fused), pairs)
        if run is None:
            return general(attrs)
        return lambda X, W, B=None: run(X, B)

    return make


def _bound_conv_then_pool(inputs, attrs: dict, constant, fused: bool):
    """A 2-D FusedConv + MaxPool that the stem kernel does not take (a ResNet's 3x3 stride-1
    pool): the FusedConv's bound call, then the MaxPool's (pool.bound_max_values) for its
    output's shape, each set up once (the general pair called the FusedConv kernel as written
    and worked the pool's set-up out again at every call). None where either declines."""
    from .fused import fused_conv
    from .pool import bound_max_values

    if not fused:
        return None
    X, W = inputs[:2]
    B = inputs[2] if len(inputs) > 2 else None
    conv_call = fused_conv.bind((X, W, B, None), _conv_attrs(attrs, fused), (*constant[:3], True))
    if conv_call is None:
        return None
    y = conv_call(X, W, B)  # (its shape: the pool's signature)
    pool_call = bound_max_values(y, {k: attrs["pool_" + k] for k in POOL_ATTRS})
    if pool_call is None:
        return None
    return lambda X, W, B=None: pool_call(conv_call(X, W, B))


def _stem_pool_run(X, W, attrs: dict):
    """native.StemPool of a float32 2-D FusedConv (Relu or no activation) whose conv is a
    stem (its set-up, conv.float_conv_runner's, an ActivatedStem) and the MaxPool after it,
    or None."""
    if X.dtype != np.float32 or W.dtype != np.float32 or attrs["activation"] != "Relu":
        return None
    if not X.size or W.ndim != 4:
        return None
    from .conv import float_conv_runner
    from .fused import native_activation
    from .pool import native_pool_spec

    code, lo, hi = native_activation(attrs)
    stem = float_conv_runner(X.shape, W, attrs, code, lo, hi)
    shape = getattr(stem, "shape", None)
    if shape is None or len(shape) != 4:
        return None
    pool = {k: attrs["pool_" + k] for k in POOL_ATTRS}
    spec = native_pool_spec(shape, pool, "MaxPool")
    # (the set-up's key: the shape, the pool, the thread setting, and the conv's attributes by
    # value: stems of one weight may differ in their pads and still pool to the same size)
    conv = tuple(tuple(v) if isinstance(v, list) else v for v in (attrs[k] for k in CONV_ATTRS))
    key = ("stem max pool", X.shape, conv, spec, native.thread_setting())
    return derived(W, key, lambda: native.stem_pool_setup(stem, spec))


def _pair_pool(attrs: dict, fused: bool) -> tuple | None:
    """(activation code, alpha) where the MaxPool takes pairs (kernel 2, stride 2, no pads or
    dilation, floor) after a conv whose activation (none or Relu) the native 1-D conv
    applies; else None."""
    pool = {k: attrs["pool_" + k] for k in POOL_ATTRS}
    if list(pool["kernel_shape"] or ()) != [2] or list(pool["strides"] or ()) != [2]:
        return None
    if any(pool["pads"] or ()) or any(d != 1 for d in pool["dilations"] or ()):
        return None
    if pool["ceil_mode"] or pool["auto_pad"] not in ("NOTSET", b"NOTSET"):
        return None
    activation = attrs["activation"] if fused else ""
    if activation not in ("", "Relu") or attrs["auto_pad"] not in ("NOTSET", b"NOTSET"):
        return None
    geometry = tuple(
        tuple(v) if isinstance(v, list) else v for v in (attrs[k] for k in CONV_ATTRS)
    )  # (the set-up's key: the conv's attributes by value)
    return (native.CONV_ACTIVATIONS[activation] if activation else 0, geometry)


def pair_max(X, W, B, conv_attrs: dict, pairs: tuple) -> np.ndarray | None:
    """MaxPool(kernel 2, stride 2) of a float32 1-D conv in one native call: the conv into a
    buffer of conv1d.c's, then the max of each pair of its outputs (numpy's maximum: the
    pool's bits). None where it does not apply (the caller's general path runs)."""
    run = _pair_run(X, W, conv_attrs, pairs)
    return None if run is None else run(X, B)


def _pair_run(X, W, conv_attrs: dict, pairs: tuple):
    """pair_runner for X's shape where X and W are float32 and X a signal (N, C, L), or None."""
    if X.dtype != np.float32 or W.dtype != np.float32 or X.ndim != 3 or not native.conv1d_ok():
        return None
    return pair_runner(X.shape, W, conv_attrs, pairs)


def pair_runner(x_shape: tuple, W, conv_attrs: dict, pairs: tuple):
    """pair_max's native call set up for inputs of x_shape, ``run(X, B)`` (kept per constant
    W and thread setting), or None."""
    key = ("pair max", x_shape, pairs, native.thread_setting())
    return derived(W, key, lambda: _pair_setup(x_shape, W, conv_attrs, pairs[0]))


def _pair_setup(x_shape, W: np.ndarray, conv_attrs: dict, activation: int):
    """The native conv and its pairs' max (conv1d_then), or None (shapes the native conv
    leaves to others, an output shorter than a pair)."""
    from .conv import _conv_geometry

    N, C, L = x_shape
    group = conv_attrs["group"]
    if W.ndim != 3 or group < 1 or C % group or W.shape[0] % group or W.shape[1] * group != C:
        return None
    if group > 1 and W.shape[1] == 1:  # (depthwise: left to its own kernel)
        return None
    kernel = conv_attrs["kernel_shape"]
    if kernel and list(kernel) != list(W.shape[2:]):
        return None
    geo = _conv_geometry(x_shape, W.shape, "NOTSET", conv_attrs["pads"], conv_attrs["strides"],
                         conv_attrs["dilations"], kernel)  # fmt: skip
    (out,), (s,), (d,), left = geo["out_shape"], geo["strides"], geo["dilations"], geo["pads"][0]
    if out < 2 or min(geo["pads"]) < 0:
        return None
    conv = native.Conv1d(x_shape, W, group, out, s, d, left, activation)
    return native.conv1d_then(conv, native.PAIR_MAX)


@op("ConvMaxPool", since=1, domain="ai.onyx", threads="pool")
@binds(_bind_pooled(fused=False), constants=(1,))
def conv_max_pool(X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1,
                  kernel_shape=None, pads=None, strides=None, pool_auto_pad="NOTSET",
                  pool_ceil_mode=0, pool_dilations=None, pool_kernel_shape=None, pool_pads=None,
                  pool_storage_order=0, pool_strides=None):  # fmt: skip
    """MaxPool(Conv(X, W, B)) of a 1-D conv (optimizer/audio.py): the two nodes' kernels in
    one step, the same bits (its function body is the pair)."""
    attrs = dict(locals())
    return _bound_pooled(False)({k: attrs[k] for k in attrs if k not in ("X", "W", "B")})(X, W, B)


@op("FusedConvMaxPool", since=1, domain="ai.onyx", threads="pool")
@binds(_bind_pooled(fused=True), constants=(1,))
def fused_conv_max_pool(X, W, B=None, *, activation="", activation_params=None,
                        auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
                        strides=None, pool_auto_pad="NOTSET", pool_ceil_mode=0,
                        pool_dilations=None, pool_kernel_shape=None, pool_pads=None,
                        pool_storage_order=0, pool_strides=None):  # fmt: skip
    """MaxPool(FusedConv(X, W, B)) of a 1-D conv, as :func:`conv_max_pool`."""
    attrs = dict(locals())
    return _bound_pooled(True)({k: attrs[k] for k in attrs if k not in ("X", "W", "B")})(X, W, B)
