"""window.c's 3x3 stride-2 max pool from the plane's first row and column (two output rows a
pass; the last window may overhang the plane by a row and a column of padding, as with ceil
mode or end pads) against the numpy kernel and onnxruntime: widths that end inside a column
block or on it, an odd and an even output row count (the pairs and the last single row), a
plane of two or three rows, batches 1 to 3, and planes with NaN, -0.0 and infinities (see
test_native_pool_separable). With ONYX_NATIVE=0 both sides are the numpy kernel."""

from __future__ import annotations

import numpy as np
import pytest
from test_native_pool_narrow import _Ctx, _numpy
from test_native_pool_separable import _planes

from onyx.runtime.kernels import pool

_GEOMETRIES = [  # (N, H, W, pads, ceil_mode)
    (1, 111, 111, [0, 0, 0, 0], 0),  # SqueezeNet's first pool (55 x 55: odd rows)
    (2, 56, 56, [0, 0, 1, 1], 0),  # Inception v2's: a padding row and column at the end
    (3, 54, 33, [0, 0, 0, 0], 1),  # ceil mode: the last window overhangs both ways
    (1, 13, 200, [0, 0, 0, 0], 0),  # several column blocks, the last partial
    (2, 9, 65, [0, 0, 0, 0], 1),  # 2 OW + 1 = W + 1 (ceil mode), OW = 32 (whole blocks)
    (1, 3, 3, [0, 0, 0, 0], 0),  # one window
    (3, 2, 2, [0, 0, 0, 0], 1),  # one window, a row and a column of padding
    (1, 8, 31, [0, 0, 1, 1], 0),  # 4 rows: a pair, then singles (the last overhangs)
]


def _geometry(pads, ceil_mode) -> dict:
    return {"kernel_shape": [3, 3], "strides": [2, 2], "pads": pads, "ceil_mode": ceil_mode}


@pytest.mark.parametrize("geometry", _GEOMETRIES, ids=lambda g: "x".join(map(str, g[:3])))
def test_max_3x3_s2_matches_the_numpy_kernel(geometry, monkeypatch):
    N, H, W, pads, ceil_mode = geometry
    x = _planes(np.random.default_rng(H * W + N), (N, 3, H, W))
    geo = _geometry(pads, ceil_mode)
    got = pool.max_pool(_Ctx, x, **geo)
    want = _numpy(pool.max_pool, (_Ctx, x), geo, monkeypatch)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # (a tie of -0.0 and +0.0: either, by value)
    assert np.isnan(got).sum() == np.isnan(want).sum() > 0


@pytest.mark.parametrize("geometry", _GEOMETRIES[:5], ids=lambda g: "x".join(map(str, g[:3])))
def test_max_3x3_s2_matches_onnxruntime(geometry):
    ort = pytest.importorskip("onnxruntime")
    helper = pytest.importorskip("onnx.helper")
    import onyx

    N, H, W, pads, ceil_mode = geometry
    node = helper.make_node("MaxPool", ["x"], ["y"], **_geometry(pads, ceil_mode))
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", 1, [N, 4, H, W])],
        [helper.make_tensor_value_info("y", 1, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    data = model.SerializeToString()
    x = np.random.default_rng(W).standard_normal((N, 4, H, W)).astype(np.float32)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = onyx.InferenceSession(data).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])


_GUARDED = r"""
import ctypes, itertools, mmap, sys
import numpy as np
from onyx.runtime.kernels import pool
from onyx.runtime import native

libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PAGE = mmap.PAGESIZE


class _Ctx:
    n_outputs, outputs_wanted = 1, (True,)


def guarded(shape, at_end):
    # an array whose last byte ends a page (at_end) or whose first starts one, the page past
    # it (or before it) unreadable: a read outside the planes faults
    n = int(np.prod(shape)) * 4
    pages = (n + PAGE - 1) // PAGE + 2
    buf = mmap.mmap(-1, pages * PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    guard = base + (pages - 1) * PAGE if at_end else base
    assert libc.mprotect(guard, PAGE, 0) == 0
    start = (pages - 1) * PAGE - n if at_end else PAGE
    return np.frombuffer(buf, np.float32, n // 4, start).reshape(shape), buf


rng = np.random.default_rng(0)
sizes = [1, 2, 3, 4, 5, 6, 7, 8, 9]
widths = [1, 2, 3, 4, 5, 6, 7, 15, 16, 17, 31, 32, 33, 34, 35, 47, 48, 49, 63, 64, 65, 66]
for H, W, ceil, end, (N, C), at_end in itertools.product(
    sizes, widths, (0, 1), (0, 1, 2), ((1, 1), (2, 3)), (True, False)
):
    geo = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, end, end],
           "ceil_mode": ceil}
    if H + end < 3 or W + end < 3:
        continue
    x, keep = guarded((N, C, H, W), at_end)
    x[...] = rng.standard_normal((N, C, H, W)).astype(np.float32)
    x.reshape(-1)[rng.integers(0, x.size, 2)] = [np.nan, -0.0]
    got = pool.max_pool(_Ctx, x, **geo)
    lib = native._core.lib
    native._core.lib = None
    try:
        want = pool.max_pool(_Ctx, x, **geo)
    finally:
        native._core.lib = lib
    assert got.shape == want.shape, (H, W, ceil, end)
    np.testing.assert_array_equal(got, want, err_msg=str((H, W, ceil, end, N, C)))
print("ok")
"""


def test_max_3x3_s2_reads_only_the_planes(tmp_path):
    """Every size from a 1x1 plane up (widths about one, two and three column blocks), ceil
    mode, end pads, batches and channels: the planes between unreadable pages (a read past
    the last plane's end or before the first's start faults), the values the numpy kernel's."""
    import subprocess
    import sys

    script = tmp_path / "guarded.py"
    script.write_text(_GUARDED)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
