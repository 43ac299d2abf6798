"""Every native path against its numpy kernel on seeded random geometries, degenerate ones
included (scripts/native_differential.py; its long run: --cases N). Shapes must agree, and
values bit for bit where the native path promises the numpy kernel's bits."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from onyx.runtime import native
from onyx.runtime.native import nhwc

_PATH = Path(__file__).resolve().parents[1] / "scripts" / "native_differential.py"
_spec = importlib.util.spec_from_file_location("native_differential", _PATH)
differential = importlib.util.module_from_spec(_spec)
sys.modules["native_differential"] = differential  # (its dataclasses look their module up)
_spec.loader.exec_module(differential)

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native: {native.status()}")

#: Cases per family in CI (a few seconds in all).
PER_FAMILY = 16

#: Families whose native path needs more than the library (AVX-512, VNNI): (whether it is
#: here). The others must reach the library in some case of the sample.
_NEEDS = {
    "conv": native.conv_f32_ok,
    "fused_conv": native.conv_f32_ok,
    "nhwc_conv": nhwc.available,
    "rnn": lambda: native.recurrence_ok(16, 1, 1),
    "resize": native.bilinear_ok,
    "gemm": native.gemv_ok,
    "matmul_f32": native.sgemm_ok,
    "matmul_nbits": native.nbits_ok,
    "conv_integer": lambda: native.int8_gemm_ok(1),
    "qlinear_conv": lambda: native.int8_gemm_ok(1),
    "matmul_integer": lambda: native.int8_gemm_ok(1),
    "qlinear_matmul": lambda: native.int8_gemm_ok(1),
    "dynamic_matmul": lambda: native.int8_gemm_ok(1),
    "qgemm": lambda: native.int8_gemm_ok(1),
    "small_conv": native.small_conv_ok,
    "small_upsampling": native.small_conv_ok,
}


@pytest.mark.parametrize("family", sorted(differential.FAMILIES))
def test_native_path_matches_the_numpy_kernel(family):
    problems, ran = [], 0
    for i, case in differential.generate(2026, PER_FAMILY, [family]):
        problem, native_ran = differential.run_case(case)
        ran += native_ran
        if problem:
            problems.append(f"case {i}: {case.describe()}: {problem}")
    assert not problems, "\n".join(problems)
    if _NEEDS.get(family, lambda: True)():
        assert ran, f"no {family} case reached the native library: the sample tests nothing"
