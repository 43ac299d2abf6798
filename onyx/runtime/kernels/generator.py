"""Generators: Constant, ConstantOfShape, Range, EyeLike, random ops (RandomNormal, RandomUniform,
their *Like forms, Bernoulli, Multinomial) and Dropout.

Random ops draw from a numpy RandomState local to the call: a given ``seed`` always yields the same
numbers (the same ones onnx's reference tests use: a legacy MT19937 seeded with ``int(seed)``);
without a seed the state is fresh from OS entropy. No global random state is touched.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DataType, to_numpy
from ..registry import op
from ..values import aligned_empty

# --- Constant ------------------------------------------------------------------------------------

# element type of each value_* attribute (a scalar, or a 1-D tensor for the plural forms)
_CONSTANT_DTYPES = {
    "value_float": np.float32,
    "value_floats": np.float32,
    "value_int": np.int64,
    "value_ints": np.int64,
    "value_string": object,
    "value_strings": object,
}


@op("Constant", since=1)
def constant(
    *,
    value=None,
    sparse_value=None,
    value_float=None,
    value_floats=None,
    value_int=None,
    value_ints=None,
    value_string=None,
    value_strings=None,
):
    given = {
        "value": value,
        "sparse_value": sparse_value,  # arrives densified
        "value_float": value_float,
        "value_floats": value_floats,
        "value_int": value_int,
        "value_ints": value_ints,
        "value_string": value_string,
        "value_strings": value_strings,
    }
    given = {k: v for k, v in given.items() if v is not None}
    if len(given) != 1:
        raise ValueError(f"Constant needs exactly one value attribute, got {sorted(given)}")
    ((name, v),) = given.items()
    return np.array(v, dtype=_CONSTANT_DTYPES.get(name))


@op("ConstantOfShape", since=9)
def constant_of_shape(input, *, value=None):
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value)
    shape = [int(d) for d in np.asarray(input).reshape(-1)]
    if fill.dtype == object:
        return np.full(shape, fill.reshape(-1)[0], dtype=fill.dtype)
    # aligned as a constant must be (values.tensor_value): a folded weight is not copied again
    out = aligned_empty(tuple(shape), fill.dtype)
    out.fill(fill.reshape(-1)[0])
    return out


# --- Range / EyeLike -----------------------------------------------------------------------------

_LOW_PRECISION = ("float16", "bfloat16")


@op("Range", since=11)
def range_(start, limit, delta, *, stash_type=1):
    dtype = np.asarray(start).dtype
    s, l, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    if d == 0:  # (as onnxruntime refuses it; a ZeroDivisionError below otherwise)
        raise ValueError("Range: delta is 0, so the range would never reach its limit")
    if dtype.kind in "iu":
        s, l, d = int(s), int(l), int(d)
        n = max(-((s - l) // d), 0)  # exact ceil((l - s) / d)
        return (s + np.arange(n, dtype=np.int64) * d).astype(dtype)
    # float16/bfloat16 compute in float32 when stash_type is 1 (the default, and opset < 27)
    work = np.float32 if dtype.name in _LOW_PRECISION and stash_type == 1 else dtype
    s, l, d = (v.astype(work) for v in (s, l, d))
    n = max(math.ceil(float(l - s) / float(d)), 0)  # as onnxruntime: difference in T, then divide
    return (s + np.arange(n, dtype=work) * d).astype(dtype)


@op("EyeLike", since=9)
def eye_like(input, *, dtype=None, k=0):
    out_dtype = input.dtype if dtype is None else to_numpy(dtype)
    n, m = input.shape
    return np.eye(n, m, k, dtype=out_dtype)


# --- Random --------------------------------------------------------------------------------------


def _rng(seed) -> np.random.RandomState:
    return np.random.RandomState(None if seed is None else int(seed) % 2**32)


def _out_dtype(dtype, like=None) -> np.dtype:
    if dtype is None:
        return like.dtype
    return to_numpy(dtype)


@op("RandomNormal", since=1, deterministic=False)
def random_normal(*, shape, dtype=DataType.FLOAT, seed=None, mean=0.0, scale=1.0):
    return _rng(seed).normal(mean, scale, list(shape)).astype(to_numpy(dtype))


@op("RandomNormalLike", since=1, deterministic=False)
def random_normal_like(input, *, dtype=None, seed=None, mean=0.0, scale=1.0):
    return _rng(seed).normal(mean, scale, input.shape).astype(_out_dtype(dtype, input))


@op("RandomUniform", since=1, deterministic=False)
def random_uniform(*, shape, dtype=DataType.FLOAT, seed=None, low=0.0, high=1.0):
    return _rng(seed).uniform(low, high, list(shape)).astype(to_numpy(dtype))


@op("RandomUniformLike", since=1, deterministic=False)
def random_uniform_like(input, *, dtype=None, seed=None, low=0.0, high=1.0):
    return _rng(seed).uniform(low, high, input.shape).astype(_out_dtype(dtype, input))


@op("Bernoulli", since=15, deterministic=False)
def bernoulli(input, *, dtype=None, seed=None):
    draws = _rng(seed).uniform(0.0, 1.0, input.shape) < input.astype(np.float64)
    return draws.astype(_out_dtype(dtype, input))


@op("Multinomial", since=7, deterministic=False)
def multinomial(input, *, dtype=DataType.INT32, seed=None, sample_size=1):
    logits = input.astype(np.float64)
    batch, classes = logits.shape
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    cdf = np.cumsum(probs, axis=1)
    cdf /= cdf[:, -1:]
    u = _rng(seed).uniform(0.0, 1.0, (batch, sample_size))
    # one searchsorted for all rows: shift row r's cdf and draws by r so rows stay apart
    rows = np.arange(batch)[:, None]
    found = np.searchsorted((cdf + rows).reshape(-1), (u + rows).reshape(-1), side="right")
    samples = np.minimum(found.reshape(batch, sample_size) - rows * classes, classes - 1)
    return samples.astype(to_numpy(dtype))


# --- Dropout -------------------------------------------------------------------------------------


def _dropout(data: np.ndarray, ratio: float, seed) -> tuple[np.ndarray, np.ndarray]:
    """Training-mode dropout: keep where a uniform draw >= ratio, scale kept values by 1/(1-ratio)."""
    mask = _rng(seed).uniform(0.0, 1.0, data.shape) >= ratio
    scale = 1.0 / (1.0 - ratio) if ratio < 1 else 0.0
    return (data * mask * scale).astype(data.dtype), mask


def _keep_all(data: np.ndarray, mask_value: bool, mask_dtype) -> tuple[np.ndarray, np.ndarray]:
    return data, np.full(data.shape, mask_value, dtype=mask_dtype)


# Opsets 1-10 do not say what the mask holds when nothing is dropped; onnxruntime (the
# tie-breaker) gives all zeros there. Opset 12 on says all ones.


@op("Dropout", since=1)
def dropout_1(data, *, is_test=0, ratio=0.5, consumed_inputs=None):
    # opsets 1-6: training mode unless is_test; the mask has the data's type
    if is_test:
        return _keep_all(data, False, data.dtype)
    out, mask = _dropout(data, ratio, None)
    return out, mask.astype(data.dtype)


@op("Dropout", since=7)
def dropout_7(data, *, ratio=0.5):
    return _keep_all(data, False, data.dtype)  # opsets 7-9: always inference; mask of type T


@op("Dropout", since=10)
def dropout_10(data, *, ratio=0.5):
    return _keep_all(data, False, np.bool_)


@op("Dropout", since=12)
def dropout(data, ratio=None, training_mode=None, *, seed=None):
    ratio = 0.5 if ratio is None else float(np.asarray(ratio).reshape(()))
    if training_mode is None or not bool(np.asarray(training_mode).reshape(())) or ratio == 0:
        return _keep_all(data, True, np.bool_)
    return _dropout(data, ratio, seed)
