"""onyx's optional native kernels, one C library (onyx/runtime/native/*.c, on pool.c's
threads) loaded with ctypes.

setup.py compiles it into ``_kernels`` (an optional extension: the install goes on without it
where there is no C compiler). onyx works the same without it, only slower: every caller keeps
its numpy path and asks whether the native one applies first (``int8_gemm_ok``,
``conv_f32_ok``, ``bilinear_ok``, ``recurrence_ok``, ...). :func:`status` says which.

Each family of kernels is one C file and one Python module of the same name: gemm_i8 (the
exact int8 GEMM, AVX512-VNNI), depthwise (plane convs), conv_f32 (the float conv), conv1d
(the direct 1-D float conv), gemv, nbits (MatMulNBits), attention (GroupQueryAttention's step, RMS norms), gemm_f32 (the float
GEMM against a packed constant B), resize, rnn, elementwise, rows (global average pooling,
softmax), norms (layer, instance, group and batch normalization), window (pooling), trees,
small_cnn (a direct conv of small images, a 2x2 upsampling and max pool: batch-1 serving CNNs),
winograd (3x3 unit-stride float convs by Winograd F(2x2, 3x3)), turn (a thread's wait for
concurrency.py's turn, without the GIL).
Their task structs are declared once in abi.h and checked against the ctypes copies at load
(_core.py), and a library of another ONYX_ABI_VERSION (abi.h; raised with _core.ABI_VERSION
when an entry point's arguments change) stays off.

Adding a kernel to a family: its task struct in abi.h (listed in ONYX_STRUCTS), its C code
and ``onyx_<name>_range`` in the family's C file, checking its sizes first (checks.h); in the
family's module a ctypes copy of the struct under ``@abi("<struct>")``, the wrapper (None or
False where the kernel does not apply, so that the caller's numpy path runs; InvalidArgument,
never ``assert``, for arguments the kernel would read past) and its entry point in ``bind``; a case generator in scripts/native_differential.py. A new family also adds
its C file to setup.py, its module to FAMILY_NAMES and its public names to _EXPORTS, and
ends with ``core.join(__name__, bind)`` (tests/test_native_abi.py checks all three).

Environment:
- ``ONYX_NATIVE=0`` turns the library off (the tests run both ways).
- ``ONYX_NATIVE_ISA=avx2`` (or ``portable``) turns off the hand-written AVX-512 kernels, so
  that the portable ones run (CI runs the kernel tests that way too); the default ``avx512``
  uses whatever the CPU has.
"""

from __future__ import annotations

import contextlib
import importlib

from . import _core
from ._core import (
    BYTES,
    CONV_ACTIVATIONS,
    GEMV_ROWS,
    SMALL_CONV_K,
    THREAD_SETTING,
    activation_params,
    thread_setting,
    threads,
    under_setting,
    under_setting_contiguous,
    under_setting_flat,
    winograd_applies,
)

#: Each family module's public names (or ``(name, its name in the module)``): the module is
#: imported, its structs checked and its entry points bound, when one of them is first asked for
#: (a model needs a few families: importing all of them was a good part of a cold start).
_EXPORTS = {
    "attention": (
        "gqa_ok",
        "gqa_step",
        "heads_attention",
        "packed_attention",
        "packed_attention_bound",
        "rms_norm_f32",
        "rotate_half_f32",
        "silu_f32",
    ),
    "conv1d": (
        "Conv1d",
        "MAGNITUDE",
        "PAIR_MAX",
        "conv1d_ok",
        "conv1d_then",
    ),
    "conv_f32": (
        "FloatConv",
        "conv_f32_ok",
        "pack_conv_f32",
    ),
    "convtranspose": (
        "FloatConvTranspose",
        "conv_transpose_ok",
    ),
    "depthwise": (
        "IntPlaneConv",
        "PlaneConv",
        "conv_small_f32",
        "conv_small_ok",
        "depthwise_activates",
        "depthwise_f32",
        "depthwise_ok",
        "depthwise_setup",
        "stem_pool_setup",
        "stem_setup",
    ),
    "elementwise": (
        "bias_gelu_f32",
        "dequantize_8",
        "erf_f32",
        "hard_sigmoid_f32",
        "hard_sigmoid_mul_f32",
        "hardswish_f32",
        "lookup8",
        "lookup8_channels",
        "lookup8_channels_setup",
        "per_tensor_setup",
        "qlinear_binary",
        "qlinear_binary_setup",
        "quantize_f32",
    ),
    "gemm_f32": (
        "SGEMM_ROWS",
        "PackedGemm",
        "sgemm_ok",
    ),
    "gemm_i8": (
        "MAX_K",
        "PANEL",
        "DynamicMatMul",
        "NhwcDepthwise",
        "Packed",
        "batched_int8_gemm",
        "contiguous_bytes",
        "dynamic_quantize",
        "gathered_int8_gemm",
        "implicit_conv",
        "int8_gemm",
        "int8_gemm_ok",
        "int8_gemm_setup",
        "pack",
        "row_sums",
        "to_nhwc",
        "transpose_bytes",
        "transpose_words",
    ),
    "gemv": (
        "FloatGemv",
        "gemv_ok",
    ),
    "nbits": (
        "NBITS_INT8_ROWS",
        "NBitsProduct",
        "nbits_ok",
        "nbits_product",
    ),
    "resize": (
        "bilinear_f32",
        "bilinear_ok",
        "bound_bilinear_f32",
        "bound_repeat2d_4byte",
        "repeat2d_4byte",
    ),
    "rnn": (
        "GruRecurrence",
        "LstmRecurrence",
        "gru_f32",
        "lstm_f32",
        "recurrence_ok",
        ("RecurrenceInputs", "Inputs"),
        ("RecurrenceRows", "Rows"),
    ),
    "norms": (
        "batch_norm_bound",
        "batch_norm_f32",
        "layer_norm_bound",
        "layer_norm_f32",
        "norm_rows_bound",
        "norm_rows_f32",
        "skip_layer_norm_bound",
        "skip_layer_norm_f32",
    ),
    "rows": ("mean_rows_f32", "qmean_columns", "qmean_rows", "softmax_rows_f32"),
    "nhwc_chain": ("ChainProgram",),
    "small_cnn": (
        "CV_PANEL",
        "MAX_CHANNELS",
        "MAX_PIXELS",
        "MaxPool2x2",
        "SmallConv",
        "pack_small_conv",
        "small_conv_applies",
        "small_conv_ok",
    ),
    "trees": (
        "ForestSums",
        "argmax_rows",
        "bins_one_hot",
        "coupling_pairs",
        "forest_descend",
        "forest_sum",
        "forest_sums",
        "linear_classify",
        "normalize_rows",
        "sorted_position",
        "svm_classify",
        "svm_coupling",
    ),
    "turn": ("turn_functions", "turn_pass"),
    "window": ("bound_pool2d", "pool2d_f32", "max_pool2d_8bit"),
    "winograd": (
        "WinogradConv",
        "pack_winograd",
        "winograd_ok",
    ),
}
#: Public name -> (family module, its name there).
_ORIGIN = {
    (entry if isinstance(entry, str) else entry[0]): (
        family,
        entry if isinstance(entry, str) else entry[1],
    )
    for family, entries in _EXPORTS.items()
    for entry in entries
}


def __getattr__(name: str):
    if name == "FAMILIES":
        return tuple(_family(f) for f in FAMILY_NAMES)
    if name in FAMILY_NAMES:
        return _family(name)
    origin = _ORIGIN.get(name)
    if origin is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_family(origin[0]), origin[1])
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_ORIGIN) | set(FAMILY_NAMES))


def _family(name: str):
    """A family module, imported (its last line binds it to the library: _core.join). The
    import lock makes a second thread asking for it meanwhile wait until it has joined."""
    return importlib.import_module(f"{__name__}.{name}")


__all__ = [
    "BYTES",
    "CONV_ACTIVATIONS",
    "GEMV_ROWS",
    "SMALL_CONV_K",
    "THREAD_SETTING",
    "activation_params",
    "available",
    "avx512",
    "disabled",
    "library",
    "load_status",
    "status",
    "thread_setting",
    "under_setting",
    "under_setting_contiguous",
    "under_setting_flat",
    "threads",
    "winograd_applies",
    *_ORIGIN,  # (the families' names: imported when first asked for)
]

#: The kernel families (one C file and one Python module each), in the order they bind.
FAMILY_NAMES = (
    "gemm_i8",
    "depthwise",
    "conv_f32",
    "conv1d",
    "convtranspose",
    "gemv",
    "resize",
    "rnn",
    "elementwise",
    "rows",
    "norms",
    "window",
    "trees",
    "nbits",
    "attention",
    "gemm_f32",
    "nhwc",
    "small_cnn",
    "winograd",
    "turn",
    "nhwc_chain",
)
_core.start(())  # (the library: loaded at once; each family binds when it is imported)


def available() -> bool:
    """Whether the native library is loaded (any of its kernels)."""
    return _core.lib is not None


def avx512() -> bool:
    """Whether the library is loaded with its AVX-512 kernels (ONYX_NATIVE_ISA allowing them),
    without importing a family: for choices that only steer where work runs, made at a
    session's creation (a kernel asks its own family's ``*_ok``, which also says whether that
    family is bound)."""
    return _core.lib is not None and bool(_core.isa & _core.ISA_AVX512)


def status() -> str:
    """Whether the native library is in use, which instruction sets its kernels use, and why
    not where it is not (every family checked: imported, if it was not yet)."""
    for name in FAMILY_NAMES:
        _family(name)
    return load_status()


def load_status() -> str:
    """status() of the families imported so far (imports none: the model cache's key)."""
    if _core.lib is None and _core.why.startswith("loaded"):
        return "disabled"
    off = "".join(  # (a copy: a family may join in another thread meanwhile)
        f"; {name.rsplit('.', 1)[-1]} off: {why}" for name, why in [*_core.families_off.items()]
    )
    return _core.why + off


def library():
    """The loaded library (ctypes.CDLL), or None: for tests that count its calls. Every
    family is bound first: a wrapper put on an entry point before its family binds it would
    hide the argument types binding sets (ctypes would then pass pointers as C ints)."""
    for name in FAMILY_NAMES:
        _family(name)
    return _core.lib


@contextlib.contextmanager
def disabled():
    """Inside the block every kernel takes its numpy path, as with ONYX_NATIVE=0 (the
    differential tests compare the two in one process). Not thread-safe: for tests."""
    saved, before = (_core.lib, _core.vnni), set(_core.joined)
    _core.lib, _core.vnni = None, False
    try:
        yield
    finally:
        _core.lib, _core.vnni = saved
        # (a family first imported inside the block joined an absent library: it binds now,
        # or its first native call after the block would find its entry points unbound)
        for name in [n for n in _core.joined if n not in before]:
            _core.join(name, _core.joined[name])
