"""Kernels of the fusions for classic CNNs (optimizer/cnn.py): ai.onyx BatchNormRelu, a
model-local function whose body is BatchNormalization -> Relu.

DenseNet normalizes each Concat of its feature maps before a conv (pre-activation): no conv
precedes the BatchNormalization to fold it into, so the pair ran as two passes over the maps.
"""

from __future__ import annotations

import numpy as np

from ..registry import ONYX_DOMAIN, binds, op
from . import batchnorm_fast
from .normalization import batch_normalization


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
