"""Differential test of onyx's native kernels against its numpy kernels (issue 20, item 4).

Every kernel with a native path runs twice on the same seeded random case: with the library
(as a session would run it) and with it switched off (native.disabled(): the numpy path the
kernel falls back to). Shapes must agree, and values bit for bit where the native path
promises the numpy kernel's bits (integer and quantized ops, pooling, Resize, the
elementwise passes, batch norm, trees), else within a tight tolerance (float sums in another
order: convs, GEMV, normalization statistics, recurrences).

The geometries include the degenerate ones: 1-D and 3-D convs, one output position, 1x1
images, kernels larger than the input with padding, strides larger than the kernel,
dilations, group and channel counts that do not fill a vector, zero-size batches, batch 1
and odd batches; inputs contiguous, strided, Fortran-ordered, misaligned (an odd byte
offset) or read-only (a session's constants: the set-ups kept per weight).

    python scripts/native_differential.py --cases 20000 [--seed 0] [--family conv]

tests/test_native_differential.py runs a fast seeded sample of the same cases in CI.
"""

from __future__ import annotations

import argparse
import inspect
import math
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from onyx.runtime import native  # noqa: E402
from onyx.runtime.registry import lookup  # noqa: E402

MS, ML, ONYX = "com.microsoft", "ai.onnx.ml", "ai.onyx"
BYTES = (np.uint8, np.int8)


@dataclass
class Case:
    family: str
    op: str
    inputs: list
    attrs: dict = field(default_factory=dict)
    domain: str = ""
    version: int = 21
    exact: bool = True
    rtol: float = 1e-5
    atol: float = 1e-5
    bound: bool = False  # call the kernel's prepared form (derived.prepared), as a plan does

    def describe(self) -> str:
        shapes = ", ".join(
            "None" if a is None else f"{a.dtype}{list(a.shape)}" for a in self.inputs
        )
        return f"{self.family}: {self.domain or 'ai.onnx'}::{self.op}({shapes}) {self.attrs}"


# ----------------------------------------------------------------------------- layouts


def laid_out(rng, a: np.ndarray | None, constant: bool = False):
    """a with the same values in a random memory layout: contiguous, strided, Fortran order,
    misaligned, or (constants) read-only like a session's initializers."""
    if a is None or a.ndim == 0 or a.size == 0:
        return a
    kinds = ["contiguous", "strided", "fortran", "misaligned"] + ["readonly"] * (2 * constant)
    kind = kinds[rng.integers(len(kinds))]
    if kind == "strided":
        wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        wide[..., ::2] = a
        return wide[..., ::2]
    if kind == "fortran":
        return np.asfortranarray(a)
    if kind == "misaligned" and a.itemsize > 1:
        raw = np.zeros(a.nbytes + 1, np.uint8)
        out = np.frombuffer(raw.data, a.dtype, a.size, offset=1).reshape(a.shape)
        out[...] = a
        return out
    if kind == "readonly":
        a = a.copy()
        a.flags.writeable = False
        return a
    return np.ascontiguousarray(a)


def _bytes(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def _normal(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _pick(rng, values):
    return values[rng.integers(len(values))]


# ----------------------------------------------------------------------------- geometry


def _window_geometry(rng, dims: int, *, max_kernel=5, channels=True):
    """(spatial input shape, kernel, strides, dilations, pads or auto_pad) with every output
    size at least 1, degenerate shapes favoured."""
    for _ in range(100):
        kernel = [int(rng.integers(1, max_kernel + 1)) for _ in range(dims)]
        strides = [int(_pick(rng, [1, 1, 2, 3, 6])) for _ in range(dims)]  # 6: past the kernel
        dilations = [int(_pick(rng, [1, 1, 1, 2, 3])) for _ in range(dims)]
        eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        style = rng.integers(6)
        if style == 0:  # 1x1 images
            shape = [1] * dims
        elif style == 1:  # one output position
            shape = [max(1, e - int(rng.integers(0, 2))) for e in eff]
        else:
            shape = [int(rng.integers(1, 20)) for _ in range(dims)]
        auto_pad = _pick(rng, ["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
        pads = [int(rng.integers(0, max(1, min(4, e)))) for e in eff * 2]
        attrs = dict(kernel_shape=kernel, strides=strides, dilations=dilations)
        if auto_pad == "NOTSET":
            attrs["pads"] = pads
            padded = [i + pads[j] + pads[dims + j] for j, i in enumerate(shape)]
        elif auto_pad == "VALID":
            attrs["auto_pad"] = auto_pad
            padded = shape
        else:
            attrs["auto_pad"] = auto_pad
            padded = [max(i, e) for i, e in zip(shape, eff)]
        if all(p >= e for p, e in zip(padded, eff)):
            return shape, attrs
    return [1] * dims, dict(kernel_shape=[1] * dims)


def _batch(rng):
    return int(_pick(rng, [1, 1, 2, 3, 5, 0]))


# ----------------------------------------------------------------------------- families


def gen_conv(rng) -> Case:
    dims = int(_pick(rng, [1, 2, 2, 2, 3]))
    shape, attrs = _window_geometry(rng, dims)
    kind = rng.integers(4)
    C = int(_pick(rng, [1, 2, 3, 5, 8, 16, 17, 33]))
    if kind == 0:  # depthwise (with a multiplier)
        group, M = C, C * int(_pick(rng, [1, 1, 2]))
    elif kind == 1 and C % 2 == 0:
        group = int(_pick(rng, [g for g in (2, C // 2 or 1) if C % g == 0]))
        M = group * int(rng.integers(1, 5))
    else:
        group, M = 1, int(_pick(rng, [1, 4, 8, 9, 16, 24, 40]))
    N = _batch(rng)
    x = _normal(rng, (N, C, *shape))
    w = _normal(rng, (M, C // group, *attrs["kernel_shape"]), 0.5)
    b = _normal(rng, (M,)) if rng.integers(2) else None
    attrs["group"] = group
    K = (C // group) * math.prod(attrs["kernel_shape"])
    return Case("conv", "Conv", [laid_out(rng, x), laid_out(rng, w, True), laid_out(rng, b, True)],
                attrs, exact=False, rtol=1e-4, atol=1e-5 * max(1, K))  # fmt: skip


def gen_fused_conv(rng) -> Case:
    case = gen_conv(rng)
    case.family, case.op, case.domain, case.version = "fused_conv", "FusedConv", MS, 1
    activation = _pick(rng, ["Relu", "LeakyRelu", "Clip", "HardSigmoid", "Sigmoid", "Tanh", ""])
    case.attrs["activation"] = activation
    if activation in ("LeakyRelu", "HardSigmoid", "Clip"):
        params = {"LeakyRelu": [0.1], "HardSigmoid": [0.3, 0.4], "Clip": [-0.5, 0.7]}
        case.attrs["activation_params"] = params[activation]
    if rng.integers(2):  # the residual Z, of the output's shape
        try:
            shape = _call(case).shape
        except Exception:  # (compared as run_case compares failures)
            return case
        case.inputs.append(laid_out(rng, _normal(rng, shape)))
    return case


def gen_nhwc_conv(rng) -> Case:
    """The channels-last convs (ai.onyx NhwcFusedConv, with a residual NhwcFusedConvAdd):
    group 1 or depthwise, x (N, H, W, C) contiguous or an NCHW tensor's transposed view."""
    shape, attrs = _window_geometry(rng, 2)
    C = int(_pick(rng, [1, 3, 5, 16, 17, 33]))
    depthwise = C > 1 and bool(rng.integers(2))
    M = C if depthwise else int(_pick(rng, [1, 4, 8, 16, 24, 40, 72]))
    x = _normal(rng, (_batch(rng), C, *shape)).transpose(0, 2, 3, 1)
    if rng.integers(2):
        x = np.ascontiguousarray(x)
    w = _normal(rng, (M, 1 if depthwise else C, *attrs["kernel_shape"]), 0.5)
    attrs["group"] = C if depthwise else 1
    activation = _pick(rng, ["Relu", "LeakyRelu", "Clip", "HardSigmoid", ""])
    attrs["activation"] = activation
    if activation in ("LeakyRelu", "HardSigmoid", "Clip"):
        params = {"LeakyRelu": [0.1], "HardSigmoid": [0.3, 0.4], "Clip": [-0.5, 0.7]}
        attrs["activation_params"] = params[activation]
    K = (1 if depthwise else C) * math.prod(attrs["kernel_shape"])
    case = Case("nhwc_conv", "NhwcFusedConv", [x, laid_out(rng, w, True), _constant(_normal(rng, (M,)))],
                attrs, domain=ONYX, version=1, exact=False, rtol=1e-4, atol=1e-5 * max(1, K))  # fmt: skip
    if rng.integers(2):  # the residual Z, of the output's shape
        try:
            y_shape = _call(case).shape
        except Exception:  # (compared as run_case compares failures)
            return case
        case.op = "NhwcFusedConvAdd"
        case.inputs.append(_normal(rng, y_shape))
    return case


def gen_conv1d(rng) -> Case:
    """1-D convs shaped as audio and signal layers (conv1d.c): long signals with few channels,
    few frames with many, strides up to the kernel's length, FusedConv's forms."""
    C = int(_pick(rng, [1, 1, 2, 8, 16, 40, 129]))
    M = int(_pick(rng, [1, 8, 9, 16, 33, 64, 258]))
    k = int(_pick(rng, [1, 3, 5, 7, 16, 64]))
    s = int(_pick(rng, [1, 1, 2, 4, k]))
    d = int(_pick(rng, [1, 1, 2]))
    L = (k - 1) * d + 1 + int(_pick(rng, [0, 3, 60, 700]))
    group = int(_pick(rng, [g for g in (1, 1, 2, 4) if C % g == 0 and M % g == 0]))
    pads = [int(rng.integers(0, k)), int(rng.integers(0, k))]
    x = _normal(rng, (_batch(rng), C, L))
    w = _normal(rng, (M, C // group, k), 0.5)
    b = _normal(rng, (M,)) if rng.integers(2) else None
    attrs = dict(kernel_shape=[k], strides=[s], dilations=[d], pads=pads, group=group)
    case = Case("conv1d", "Conv", [laid_out(rng, x), laid_out(rng, w, True),
                laid_out(rng, b, True)], attrs, exact=False, rtol=1e-4,
                atol=1e-5 * max(1, C // group * k))  # fmt: skip
    if rng.integers(2):
        case.op, case.domain, case.version = "FusedConv", MS, 1
        case.attrs["activation"] = _pick(rng, ["Relu", "LeakyRelu", "Clip", "HardSigmoid", ""])
        params = {"LeakyRelu": [0.1], "HardSigmoid": [0.3, 0.4], "Clip": [-0.5, 0.7]}
        if case.attrs["activation"] in params:
            case.attrs["activation_params"] = params[case.attrs["activation"]]
    return case


def _quantized_conv_inputs(rng):
    dims = int(_pick(rng, [1, 2, 2, 2]))
    shape, attrs = _window_geometry(rng, dims)
    C = int(_pick(rng, [1, 3, 4, 8, 16, 17]))
    depthwise = rng.integers(3) == 0
    group, M = (C, C) if depthwise else (1, int(_pick(rng, [1, 5, 8, 16, 33])))
    attrs["group"] = group
    x_type, w_type = _pick(rng, BYTES), _pick(rng, BYTES)
    x = _bytes(rng, x_type, (_batch(rng), C, *shape))
    w = _bytes(rng, w_type, (M, C // group, *attrs["kernel_shape"]))
    return x, w, attrs, M


def gen_qlinear_conv(rng) -> Case:
    x, w, attrs, M = _quantized_conv_inputs(rng)
    per_channel = bool(rng.integers(2))
    w_scale = rng.uniform(0.001, 0.02, M if per_channel else ()).astype(np.float32)
    w_zp = (_bytes(rng, w.dtype, M) if w.dtype == np.uint8 else np.zeros(M, w.dtype)) if \
        per_channel else np.array(_bytes(rng, w.dtype, ()), w.dtype)  # fmt: skip
    y_type = x.dtype
    inputs = [
        laid_out(rng, x), np.float32(rng.uniform(0.01, 0.05)), _bytes(rng, x.dtype, ()),
        laid_out(rng, w, True), w_scale, w_zp, np.float32(rng.uniform(0.05, 0.5)),
        _bytes(rng, y_type, ()),
        rng.integers(-5000, 5000, M).astype(np.int32) if rng.integers(2) else None,
    ]  # fmt: skip
    inputs = [np.asarray(v) if v is not None else None for v in inputs]
    if rng.integers(3) == 0:  # with an activation's table (the optimizer's fusion)
        table = _constant(_bytes(rng, y_type, (256,)))
        inputs = inputs + [None] * (9 - len(inputs)) + [table]
        return Case("qlinear_conv", "QLinearConvLookup", inputs, attrs, domain=ONYX, version=1)
    return Case("qlinear_conv", "QLinearConv", inputs, attrs)


def gen_conv_integer(rng) -> Case:
    x, w, attrs, _ = _quantized_conv_inputs(rng)
    inputs = [laid_out(rng, x), laid_out(rng, w, True), _bytes(rng, x.dtype, ()),
              _bytes(rng, w.dtype, ())]  # fmt: skip
    return Case("conv_integer", "ConvInteger", [np.asarray(v) for v in inputs], attrs)


def gen_matmul_integer(rng) -> Case:
    M, K, N = (int(_pick(rng, [1, 2, 5, 6, 7, 13, 64])), int(_pick(rng, [1, 3, 4, 16, 45, 300])),
               int(_pick(rng, [1, 2, 17, 32, 33, 70])))  # fmt: skip
    batch = _pick(rng, [(), (), (2,), (3, 1)])
    a_type, b_type = _pick(rng, BYTES), _pick(rng, BYTES)
    a = _bytes(rng, a_type, (*batch, M, K))
    b = _bytes(rng, b_type, (K, N) if rng.integers(2) else (*batch, K, N))
    za = np.asarray(_bytes(rng, a_type, ()))
    zb = np.asarray(_bytes(rng, b_type, ())) if rng.integers(2) else None
    return Case("matmul_integer", "MatMulInteger",
                [laid_out(rng, a), laid_out(rng, b, True), za, zb])  # fmt: skip


def gen_qlinear_matmul(rng) -> Case:
    case = gen_matmul_integer(rng)
    a, b, za, _ = case.inputs
    y_type = _pick(rng, BYTES)
    inputs = [a, np.float32(rng.uniform(0.01, 0.05)), za, b, np.float32(rng.uniform(0.01, 0.05)),
              np.asarray(_bytes(rng, b.dtype, ())), np.float32(rng.uniform(0.5, 4.0)),
              np.asarray(_bytes(rng, y_type, ()))]  # fmt: skip
    return Case("qlinear_matmul", "QLinearMatMul", [np.asarray(v) for v in inputs])


def _constant(a):
    a = np.array(a)
    a.flags.writeable = False  # (as a session's initializers: the native paths want constants)
    return a


def gen_dynamic_matmul(rng) -> Case:
    M, K, N = (int(_pick(rng, [1, 5, 6, 16, 64])), int(_pick(rng, [1, 3, 4, 64, 300])),
               int(_pick(rng, [1, 2, 17, 32, 70, 192])))  # fmt: skip
    batch = _pick(rng, [(), (), (2,), (3, 1)])
    a = _normal(rng, (*batch, M, K), float(_pick(rng, [0.01, 1.0, 30.0])))
    if rng.integers(3) == 0:
        a += np.float32(rng.uniform(-2, 2))  # (all one sign: a zero point at an end)
    if rng.integers(6) == 0:
        a.reshape(-1)[:: int(rng.integers(1, 9))] = _pick(rng, [np.nan, np.inf, 0.0])
    b_type = _pick(rng, BYTES)
    per_column = bool(rng.integers(2))
    b_scale = rng.uniform(0.001, 0.05, N if per_column else ()).astype(np.float32)
    zp = [None, _bytes(rng, b_type, ()), _bytes(rng, b_type, (N,)), np.zeros(N, b_type)]
    b_zero_point = zp[int(rng.integers(len(zp)))]
    bias = _normal(rng, (N,)) if rng.integers(2) else None
    inputs = [laid_out(rng, a), _constant(_bytes(rng, b_type, (K, N))), _constant(b_scale),
              None if b_zero_point is None else _constant(b_zero_point),
              None if bias is None else _constant(bias)]  # fmt: skip
    return Case("dynamic_matmul", "DynamicQuantizeMatMul", inputs, domain=MS, version=1)


def gen_qgemm(rng) -> Case:
    M, K, N = (int(_pick(rng, [1, 2, 7, 16])), int(_pick(rng, [1, 4, 45, 96])),
               int(_pick(rng, [1, 10, 33, 64])))  # fmt: skip
    a_type = _pick(rng, BYTES)
    b_type = np.int8 if a_type == np.int8 else _pick(rng, BYTES)
    trans_a, trans_b = int(rng.integers(2)), int(rng.integers(2))
    a = _bytes(rng, a_type, (K, M) if trans_a else (M, K))
    b = _bytes(rng, b_type, (N, K) if trans_b else (K, N))
    per_column = bool(rng.integers(2))
    b_scale = rng.uniform(0.001, 0.02, N if per_column else ()).astype(np.float32)
    b_zp = _bytes(rng, b_type, N if per_column else ()) if b_type == np.uint8 else \
        np.zeros(N if per_column else (), b_type)  # fmt: skip
    c = rng.integers(-5000, 5000, N).astype(np.int32) if rng.integers(2) else None
    requantized = bool(rng.integers(2))
    inputs = [laid_out(rng, a), np.float32(rng.uniform(0.01, 0.05)), _bytes(rng, a_type, ()),
              _constant(b), _constant(b_scale), _constant(b_zp),
              None if c is None else _constant(c)]  # fmt: skip
    if requantized:
        inputs += [np.float32(rng.uniform(0.05, 0.5)), _bytes(rng, a_type, ())]
    attrs = {"transA": trans_a, "transB": trans_b, "alpha": float(_pick(rng, [1.0, 0.5]))}
    return Case("qgemm", "QGemm", [None if v is None else np.asarray(v) for v in inputs], attrs,
                domain=MS, version=1)  # fmt: skip


def gen_gemm(rng) -> Case:
    rows, K, N = (  # (weights past linalg.NUMPY_GEMV_WEIGHTS reach the native GEMV)
        int(rng.integers(1, 10)),
        int(_pick(rng, [1, 7, 16, 100, 300, 300])),
        int(rng.integers(1, 200)),
    )
    trans_b = int(rng.integers(2))
    a = _normal(rng, (rows, K))
    b = _normal(rng, (N, K) if trans_b else (K, N))
    c = _pick(rng, [None, (N,), (rows, N), (1,), None, (N,)])  # (the GEMV takes None, (N,))
    attrs = dict(
        transB=trans_b, alpha=float(_pick(rng, [1.0, 0.5])), beta=float(_pick(rng, [1.0, 2.0]))
    )
    return Case("gemm", "Gemm", [laid_out(rng, a), laid_out(rng, b, True),
                                 None if c is None else _normal(rng, c)], attrs, exact=False,
                rtol=1e-4, atol=1e-5 * K)  # fmt: skip


def gen_matmul_nbits(rng) -> Case:
    """MatMulNBits (nbits.c): accuracy level 4 (the int8 products; bit for bit up to 16
    rows) and level 0 (dequantized panels, bit for bit)."""
    bits, block = int(_pick(rng, [2, 4, 4, 4, 8])), int(_pick(rng, [16, 32, 32, 64, 128, 256]))
    K, N = int(_pick(rng, [1, 31, 32, 100, 128, 300])), int(rng.integers(1, 70))
    rows = _pick(rng, [(1,), (1, 1), (3,), (16,), (2, 9), (0,), (40,)])
    k_blocks = -(-K // block)
    b = rng.integers(0, 256, (N, k_blocks, block * bits // 8), dtype=np.uint8)
    scales = _normal(rng, (N * k_blocks,), 0.1)
    zero_points = _pick(rng, [None, "packed", "float"])
    if zero_points == "packed":
        zero_points = rng.integers(0, 256, N * -(-k_blocks * bits // 8), dtype=np.uint8)
    elif zero_points == "float":
        zero_points = rng.integers(0, 2**bits, N * k_blocks).astype(np.float32)
    a = _normal(rng, rows + (K,), float(_pick(rng, [1.0, 100.0])))
    if a.size and rng.random() < 0.2:
        a[..., : min(K, block)] = 0  # a block of zeros: scale 0
    attrs = dict(K=K, N=N, bits=bits, block_size=block, accuracy_level=int(_pick(rng, [0, 4, 4])))
    # (beyond 16 rows at level 4 numpy takes one float GEMM, the native kernel onnxruntime's
    # integer products: the same terms in another order)
    prompt = attrs["accuracy_level"] == 4 and math.prod(rows) > 16
    return Case("matmul_nbits", "MatMulNBits", [laid_out(rng, a), laid_out(rng, b, True),
                laid_out(rng, scales, True), laid_out(rng, zero_points, True)], attrs,
                domain=MS, version=1, exact=not prompt, rtol=1e-4,
                atol=1e-5 * K * float(np.abs(a).max(initial=1.0)))  # fmt: skip


def gen_gqa(rng) -> Case:
    """GroupQueryAttention (attention.c): a first prompt, a later prompt or a decoded token
    over a KV cache (a longer shared-style cache too), packed QKV or not, rotary (halves or
    pairs, position ids), local window, softcap, sinks, non-causal; head sizes off the
    vector width take the portable loop."""
    batch, kv_heads = int(rng.integers(1, 3)), int(_pick(rng, [1, 2, 4]))
    q_heads = kv_heads * int(_pick(rng, [1, 2, 4]))
    head = int(_pick(rng, [16, 32, 64, 64, 8, 24]))
    q_len, past = int(_pick(rng, [1, 1, 3, 9, 33])), int(_pick(rng, [0, 0, 5, 40]))
    extra = int(_pick(rng, [0, 0, 7]))  # cache rows past the step (a shared buffer)
    total = past + q_len
    seqlens = np.full(batch, total - 1, np.int32)
    if batch > 1 and past:
        seqlens[1] -= int(rng.integers(0, past + 1))  # (an entry with fewer cached rows)
    packed = rng.random() < 0.5
    x = _normal(rng, (batch, q_len, (q_heads + (2 * kv_heads if packed else 0)) * head))
    key = None if packed else _normal(rng, (batch, q_len, kv_heads * head))
    value = None if packed else _normal(rng, (batch, q_len, kv_heads * head))
    cache = past + extra if past else 0
    past_k = _normal(rng, (batch, kv_heads, cache, head)) if cache else None
    past_v = _normal(rng, (batch, kv_heads, cache, head)) if cache else None
    attrs = dict(num_heads=q_heads, kv_num_heads=kv_heads, causal=int(_pick(rng, [1, 1, 0])),
                 local_window_size=int(_pick(rng, [-1, -1, 4])),
                 softcap=float(_pick(rng, [0.0, 0.0, 5.0])))  # fmt: skip
    cos = sin = None
    if rng.random() < 0.7:
        angles = rng.uniform(0, 6, (total + extra + 4, head // 2 // int(_pick(rng, [1, 2]))))
        cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
        attrs.update(do_rotary=1, rotary_interleaved=int(rng.integers(0, 2)))
    sink = _normal(rng, (q_heads,)) if rng.random() < 0.2 else None
    if sink is None and rng.random() < 0.2:
        attrs["smooth_softmax"] = 1
    inputs = [x, key, value, past_k, past_v, seqlens, np.array([total], np.int32), cos, sin,
              None, None, sink]  # fmt: skip
    return Case(
        "gqa",
        "GroupQueryAttention",
        inputs,
        attrs,
        domain=MS,
        version=1,
        exact=False,
        rtol=1e-4,
        atol=1e-5,
    )


def gen_rms(rng) -> Case:
    """The RMS norms of LLM layers (attention.c): SkipSimplifiedLayerNormalization (skip, bias,
    all four outputs) and SimplifiedLayerNormalization over the last axis."""
    rows = _pick(rng, [(1,), (1, 1), (3, 7), (2, 5), (0, 4)])
    n = int(_pick(rng, [1, 15, 16, 64, 100, 512]))
    x = _normal(rng, rows + (n,), float(_pick(rng, [1.0, 30.0])))
    gamma = _normal(rng, (n,))
    eps = float(_pick(rng, [1e-6, 1e-5, 1e-12]))
    if rng.random() < 0.5:
        return Case("rms", "SimplifiedLayerNormalization", [x, gamma], dict(epsilon=eps),
                    version=1, exact=False, rtol=1e-5, atol=1e-6)  # fmt: skip
    skip = _normal(rng, x.shape)
    bias = _normal(rng, (n,)) if rng.random() < 0.5 else None
    return Case("rms", "SkipSimplifiedLayerNormalization", [x, skip, gamma, bias],
                dict(epsilon=eps), domain=MS, version=1, exact=False, rtol=1e-5, atol=1e-6)  # fmt: skip


def gen_attention(rng) -> Case:
    """com.microsoft Attention without past (attention.c's step with the padding penalties;
    the packed projection on gemm_f32.c when the weight is a constant of 16+ rows' work):
    masks of lengths, ends + starts, raw [B, T] or none."""
    batch, seq, heads = int(rng.integers(1, 3)), int(_pick(rng, [1, 5, 16, 40])), 4
    head = int(_pick(rng, [8, 16, 32]))
    hidden = heads * head
    x = _normal(rng, (batch, seq, hidden))
    w = _normal(rng, (hidden, 3 * hidden), 0.2)
    bias = _normal(rng, (3 * hidden,)) if rng.random() < 0.7 else None
    mask = _pick(rng, [None, "lengths", "raw", "ends"])
    if mask == "lengths":
        mask = rng.integers(1, seq + 1, batch).astype(np.int32)
    elif mask == "raw":
        mask = (rng.random((batch, seq)) < 0.8).astype(np.int32)
    elif mask == "ends":
        mask = np.concatenate([np.full(batch, seq), rng.integers(0, seq, batch)]).astype(np.int32)
    return Case("attention", "Attention", [laid_out(rng, x), laid_out(rng, w, True), bias, mask],
                dict(num_heads=heads), domain=MS, version=1, exact=False, rtol=1e-4,
                atol=1e-5)  # fmt: skip


def gen_matmul_f32(rng) -> Case:
    """float32 MatMul against a constant B (gemm_f32.c from 16 rows of A on; its sums in
    another order than BLAS's), stacked A included."""
    K, N = int(_pick(rng, [1, 7, 64, 100, 256])), int(_pick(rng, [1, 16, 31, 32, 33, 100]))
    rows = _pick(rng, [(16,), (1, 17), (2, 9), (40,), (3, 128), (8,)])
    a, b = _normal(rng, rows + (K,)), _normal(rng, (K, N))
    return Case("matmul_f32", "MatMul", [laid_out(rng, a), laid_out(rng, b, True)], exact=False,
                rtol=1e-4, atol=1e-5 * K)  # fmt: skip


def gen_pool(rng) -> Case:
    dims = int(_pick(rng, [1, 2, 2, 2, 3]))
    op = _pick(rng, ["MaxPool", "AveragePool"])
    shape, attrs = _window_geometry(rng, dims)
    if op == "AveragePool":
        attrs["count_include_pad"] = int(rng.integers(2))
    attrs["ceil_mode"] = int(rng.integers(2))
    version = int(_pick(rng, [19, 11]))  # 11: onnxruntime's column-first sums
    if version < 19:
        attrs.pop("dilations")
    x = _normal(rng, (_batch(rng), int(_pick(rng, [1, 3, 16, 17])), *shape))
    if rng.integers(4) == 0:
        x.reshape(-1)[::7] = np.nan
    return Case("pool", op, [laid_out(rng, x)], attrs, version=version)


def gen_global_pool(rng) -> Case:
    op = _pick(rng, ["GlobalAveragePool", "ReduceMean"])
    x = _normal(rng, (_batch(rng), int(_pick(rng, [1, 3, 64])), *[int(rng.integers(1, 15))
                                                                 for _ in range(2)]))  # fmt: skip
    attrs = {"axes": [2, 3]} if op == "ReduceMean" else {}
    return Case("global_pool", op, [laid_out(rng, x)], attrs, version=13 if attrs else 1,
                exact=False, rtol=1e-5, atol=1e-6)  # fmt: skip


def gen_qlinear_global_pool(rng) -> Case:
    x_type = _pick(rng, BYTES)
    x = _bytes(rng, x_type, (_batch(rng), int(_pick(rng, [1, 8, 17])), int(rng.integers(1, 12)),
                             int(rng.integers(1, 12))))  # fmt: skip
    inputs = [laid_out(rng, x), np.float32(rng.uniform(0.01, 0.1)), _bytes(rng, x_type, ()),
              np.float32(rng.uniform(0.01, 0.1)), _bytes(rng, x_type, ())]  # fmt: skip
    return Case("qlinear_global_pool", "QLinearGlobalAveragePool",
                [np.asarray(v) for v in inputs], domain=MS, version=1)  # fmt: skip


def gen_resize(rng) -> Case:
    n, c = _batch(rng) or 1, int(_pick(rng, [1, 3, 16]))
    h, w = int(rng.integers(1, 20)), int(rng.integers(1, 20))
    mode = _pick(rng, ["linear", "nearest"])
    if mode == "nearest" and rng.integers(2):  # whole factors: repeat2d
        factors = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
        x = _normal(rng, (n, c, h, w)).astype(_pick(rng, [np.float32, np.int32]))
        scales = np.array([1, 1, *factors], np.float32)
        attrs = dict(
            mode="nearest", nearest_mode="floor", coordinate_transformation_mode="asymmetric"
        )
    else:
        x = _normal(rng, (n, c, h, w))
        scales = np.array([1, 1, rng.uniform(0.3, 4.0), rng.uniform(0.3, 4.0)], np.float32)
        ctm = _pick(rng, ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])
        attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
    return Case("resize", "Resize", [laid_out(rng, x), None, scales], attrs, version=13)


def gen_rnn(rng) -> Case:
    op = _pick(rng, ["LSTM", "GRU"])
    gates = 4 if op == "LSTM" else 3
    H, I = int(_pick(rng, [16, 32, 8])), int(_pick(rng, [1, 5, 16]))
    steps, batch = int(rng.integers(1, 6)), int(_pick(rng, [1, 2, 3]))
    dirs = int(rng.integers(1, 3))
    attrs = dict(hidden_size=H, direction="bidirectional" if dirs == 2 else
                 _pick(rng, ["forward", "reverse"]))  # fmt: skip
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    inputs = [laid_out(rng, _normal(rng, (steps, batch, I))),
              laid_out(rng, _normal(rng, (dirs, gates * H, I), 0.3), True),
              laid_out(rng, _normal(rng, (dirs, gates * H, H), 0.3), True),
              _normal(rng, (dirs, 2 * gates * H), 0.1), None,
              _normal(rng, (dirs, batch, H)) if rng.integers(2) else None]  # fmt: skip
    if op == "LSTM":
        inputs.append(_normal(rng, (dirs, batch, H)) if rng.integers(2) else None)
    return Case("rnn", op, inputs, attrs, version=14, exact=False, rtol=1e-4, atol=1e-5)


def gen_rows(rng) -> Case:
    op = _pick(rng, ["LayerNormalization", "InstanceNormalization", "GroupNormalization",
                     "BatchNormalization"])  # fmt: skip
    N, C = _batch(rng), int(_pick(rng, [1, 2, 4, 6, 16]))
    x = _normal(rng, (N, C, int(rng.integers(1, 9)), int(rng.integers(1, 9))), 3.0)
    if op == "LayerNormalization":
        axis = int(_pick(rng, [-1, -2, 1]))
        norm_shape = x.shape[axis:]
        return Case("rows", op, [laid_out(rng, x), _normal(rng, norm_shape),
                                 _normal(rng, norm_shape) if rng.integers(2) else None],
                    dict(axis=axis, epsilon=1e-5), version=17, exact=False, rtol=1e-4,
                    atol=1e-4)  # fmt: skip
    if op == "InstanceNormalization":
        return Case("rows", op, [laid_out(rng, x), _normal(rng, (C,)), _normal(rng, (C,))],
                    dict(epsilon=1e-5), version=6, exact=False, rtol=1e-4, atol=1e-4)  # fmt: skip
    if op == "GroupNormalization":
        groups = int(_pick(rng, [g for g in (1, 2, C) if C % g == 0]))
        return Case("rows", op, [laid_out(rng, x), _normal(rng, (C,)), _normal(rng, (C,))],
                    dict(num_groups=groups, epsilon=1e-5), version=21, exact=False, rtol=1e-4,
                    atol=1e-4)  # fmt: skip
    var = np.abs(_normal(rng, (C,))) + 0.1
    return Case("rows", op, [laid_out(rng, x), _normal(rng, (C,)), _normal(rng, (C,)),
                             _normal(rng, (C,)), var], dict(epsilon=1e-5), version=15)  # fmt: skip


def _random_forest(rng, features: int, trees: int, depth: int) -> dict:
    """TreeEnsembleRegressor attributes of `trees` full binary trees of `depth` levels."""
    nodes = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids",
                             "nodes_values", "nodes_modes", "nodes_truenodeids",
                             "nodes_falsenodeids", "nodes_missing_value_tracks_true")}  # fmt: skip
    targets = {k: [] for k in ("target_treeids", "target_nodeids", "target_ids", "target_weights")}
    inner = 2**depth - 1
    for t in range(trees):
        for i in range(2 * inner + 1):
            leaf = i >= inner
            nodes["nodes_treeids"].append(t)
            nodes["nodes_nodeids"].append(i)
            nodes["nodes_featureids"].append(0 if leaf else int(rng.integers(features)))
            nodes["nodes_values"].append(0.0 if leaf else float(rng.standard_normal()))
            nodes["nodes_modes"].append(
                "LEAF" if leaf else _pick(rng, ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE"])
            )
            nodes["nodes_truenodeids"].append(0 if leaf else 2 * i + 1)
            nodes["nodes_falsenodeids"].append(0 if leaf else 2 * i + 2)
            nodes["nodes_missing_value_tracks_true"].append(int(rng.integers(2)))
            if leaf:
                for target in range(2):
                    targets["target_treeids"].append(t)
                    targets["target_nodeids"].append(i)
                    targets["target_ids"].append(target)
                    targets["target_weights"].append(float(rng.standard_normal()))
    return {**nodes, **targets, "n_targets": 2}


def gen_trees(rng) -> Case:
    features = int(rng.integers(1, 6))
    attrs = _random_forest(rng, features, int(rng.integers(1, 12)), int(rng.integers(1, 5)))
    x = rng.standard_normal((int(_pick(rng, [1, 3, 17, 40])), features))
    x = x.astype(_pick(rng, [np.float32, np.float64]))
    if rng.integers(3) == 0:
        x.reshape(-1)[::5] = np.nan
    return Case("trees", "TreeEnsembleRegressor", [laid_out(rng, x)], attrs, domain=ML, version=3)


def gen_tree_classifier(rng) -> Case:
    """A gradient-boosted classifier's layout: each tree votes for one class only (every
    row still gets a vote for every class), or a forest whose leaves vote for every class."""
    features, classes = int(rng.integers(1, 6)), int(_pick(rng, [2, 3, 4]))
    forest = _random_forest(
        rng, features, classes * int(rng.integers(1, 4)), int(rng.integers(1, 5))
    )
    one_class_per_tree = bool(rng.integers(2))
    leaves = [(t, n) for t, n, i in zip(forest["target_treeids"], forest["target_nodeids"],
                                        forest["target_ids"]) if i == 0]  # fmt: skip
    votes = [(t, n, c) for t, n in leaves for c in range(classes)
             if not one_class_per_tree or c == t % classes]  # fmt: skip
    attrs = {k: v for k, v in forest.items() if k.startswith("nodes_")}
    attrs.update(
        class_treeids=[t for t, _, _ in votes],
        class_nodeids=[n for _, n, _ in votes],
        class_ids=[c for _, _, c in votes],
        class_weights=[float(w) for w in rng.standard_normal(len(votes))],
        classlabels_int64s=list(range(classes)),
        base_values=[float(v) for v in rng.standard_normal(classes)],
        post_transform=_pick(rng, ["NONE", "SOFTMAX", "LOGISTIC"]),
    )
    x = rng.standard_normal((int(_pick(rng, [1, 3, 17, 40])), features))
    x = x.astype(_pick(rng, [np.float32, np.float64]))
    # (trees.c's softmax takes activation.h's exp: 1e-7 relative from numpy's)
    softmax = attrs["post_transform"] == "SOFTMAX"
    return Case("tree_classifier", "TreeEnsembleClassifier", [laid_out(rng, x)], attrs,
                domain=ML, version=3, exact=not softmax, rtol=1e-5, atol=1e-6)  # fmt: skip


def gen_linear_classifier(rng) -> Case:
    """LinearClassifier of several classes: trees.c's sums in feature order and its softmax
    against numpy's product (BLAS's order) and softmax. NaN and infinite features too."""
    features, classes = int(rng.integers(1, 12)), int(_pick(rng, [2, 3, 5, 8, 12, 20]))
    attrs = dict(
        coefficients=rng.standard_normal(classes * features).tolist(),
        intercepts=rng.standard_normal(classes).tolist() if rng.integers(2) else None,
        classlabels_ints=list(range(classes)),
        post_transform=_pick(rng, ["NONE", "SOFTMAX", "LOGISTIC"]),
        multi_class=1,
    )
    x = rng.standard_normal((int(_pick(rng, [1, 3, 17, 40])), features)).astype(np.float32)
    if rng.integers(3) == 0:
        x.reshape(-1)[:: int(rng.integers(2, 7))] = _pick(rng, [np.nan, np.inf, -np.inf])
    return Case("linear_classifier", "LinearClassifier", [x], attrs, domain=ML, version=1,
                exact=False, rtol=1e-5, atol=1e-6, bound=True)  # fmt: skip


def gen_svm_classifier(rng) -> Case:
    """SVMClassifier with probabilities: the pairwise coupling on trees.c vs numpy's."""
    classes, features = int(rng.integers(2, 11)), int(rng.integers(1, 9))
    per_class = [int(rng.integers(1, 4)) for _ in range(classes)]
    vectors, pairs = sum(per_class), classes * (classes - 1) // 2
    attrs = dict(
        classlabels_ints=list(range(classes)),
        vectors_per_class=per_class,
        support_vectors=_normal(rng, (vectors * features,)).tolist(),
        coefficients=_normal(rng, ((classes - 1) * vectors,)).tolist(),
        rho=_normal(rng, (pairs,)).tolist(),
        prob_a=(-rng.uniform(0.5, 3.0, pairs)).tolist(),
        prob_b=_normal(rng, (pairs,), 0.3).tolist(),
        kernel_type=_pick(rng, ["RBF", "LINEAR", "POLY", "SIGMOID"]),
        kernel_params=[float(rng.uniform(0.05, 0.5)), 0.5, 2.0],
    )
    x = _normal(rng, (int(_pick(rng, [1, 3, 5, 40])), features)).astype(np.float32)
    # (a few rows: trees.c's kernel and decisions sum in their own order, BLAS's in its)
    return Case("svm_classifier", "SVMClassifier", [x], attrs, domain=ML, version=1,
                exact=False, rtol=1e-5, atol=1e-6)  # fmt: skip


def gen_lookup(rng) -> Case:
    x = _bytes(rng, _pick(rng, BYTES), tuple(int(rng.integers(0, 40)) for _ in range(2)))
    table = rng.standard_normal(256).astype(
        _pick(rng, [np.float32, np.uint8, np.int16, np.float64])
    )
    return Case("lookup", "TableLookup", [laid_out(rng, x), table], domain=ONYX, version=1)


def gen_channel_lookup(rng) -> Case:
    """ChannelTableLookup as LookupTableFusion writes it: offsets c * 256 (+128 for int8)
    along one axis of x."""
    dtype = _pick(rng, BYTES)
    shape = tuple(int(rng.integers(1, 9)) for _ in range(int(rng.integers(1, 5))))
    axis = int(rng.integers(0, len(shape)))
    size = shape[axis]
    x = _bytes(rng, dtype, shape)
    table = rng.standard_normal(size * 256).astype(_pick(rng, [np.float32, np.uint8, np.int64]))
    start = 128 if np.dtype(dtype) == np.int8 else 0
    offsets = (np.arange(size, dtype=np.int32) * 256 + start).reshape(
        [size] + [1] * (len(shape) - 1 - axis)
    )
    return Case("channel_lookup", "ChannelTableLookup",
                [laid_out(rng, x), laid_out(rng, table, True), laid_out(rng, offsets, True)],
                domain=ONYX, version=1)  # fmt: skip


def gen_quantize(rng) -> Case:
    op = _pick(rng, ["QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"])
    shape = tuple(int(_pick(rng, [0, 1, 3, 64, 257])) for _ in range(int(rng.integers(1, 4))))
    scale = np.float32(rng.uniform(0.001, 0.5))
    if op == "DequantizeLinear":
        byte = _pick(rng, BYTES)
        return Case("quantize", op, [laid_out(rng, _bytes(rng, byte, shape)), scale,
                                     np.asarray(_bytes(rng, byte, ()))], version=13)  # fmt: skip
    x = _normal(rng, shape, 20.0)
    if rng.integers(3) == 0 and x.size:
        x.reshape(-1)[::3] = [np.inf, -np.inf, 0.5][rng.integers(3)]
    if op == "DynamicQuantizeLinear":
        return Case("quantize", op, [laid_out(rng, x)], version=11)
    byte = _pick(rng, BYTES)
    return Case("quantize", op, [laid_out(rng, x), scale, np.asarray(_bytes(rng, byte, ()))],
                version=13)  # fmt: skip


def gen_elementwise(rng) -> Case:
    op, domain, version = _pick(rng, [("HardSwish", "", 14), ("HardSigmoid", "", 6),
                                      ("Erf", "", 13), ("Gelu", "", 20), ("Gelu", MS, 1)])  # fmt: skip
    size = int(_pick(rng, [1024, 1500, 4099, 70000]))
    x = _normal(rng, (size,), 4.0).reshape(_pick(rng, [(-1,), (1, -1)]))
    x.reshape(-1)[::97] = _pick(rng, [np.nan, np.inf, -np.inf, 0.0, -0.0])
    attrs = {"alpha": float(rng.uniform(0, 1)), "beta": float(rng.uniform(0, 1))} \
        if op == "HardSigmoid" else {}  # fmt: skip
    return Case("elementwise", op, [laid_out(rng, x)], attrs, domain=domain, version=version)


def gen_qlinear_binary(rng) -> Case:
    op = _pick(rng, ["QLinearAdd", "QLinearMul"])
    byte = _pick(rng, BYTES)
    a_shape = tuple(int(_pick(rng, [1, 2, 3, 16, 65])) for _ in range(int(rng.integers(1, 4))))
    b_shape = _pick(rng, [a_shape, a_shape[-1:], (1,), tuple(1 if rng.integers(2) else d
                                                           for d in a_shape)])  # fmt: skip
    if rng.integers(2):
        a_shape, b_shape = b_shape, a_shape
    q = lambda: np.asarray(_bytes(rng, byte, ()))  # noqa: E731
    s = lambda: np.float32(rng.uniform(0.01, 0.2))  # noqa: E731
    inputs = [laid_out(rng, _bytes(rng, byte, a_shape)), s(), q(),
              laid_out(rng, _bytes(rng, byte, b_shape)), s(), q(), s(), q()]  # fmt: skip
    return Case("qlinear_binary", op, [np.asarray(v) for v in inputs], domain=MS, version=1)


def gen_small_conv(rng) -> Case:
    """A FusedConv the small kernel takes (small_cnn.c): unit stride, left + right pads that
    keep the width, any top / bottom pads and dilation, a small image, a residual or not."""
    kh, kw = int(_pick(rng, [1, 3, 3, 5, 7])), int(_pick(rng, [1, 3, 3, 5]))
    dh, dw = int(_pick(rng, [1, 1, 2])), int(_pick(rng, [1, 1, 3]))
    H, W = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    left = int(rng.integers(0, (kw - 1) * dw + 1))
    top, bottom = int(rng.integers(0, 4)), int(rng.integers(0, 4))
    if H + top + bottom < (kh - 1) * dh + 1:
        top = bottom = (kh - 1) * dh
    C, M = int(_pick(rng, [1, 3, 8, 16, 33])), int(_pick(rng, [1, 7, 8, 16, 40]))
    attrs = dict(kernel_shape=[kh, kw], dilations=[dh, dw],
                 pads=[top, left, bottom, (kw - 1) * dw - left])  # fmt: skip
    attrs["activation"] = _pick(rng, ["Relu", "LeakyRelu", "Sigmoid", ""])
    if attrs["activation"] == "LeakyRelu":
        attrs["activation_params"] = [0.1]
    x = _normal(rng, (int(_pick(rng, [1, 1, 2])), C, H, W))
    w, b = _normal(rng, (M, C, kh, kw), 0.5), _normal(rng, (M,))
    inputs = [laid_out(rng, x), laid_out(rng, w, True), laid_out(rng, b, True)]
    case = Case("small_conv", "FusedConv", inputs, attrs, domain=MS, version=1, exact=False,
                rtol=1e-4, atol=1e-5 * max(1, C * kh * kw))  # fmt: skip
    if rng.integers(2):  # the residual Z, of the output's shape
        case.inputs.append(laid_out(rng, _normal(rng, _call(case).shape)))
    return case


def gen_small_upsampling(rng) -> Case:
    """A 2x2 stride-2 ConvTranspose (small_cnn.c where the width is a multiple of 8), or a
    2x2 stride-2 MaxPool (NaNs in some)."""
    N, C = int(_pick(rng, [1, 2])), int(_pick(rng, [1, 5, 16, 32]))
    H, W = int(rng.integers(1, 20)), int(_pick(rng, [8, 16, 24, 3, 9]))
    if rng.integers(2):
        x = _normal(rng, (N, C, max(H, 2), max(W, 2)))
        if rng.integers(4) == 0:
            x.reshape(-1)[::7] = np.nan
        attrs = dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=int(rng.integers(2)))
        return Case("small_upsampling", "MaxPool", [laid_out(rng, x)], attrs, version=12)
    M = int(_pick(rng, [1, 3, 8, 16]))
    x, w = _normal(rng, (N, C, H, W)), _normal(rng, (C, M, 2, 2), 0.5)
    b = _normal(rng, (M,)) if rng.integers(2) else None
    inputs = [laid_out(rng, x), laid_out(rng, w, True), laid_out(rng, b, True)]
    return Case("small_upsampling", "ConvTranspose", inputs,
                dict(kernel_shape=[2, 2], strides=[2, 2]), exact=False, rtol=1e-4, atol=1e-4)  # fmt: skip


FAMILIES = {
    "conv": gen_conv,
    "fused_conv": gen_fused_conv,
    "nhwc_conv": gen_nhwc_conv,
    "conv1d": gen_conv1d,
    "qlinear_conv": gen_qlinear_conv,
    "conv_integer": gen_conv_integer,
    "matmul_integer": gen_matmul_integer,
    "qlinear_matmul": gen_qlinear_matmul,
    "dynamic_matmul": gen_dynamic_matmul,
    "qgemm": gen_qgemm,
    "gemm": gen_gemm,
    "matmul_nbits": gen_matmul_nbits,
    "gqa": gen_gqa,
    "rms": gen_rms,
    "attention": gen_attention,
    "matmul_f32": gen_matmul_f32,
    "pool": gen_pool,
    "global_pool": gen_global_pool,
    "qlinear_global_pool": gen_qlinear_global_pool,
    "resize": gen_resize,
    "rnn": gen_rnn,
    "rows": gen_rows,
    "trees": gen_trees,
    "tree_classifier": gen_tree_classifier,
    "linear_classifier": gen_linear_classifier,
    "svm_classifier": gen_svm_classifier,
    "lookup": gen_lookup,
    "channel_lookup": gen_channel_lookup,
    "quantize": gen_quantize,
    "elementwise": gen_elementwise,
    "qlinear_binary": gen_qlinear_binary,
    "small_conv": gen_small_conv,
    "small_upsampling": gen_small_upsampling,
}


# ----------------------------------------------------------------------------- running


def _call(case: Case):
    kernel = lookup(case.op, case.domain, case.version)
    args = list(case.inputs)
    while args and args[-1] is None:
        args.pop()
    if kernel.takes_ctx:
        ctx = SimpleNamespace(n_outputs=1, outputs_wanted=(True,), opset=case.version,
                              node_name="n", op_type=case.op)  # fmt: skip
        return kernel.fn(ctx, *args, **case.attrs)
    if case.bound:  # (as a plan calls a prepared kernel: bound to every attribute once)
        params = inspect.signature(kernel.fn).parameters.values()
        attrs = {p.name: p.default for p in params
                 if p.kind is p.KEYWORD_ONLY and p.default is not p.empty}  # fmt: skip
        return kernel.fn.prepare({**attrs, **case.attrs})(*args)
    return kernel.fn(*args, **case.attrs)


def _outputs(result) -> list:
    """The kernel's outputs as arrays (an optional output not asked for, None, left out)."""
    results = result if isinstance(result, tuple) else (result,)
    return [np.asarray(r) for r in results if r is not None]


def compare(case: Case, got: list, want: list) -> str | None:
    """None where got (native) agrees with want (numpy), else what differs."""
    if len(got) != len(want):
        return f"{len(got)} outputs, numpy {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i}: {g.dtype}{list(g.shape)}, numpy {w.dtype}{list(w.shape)}"
        if case.exact:
            if g.tobytes() != w.tobytes() and not np.array_equal(g, w, equal_nan=True):
                bad = np.flatnonzero((g != w) & ~(np.isnan(g) & np.isnan(w))
                                     if g.dtype.kind == "f" else g != w)  # fmt: skip
                return f"output {i}: {bad.size} values differ (bits promised), first at {bad[:3]}"
        elif not np.allclose(g, w, rtol=case.rtol, atol=case.atol, equal_nan=True):
            err = np.nanmax(np.abs(g.astype(np.float64) - w))
            return f"output {i}: max difference {err:.3g} (rtol {case.rtol}, atol {case.atol})"
    return None


class NativeCalls:
    """Counts the native library's calls (its pool jobs, recurrences and one-call convs)."""

    def __init__(self):
        self.count = 0

    def __enter__(self):
        lib = native.library()
        self.saved = {}
        for name in ("onyx_parallel", "lstm", "gru", "onyx_implicit_conv", "onyx_dynamic_matmul",
                     "onyx_svm_coupling", "onyx_svm_coupling_pairs", "onyx_forest_scores",
                     "lookup_direct", "onyx_lookup8_channels",
                     "onyx_quantize_range", "onyx_dequantize_range", "onyx_conv1d_f32",
                     "onyx_svm_classify", "onyx_forest_classify", "onyx_linear_classify",
                     "onyx_small_conv_f32", "onyx_max2x2_f32"):  # fmt: skip
            fn = getattr(lib, name, None) if lib is not None else None
            if fn:
                self.saved[name] = fn
                setattr(lib, name, self._counting(fn))
        return self

    def _counting(self, fn):
        def call(*args):
            self.count += 1
            return fn(*args)

        return call

    def __exit__(self, *exc):
        lib = native.library()
        for name, fn in self.saved.items():
            setattr(lib, name, fn)


def run_case(case: Case) -> tuple[str | None, bool]:
    """(what differs or None, whether the native library ran) for one case."""
    with np.errstate(all="ignore"):  # (NaN and inf inputs on purpose)
        return _run_case(case)


def _run_case(case: Case) -> tuple[str | None, bool]:
    inputs = case.inputs
    with NativeCalls() as calls:
        try:
            got = _outputs(_call(case))
        except Exception as e:  # the numpy kernel must then refuse it the same way
            got = e
    case.inputs = [None if a is None else np.array(a) for a in inputs]  # (fresh constants)
    with native.disabled():
        try:
            want = _outputs(_call(case))
        except Exception as e:
            want = e
    case.inputs = inputs
    if isinstance(got, Exception) or isinstance(want, Exception):
        if type(got) is type(want):
            return None, calls.count > 0
        return f"native: {got!r}; numpy: {want!r}", calls.count > 0
    return compare(case, got, want), calls.count > 0


def generate(seed: int, count: int, families=None):
    """count seeded cases, the families taken in turn."""
    names = list(families or FAMILIES)
    for i in range(count):
        family = names[i % len(names)]
        rng = np.random.default_rng([seed, i])
        yield i, FAMILIES[family](rng)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES))
    args = parser.parse_args(argv)
    if not native.available():
        print(f"native library not loaded ({native.status()}): nothing to compare")
        return 1
    start = time.perf_counter()
    ran, failures, errors = Counter(), [], 0
    totals = Counter()
    for i, case in generate(args.seed, args.cases, args.family):
        totals[case.family] += 1
        try:
            problem, native_ran = run_case(case)
        except Exception:
            errors += 1
            failures.append((i, case.describe(), traceback.format_exc(limit=3)))
            continue
        ran[case.family] += native_ran
        if problem:
            failures.append((i, case.describe(), problem))
    took = time.perf_counter() - start
    print(
        f"{args.cases} cases (seed {args.seed}) in {took:.1f} s; native status: {native.status()}"
    )
    for family in sorted(totals):
        print(f"  {family:22s} {totals[family]:6d} cases, native ran in {ran[family]}")
    print(f"{len(failures)} mismatches ({errors} of them errors)")
    for i, what, problem in failures[:50]:
        print(f"- case {i}: {what}\n    {problem}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
