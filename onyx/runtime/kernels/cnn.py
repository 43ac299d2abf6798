"""Kernels of the fusions for classic CNNs (optimizer/cnn.py): ai.onyx BatchNormRelu, a
model-local function whose body is BatchNormalization -> Relu, and ai.onyx ConvConcat, two
FusedConvs of one input concatenated on the channels (SqueezeNet's fire module), whose convs
write their channels of the output in place.

DenseNet normalizes each Concat of its feature maps before a conv (pre-activation): no conv
precedes the BatchNormalization to fold it into, so the pair ran as two passes over the maps.
"""

from __future__ import annotations

import numpy as np

from .. import native
from ..registry import ONYX_DOMAIN, binds, op
from . import batchnorm_fast
from .batch_norm import batch_normalization


def _bind_batch_norm_relu(inputs, attrs, constant):
    def general(*args):
        return batch_norm_relu(*args, **attrs)

    return batchnorm_fast.bound_inference(inputs, attrs["epsilon"], general, relu=True)


@binds(_bind_batch_norm_relu, constants=(1, 2, 3, 4))
@op("BatchNormRelu", since=1, domain=ONYX_DOMAIN)
def batch_norm_relu(X, scale, B, mean, var, *, epsilon=1e-5):
    """Relu(BatchNormalization(X, scale, B, mean, var)) in inference mode: one native pass
    (batchnorm_fast's affine map, then np.clip's Relu: the pair's bits)."""
    y = batchnorm_fast.inference(X, scale, B, mean, var, epsilon, relu=True)
    if y is not None:
        return y
    y = batch_normalization(X, scale, B, mean, var, epsilon=epsilon)  # (fresh: ours to clip)
    return np.clip(y, 0, np.inf, out=y)


def _branch_attrs(attrs: dict, i: int) -> dict:
    """Conv i's node attributes (float_conv_runner's) from ConvConcat's."""
    return {
        "group": 1,
        "auto_pad": "NOTSET",
        "pads": attrs[f"pads{i}"],
        "strides": attrs["strides"],
        "dilations": attrs["dilations"],
        "kernel_shape": attrs[f"kernel_shape{i}"],
    }


def _bind_conv_concat(inputs, attrs, constant):
    """registry.binds for ConvConcat at batch 1 of float32: both convs' native set-ups
    (conv.float_conv_runner, FusedConv's), each writing its channels of one output (a channel
    range of a batch-1 NCHW tensor is contiguous). None where either set-up cannot write into
    a given output: the kernel as written then concatenates."""
    X, W0, _, W1, _ = inputs
    if X.dtype != np.float32 or X.ndim != 4 or X.shape[0] != 1 or not X.size:
        return None
    from .fused import native_activation

    applied = native_activation(attrs)
    if applied is None or W0.dtype != np.float32 or W1.dtype != np.float32:
        return None
    from .conv import float_conv_runner

    code, lo, hi = applied
    runs = []
    for i, W in enumerate((W0, W1)):
        if W.ndim != 4 or W.shape[1] != X.shape[1]:
            return None  # (the kernel as written names the problem)
        run = float_conv_runner(X.shape, W, _branch_attrs(attrs, i), code, lo, hi)
        if run is None or not getattr(run, "writes_out", False):
            return None
        runs.append(run)
    (first, second), m = runs, W0.shape[0]
    if first.shape[2:] != second.shape[2:]:
        return None
    shape = (1, m + W1.shape[0], *first.shape[2:])
    contiguous = np.ascontiguousarray

    def bound(X, W0, B0, W1, B1):
        x, y = contiguous(X), np.empty(shape, np.float32)
        first(x, B0, None, out=y[:, :m])
        second(x, B1, None, out=y[:, m:])
        return y

    return native.under_setting(bound, conv_concat, attrs)


@binds(_bind_conv_concat, constants=(1, 3))  # (biases: read per call, as FusedConv's)
@op("ConvConcat", since=1, domain=ONYX_DOMAIN, threads="pool")
def conv_concat(
    X,
    W0,
    B0,
    W1,
    B1,
    *,
    activation="",
    activation_params=None,
    strides=None,
    dilations=None,
    kernel_shape0=None,
    pads0=None,
    kernel_shape1=None,
    pads1=None,
):
    """Concat(FusedConv(X, W0, B0), FusedConv(X, W1, B1), axis=1), the convs sharing strides,
    dilations and activation (optimizer/cnn.py's ConvConcatFusion)."""
    from .fused import fused_conv

    shared = dict(activation=activation, activation_params=activation_params, strides=strides,
                  dilations=dilations)  # fmt: skip
    y0 = fused_conv(X, W0, B0, kernel_shape=kernel_shape0, pads=pads0, **shared)
    y1 = fused_conv(X, W1, B1, kernel_shape=kernel_shape1, pads=pads1, **shared)
    return np.concatenate([y0, y1], axis=1)
