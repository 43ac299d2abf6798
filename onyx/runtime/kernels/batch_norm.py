"""BatchNormalization, every version: inference as batchnorm_fast.py's per-channel affine map
(native where it applies), training mode's batch statistics and running averages.

Statistics are computed in float32 at least (float64 stays float64); results are cast back to
the input's type.
"""

from __future__ import annotations

import numpy as np

from .. import native
from ..registry import binds, op
from . import batchnorm_fast
from .low_floats import compute_dtype
from .normalization import _per_channel


def _batch_norm(X, scale, B, mean, var, *, epsilon, momentum, training, spatial=True):
    """(Y, running_mean, running_var, saved_mean, saved_inv_std)."""
    y = None if training else batchnorm_fast.inference(X, scale, B, mean, var, epsilon)
    if y is not None:
        return (y,)  # (one per-channel affine pass, onnxruntime's order: batchnorm_fast.py)
    ct = compute_dtype(X.dtype)
    x = X.astype(ct, copy=False)
    stat_dtype = mean.dtype
    if training:
        axes = (0,) + tuple(range(2, x.ndim)) if spatial else (0,)
        cur_mean = x.mean(axis=axes, keepdims=True)
        cur_var = ((x - cur_mean) ** 2).mean(axis=axes, keepdims=True)  # population variance
    else:
        cur_mean, cur_var = _per_channel(mean, x, ct), _per_channel(var, x, ct)
    inv_std = 1 / np.sqrt(cur_var + ct.type(epsilon))
    mult = inv_std * _per_channel(scale, x, ct)
    if not training and X.dtype == np.float32 and x.size and mult.size == x.shape[1]:
        y = native.batch_norm_f32(x, cur_mean, mult, _per_channel(B, x, ct))  # (one pass)
        if y is not None:
            return (y,)
    y = (x - cur_mean) * mult + _per_channel(B, x, ct)
    y = y.astype(X.dtype, copy=False)
    if not training:
        return (y,)
    shape = mean.shape
    m = ct.type(momentum)
    run_mean = mean.astype(ct) * m + cur_mean.reshape(shape) * (1 - m)
    run_var = var.astype(ct) * m + cur_var.reshape(shape) * (1 - m)
    return (
        y,
        run_mean.astype(stat_dtype),
        run_var.astype(stat_dtype),
        cur_mean.reshape(shape).astype(stat_dtype),
        inv_std.reshape(shape).astype(stat_dtype),
    )


def _bind_batch_norm(inputs, attrs, constant):
    if attrs["training_mode"]:
        return None
    epsilon = attrs["epsilon"]

    def general(*args):
        return batch_normalization(*args, **attrs)

    return batchnorm_fast.bound_inference(inputs, epsilon, general)


@binds(_bind_batch_norm, constants=(1, 2, 3, 4))
@op("BatchNormalization", since=14)
def batch_normalization(
    X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9, training_mode=0
):
    out = _batch_norm(
        X,
        scale,
        B,
        input_mean,
        input_var,
        epsilon=epsilon,
        momentum=momentum,
        training=bool(training_mode),
    )
    return out[:3] if training_mode else out[0]


def _legacy_batch_norm(ctx, X, scale, B, mean, var, epsilon, momentum, spatial=1, is_test=0):
    # Before version 14 the mode was implied by the outputs: training returns all five
    # (Y, mean, var, saved_mean, saved_var). Like onnxruntime, saved_var holds the inverse
    # standard deviation of the batch (what the gradient needs).
    training = ctx.n_outputs > 1 and not is_test
    out = _batch_norm(
        X,
        scale,
        B,
        mean,
        var,
        epsilon=epsilon,
        momentum=momentum,
        training=training,
        spatial=bool(spatial),
    )
    return out if training else out[0]


@op("BatchNormalization", since=9)
def batch_normalization_9(ctx, X, scale, B, mean, var, *, epsilon=1e-5, momentum=0.9):
    return _legacy_batch_norm(ctx, X, scale, B, mean, var, epsilon, momentum)


@op("BatchNormalization", since=7)
def batch_normalization_7(ctx, X, scale, B, mean, var, *, epsilon=1e-5, momentum=0.9, spatial=1):
    return _legacy_batch_norm(ctx, X, scale, B, mean, var, epsilon, momentum, spatial)


@op("BatchNormalization", since=6)
def batch_normalization_6(
    ctx, X, scale, B, mean, var, *, epsilon=1e-5, is_test=0, momentum=0.9, spatial=1
):
    return _legacy_batch_norm(ctx, X, scale, B, mean, var, epsilon, momentum, spatial, is_test)


@op("BatchNormalization", since=1)
def batch_normalization_1(
    ctx,
    X,
    scale,
    B,
    mean,
    var,
    *,
    consumed_inputs,
    epsilon=1e-5,
    is_test=0,
    momentum=0.9,
    spatial=1,
):
    return _legacy_batch_norm(ctx, X, scale, B, mean, var, epsilon, momentum, spatial, is_test)
