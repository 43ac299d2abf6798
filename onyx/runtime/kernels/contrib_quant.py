"""Block-quantized weights of onnxruntime's LLM tooling: MatMulNBits and GatherBlockQuantized.

MatMulNBits keeps its weight packed (2, 4 or 8 bits per value, blocks along K). Each call
dequantizes one panel of output columns at a time into a reused scratch buffer and multiplies
it by A there, so memory holds the packed weight plus one panel, never the whole weight in
float32 (which would be 8x an int4 file). The per-session work (scales as float32, zero points
unpacked, the byte -> values table) is done once through ``derived``.

Dequantization is ``(q - zero_point) * scale`` in float32, one rounding per weight as in
onnxruntime's kernels, so the dequantized weights agree bit for bit; the products differ only
in summation order.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from .. import native
from ..registry import ONYX_DOMAIN, op
from .activation import sigmoid, sigmoid_into
from .derived import derived, frozen, scratch
from .elementwise import upcast
from .mapped import release

MS = "com.microsoft"
#: float32 values of one dequantized panel (1 MiB): large enough for BLAS to run at speed,
#: small enough to stay in L2 beside A's rows.
PANEL_VALUES = 1 << 18


def unpack_bits(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint8 bytes holding 8 // bits values each, lowest bits first -> one uint8 per value
    (the last axis grows by 8 // bits)."""
    if bits == 8:
        return packed
    per = 8 // bits
    mask = np.uint8((1 << bits) - 1)
    out = np.empty(packed.shape + (per,), np.uint8)
    for i in range(per):
        np.bitwise_and(np.right_shift(packed, np.uint8(i * bits)), mask, out=out[..., i])
    return out.reshape(packed.shape[:-1] + (packed.shape[-1] * per,))


def _byte_table(bits: int) -> np.ndarray:
    """[256, 8 // bits] float32: the values packed in each byte, lowest bits first."""
    return frozen(unpack_bits(np.arange(256, dtype=np.uint8)[:, None], bits).astype(np.float32))


@dataclass(frozen=True)
class NBitsWeight:
    """A MatMulNBits weight ready for panels: bytes [N, k_blocks * blob], float32 scales and
    zero points [N, k_blocks] (zero points None: the default), and the block of each k."""

    packed: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray | None
    default_zero: float
    table: np.ndarray | None
    block_of_k: np.ndarray | None  # g_idx when it is not k // block_size
    native: native.NBitsProduct | None = None  # nbits.c's set-up (None: numpy only)


def _nbits_weight(B, scales, zero_points, g_idx, *, N, K, bits, block_size) -> NBitsWeight:
    k_blocks = (K + block_size - 1) // block_size
    blob = block_size * bits // 8
    packed = np.ascontiguousarray(B).reshape(N, k_blocks * blob)
    s = upcast(np.asarray(scales)).astype(np.float32, copy=False).reshape(N, k_blocks)
    zp = None
    if zero_points is not None:
        zero_points = np.asarray(zero_points)
        if zero_points.dtype == np.uint8:  # packed like B, ceil(k_blocks * bits / 8) per row
            zp = unpack_bits(zero_points.reshape(N, -1), bits)[:, :k_blocks]
        zp = upcast(zp if zp is not None else zero_points).astype(np.float32).reshape(N, k_blocks)
    block_of_k = None
    if g_idx is not None:
        g = np.asarray(g_idx).astype(np.int64).reshape(-1)[:K]
        if not np.array_equal(g, np.arange(K) // block_size):
            block_of_k = g
            if zero_points is not None and zero_points.dtype == np.uint8:
                zp = None  # onnxruntime's CPU kernel reads no packed zero points with g_idx
    table = _byte_table(bits) if bits in (2, 4) else None
    zero = float(1 << (bits - 1))
    fast = None
    if block_of_k is None:
        fast = native.nbits_product(packed, s, zp, zero, K=K, bits=bits, block=block_size)
    return NBitsWeight(packed, s, zp, zero, table, block_of_k, fast)


def _raw_panel(w: NBitsWeight, n0: int, n1: int, bits: int, block_size: int) -> np.ndarray:
    """Rows n0:n1 of the quantized values q as float32 [n, k_blocks * block_size] (scratch)."""
    rows = w.packed[n0:n1]
    out = scratch((n1 - n0, w.scales.shape[1] * block_size), np.float32)
    if w.table is not None:
        # (mode "clip": numpy buffers a checked take; a byte cannot be out of the table)
        np.take(w.table, rows, axis=0, out=out.reshape(rows.shape + (8 // bits,)), mode="clip")
    elif bits == 8:
        np.copyto(out, rows, casting="unsafe")
    else:
        np.copyto(out, unpack_bits(rows, bits), casting="unsafe")
    return out


def _dequantized_panel(w: NBitsWeight, n0: int, n1: int, bits: int, block_size: int):
    """Rows n0:n1 of the float32 weight [n, k_blocks * block_size] in the scratch buffer."""
    n, k_blocks = n1 - n0, w.scales.shape[1]
    if w.native is not None:
        out = scratch((n, k_blocks * block_size), np.float32)
        if w.native.dequantize(n0, n1, out):
            return out
    out = _raw_panel(w, n0, n1, bits, block_size)
    if w.block_of_k is None:
        blocks = out.reshape(n, k_blocks, block_size)
        if w.zero_points is None:
            blocks -= np.float32(w.default_zero)
        else:
            blocks -= w.zero_points[n0:n1, :, None]
        blocks *= w.scales[n0:n1, :, None]
    else:  # act-order: each k reads the block g_idx[k]
        cols = out[:, : w.block_of_k.size]
        if w.zero_points is None:
            cols -= np.float32(w.default_zero)
        else:
            cols -= w.zero_points[n0:n1][:, w.block_of_k]
        cols *= w.scales[n0:n1][:, w.block_of_k]
    return out


def _constant(p) -> bool:
    return p is None or (type(p) is np.ndarray and not p.flags.writeable)


def _float_product(a2: np.ndarray, w: NBitsWeight, y2: np.ndarray, bits: int, block: int) -> None:
    """y2 = a2 @ W^T, W dequantized a panel of output columns at a time."""
    k = a2.shape[1]
    rows = max(1, min(y2.shape[1], PANEL_VALUES // (w.scales.shape[1] * block)))
    for n0 in range(0, y2.shape[1], rows):
        n1 = min(y2.shape[1], n0 + rows)
        panel = _dequantized_panel(w, n0, n1, bits, block)[:, :k]
        y2[:, n0:n1] = np.matmul(a2, panel.T)


#: rows of A up to which accuracy level 4 sums each block's integer products exactly, as
#: onnxruntime does (decoding: one row); more rows (a prompt) take one GEMM per panel, where
#: a batch of per-block products would cost 10-20x
EXACT_INT8_ROWS = 16


def _int8_quantized(a2: np.ndarray, k_blocks: int, block: int):
    """A's blocks quantized to int8 as onnxruntime does for accuracy level 4: the integer
    values [m, k_blocks, block] (as float32) and their scales [m, k_blocks, 1]."""
    m, k = a2.shape
    padded = np.zeros((m, k_blocks * block), np.float32)
    padded[:, :k] = a2
    a_blocks = padded.reshape(m, k_blocks, block)
    top = np.max(np.abs(a_blocks), axis=-1, keepdims=True)
    # (127 / max, not 1 / scale: the two round differently, and onnxruntime divides so)
    inverse = np.divide(np.float32(127), top, out=np.zeros_like(top), where=top != 0)
    a_blocks *= inverse
    np.rint(a_blocks, out=a_blocks)
    return a_blocks, top / np.float32(127)


def _int8_product(a2: np.ndarray, w: NBitsWeight, y2: np.ndarray, bits: int, block: int) -> None:
    """accuracy_level 4: each block of A's rows quantized to int8 (scale = max |a| / 127),
    times the weight's integers q - zero_point; each block's sum scaled by a_scale * w_scale
    and the blocks added in order, as onnxruntime computes it (the integer sums stay below
    2^24: exact in float32). Many rows: the int8 values times their scales meet the float
    weight in one GEMM instead (the same terms summed in another order, 1e-7 apart)."""
    m, k = a2.shape
    k_blocks = w.scales.shape[1]
    if w.native is not None and w.native.int8(a2, y2):
        return  # (the same arithmetic in C, bit for bit: nbits.c)
    qa, a_scale = _int8_quantized(a2, k_blocks, block)
    if m > EXACT_INT8_ROWS:
        qa *= a_scale
        _float_product(qa.reshape(m, -1)[:, :k], w, y2, bits, block)
        return
    qa_t = np.ascontiguousarray(qa.transpose(1, 0, 2))  # [k_blocks, m, block]
    a_scale_t = a_scale[..., 0].T[:, :, None]  # [k_blocks, m, 1]
    # sum(qa * (q - zp)) = sum(qa * q) - zp * sum(qa): exact integers either way, and the
    # weight's values need no pass to subtract their zero points
    qa_sums = np.add.reduce(qa_t, axis=2)[:, :, None]  # [k_blocks, m, 1]
    rows = max(1, min(y2.shape[1], PANEL_VALUES // (k_blocks * block)))
    for n0 in range(0, y2.shape[1], rows):
        n1 = min(y2.shape[1], n0 + rows)
        q = _raw_panel(w, n0, n1, bits, block)
        sums = np.matmul(qa_t, q.reshape(n1 - n0, k_blocks, block).transpose(1, 2, 0))
        zp = (
            np.float32(w.default_zero)
            if w.zero_points is None
            else w.zero_points[n0:n1].T[:, None, :]
        )
        sums -= qa_sums * zp
        sums *= a_scale_t * w.scales[n0:n1].T[:, None, :]
        y2[:, n0:n1] = np.add.reduce(sums, axis=0)  # (block after block, as onnxruntime adds)


def _native_int8(A, B, scales, *, K, N, bits, block_size) -> np.ndarray | None:
    """The decoding step's usual MatMulNBits (float32 A, constant 4 / 8-bit weight without zero
    points, accuracy level 4) straight to nbits.c, or None (the general path runs): the same
    set-up (derived) and kernel as the general path, fewer Python steps per call."""
    if type(A) is not np.ndarray or A.dtype != np.float32 or not A.size or bits not in (4, 8):
        return None
    if type(scales) is not np.ndarray or scales.flags.writeable or not B.size:
        return None  # (B itself: derived computes anew for a writeable one, cached by nothing)
    w = _FAST.get(id(B))
    if w is None or w[0]() is not B or w[1] is not scales or w[2] != (N, K, bits, block_size):
        w = _fast_weight(B, scales, N, K, bits, block_size)
        if w is None:
            return None
    y = np.empty(A.shape[:-1] + (N,), np.float32)
    return y if w[3].int8(A.reshape(-1, K), y.reshape(-1, N)) else None


#: id(B) -> (weakref to B, scales, (N, K, bits, block), nbits.c's product): the decoding
#: step's lookup of its weight (derived's entry, found without building its key per call).
_FAST: dict[int, tuple] = {}


def _fast_weight(B, scales, N, K, bits, block_size):
    if type(B) is not np.ndarray or B.flags.writeable:
        return None
    key = ("nbits", N, K, bits, block_size, id(scales), id(None), id(None))
    w = derived(
        B,
        key,
        lambda: _nbits_weight(B, scales, None, None, N=N, K=K, bits=bits, block_size=block_size),
    )
    if w.native is None:
        return None
    b_id = id(B)
    entry = (weakref.ref(B, lambda _ref: _FAST.pop(b_id, None)), scales, (N, K, bits, block_size),
             w.native)  # fmt: skip
    _FAST[b_id] = entry
    return entry


@op("MatMulNBits", since=1, domain=MS, threads="blas")
def matmul_nbits(
    A,
    B,
    scales,
    zero_points=None,
    g_idx=None,
    bias=None,
    *,
    K,
    N,
    block_size,
    bits=4,
    accuracy_level=0,
    weight_prepacked=0,
):
    """Y = A @ dequantize(B)^T (+ bias): B [N, k_blocks, blob] packs K values per row in
    blocks of block_size, lowest bits first; zero points default to 2^(bits - 1).

    ``accuracy_level`` 4 quantizes A's blocks to int8 as onnxruntime does (its results, not
    float32's); the other levels compute in float32."""
    if weight_prepacked:
        raise ValueError(
            "MatMulNBits: weight_prepacked (an execution provider's layout) is not supported"
        )
    if bits not in (2, 4, 8):
        raise ValueError(f"MatMulNBits: bits must be 2, 4 or 8, got {bits}")
    out_shape = A.shape[:-1] + (N,)
    if A.shape[-1] != K:
        raise ValueError(f"MatMulNBits: A's last dimension {A.shape[-1]} is not K={K}")
    if accuracy_level == 4 and zero_points is None and g_idx is None and bias is None:
        y = _native_int8(A, B, scales, K=K, N=N, bits=bits, block_size=block_size)
        if y is not None:
            return y
    y = np.zeros(out_shape, np.float32)
    if B.size and A.size:

        def make() -> NBitsWeight:
            return _nbits_weight(
                B, scales, zero_points, g_idx, N=N, K=K, bits=bits, block_size=block_size
            )

        # (cached with B only when its parameters are constants too: their ids then stay theirs)
        if all(_constant(p) for p in (scales, zero_points, g_idx)):
            key = ("nbits", N, K, bits, block_size, id(scales), id(zero_points), id(g_idx))
            w = derived(B, key, make)
        else:
            w = make()
        # (contiguous: BLAS sums a strided A in another order, and the result would depend on it)
        a2 = np.ascontiguousarray(upcast(A), np.float32).reshape(-1, K)
        y2 = y.reshape(-1, N)
        # (onnxruntime quantizes A only with integer zero points: float ones take its float path)
        integer_zero = zero_points is None or np.asarray(zero_points).dtype == np.uint8
        if accuracy_level == 4 and bits in (4, 8) and w.block_of_k is None and integer_zero:
            _int8_product(a2, w, y2, bits, block_size)
        else:
            _float_product(a2, w, y2, bits, block_size)
    if bias is not None:
        y += upcast(bias)
    return y.astype(A.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# GatherBlockQuantized


@op("GatherBlockQuantized", since=1, domain=MS)
def gather_block_quantized(
    data,
    indices,
    scales,
    zero_points=None,
    *,
    gather_axis=0,
    quantize_axis=1,
    block_size=128,
    bits=4,
):
    """Gather of a block-quantized table, dequantized: (data - zero_point) * scale.

    uint8 data packs 8 // bits values per byte along the last axis (lowest bits first), its
    zero points likewise, default 2^(bits - 1); int4 / uint4 data default to zero points of
    0; float8 / float4 data have no zero points. An index out of range gives zeros (as
    onnxruntime does), negative ones count from the end."""
    rank = data.ndim
    ga = gather_axis + rank if gather_axis < 0 else gather_axis
    qa = quantize_axis + rank if quantize_axis < 0 else quantize_axis
    packed = data.dtype == np.uint8 and bits < 8
    if packed and (ga != 0 or qa == ga):
        raise ValueError(
            "GatherBlockQuantized: packed uint8 data needs gather_axis 0 and quantize_axis != 0"
        )
    size = data.shape[ga]
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + size, idx)
    valid = (idx >= 0) & (idx < size)
    idx = np.where(valid, idx, 0)

    rows = np.take(data, idx, axis=ga)
    if packed:
        rows = unpack_bits(rows, bits)
    q = rows.astype(np.float32)
    n_index_dims = idx.ndim
    qa_out = qa if qa < ga else qa + n_index_dims - 1

    def per_value(p: np.ndarray) -> np.ndarray:
        """A per-block parameter (scales' shape) taken like the data and spread over its blocks."""
        if qa == ga:
            return np.take(p, idx // block_size, axis=ga)
        g = (
            np.take(p, idx, axis=ga)
            if p.shape[ga] != 1
            else np.expand_dims(np.take(p, 0, axis=ga), tuple(range(ga, ga + n_index_dims)))
        )
        if block_size:
            g = np.repeat(g, block_size, axis=qa_out)
        else:  # (float8: one block spans the whole axis)
            g = np.repeat(g, q.shape[qa_out], axis=qa_out)
        return np.take(g, np.arange(q.shape[qa_out]), axis=qa_out)

    if data.dtype.kind in "iu" or packed or data.dtype.name in ("int4", "uint4"):
        if zero_points is not None:
            zp = np.asarray(zero_points)
            zp = unpack_bits(zp, bits) if packed else zp
            q -= per_value(zp.astype(np.float32))
        elif data.dtype == np.uint8:
            q -= np.float32(1 << (bits - 1))
    q *= per_value(upcast(np.asarray(scales)).astype(np.float32))
    if not valid.all():
        shape = (1,) * ga + idx.shape + (1,) * (rank - ga - 1)
        q *= valid.reshape(shape)
    return q.astype(scales.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# GatedMatMulNBits (onyx's own: onyx/genai/fusions.py)


@op("GatedMatMulNBits", since=1, domain=ONYX_DOMAIN, threads="blas")
def gated_matmul_nbits(X, Bg, Sg, Bu, Su, *, K, N, block_size, bits=4, accuracy_level=0):
    """silu(MatMulNBits(X, Bg, Sg)) * MatMulNBits(X, Bu, Su): a gated MLP's gate and up
    projections and its activation in one node (one Python call per decoded token instead of
    five). The float ops are the unfused nodes' (Sigmoid's sigmoid_into, then the two Muls),
    so the values are theirs bit for bit."""
    both = _both_products(X, Bg, Sg, Bu, Su, K=K, N=N, bits=bits, block_size=block_size)
    if accuracy_level == 4 and both is not None:
        g, u = both[..., :N], both[..., N:]
    else:
        attrs = dict(K=K, N=N, block_size=block_size, bits=bits, accuracy_level=accuracy_level)
        g = matmul_nbits(X, Bg, Sg, **attrs)
        u = matmul_nbits(X, Bu, Su, **attrs)
    if g.dtype != np.float32:  # (Sigmoid and Mul of a low float: computed in float32, rounded)
        s = sigmoid(g)
        return np.multiply(np.multiply(g, s), u)
    with np.errstate(over="ignore"):
        s = sigmoid_into(g)
    np.multiply(g, s, s)
    return np.multiply(s, u, s)


def _both_products(X, Bg, Sg, Bu, Su, *, K, N, bits, block_size) -> np.ndarray | None:
    """[..., 2N]: the gate's and the up projection's accuracy-level-4 products in one call of
    nbits.c on the two weights stacked once (every output column is computed on its own, so
    the values are the two calls'), or None where the native kernel does not take them."""
    if type(X) is not np.ndarray or X.dtype != np.float32 or not X.size or bits not in (4, 8):
        return None
    if not all(_constant(p) and p is not None for p in (Bg, Sg, Bu, Su)):
        return None
    key = ("nbits gate up", N, K, bits, block_size, id(Sg), id(Bu), id(Su))
    w = derived(Bg, key, lambda: _stacked(Bg, Sg, Bu, Su, N, K, bits, block_size))
    if w.native is None:
        return None
    y = np.empty(X.shape[:-1] + (2 * N,), np.float32)
    return y if w.native.int8(X.reshape(-1, K), y.reshape(-1, 2 * N)) else None


def _stacked(Bg, Sg, Bu, Su, N, K, bits, block_size) -> NBitsWeight:
    """The weight of the gate's rows then the up projection's: the stacked copies replace the
    originals, whose file pages are unmapped again (mapped.release)."""
    B = np.concatenate([np.asarray(Bg).reshape(N, -1), np.asarray(Bu).reshape(N, -1)])
    scales = np.concatenate([np.asarray(Sg).reshape(-1), np.asarray(Su).reshape(-1)])
    for a in (Bg, Sg, Bu, Su):
        release(a)
    return _nbits_weight(B, scales, None, None, N=2 * N, K=K, bits=bits, block_size=block_size)
