"""The small CNN kernels (onyx/runtime/native/small_cnn.c: the direct conv of small images and
the 2x2 stride-2 max pool) against float64 numpy references, through the Conv, FusedConv and
MaxPool kernels: padding in every direction, dilation, output channels past a tile's 8, pixel
counts that are no multiple of 16, batches, residuals, activations, several threads; and the
shapes they leave to the general kernels. Skipped where the library lacks AVX-512."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from conftest import FUSED_ACTIVATIONS

from onyx.runtime import native
from onyx.runtime.kernels import conv as conv_kernels
from onyx.runtime.kernels import conv_transpose
from onyx.runtime.kernels.fused import fused_conv
from onyx.runtime.kernels.pool import max_pool

pytestmark = pytest.mark.skipif(not native.small_conv_ok(), reason="no AVX-512 small kernels")


@pytest.fixture(autouse=True)
def _no_winograd(monkeypatch):
    """These 3x3 cases are the small conv's: the Winograd conv that takes some of them
    otherwise has its own tests (test_winograd.py)."""
    from onyx.runtime.kernels import winograd

    monkeypatch.setattr(winograd, "ENABLED", False)


#: N, C, H, W, M, kernel, dilation, pads (top, left, bottom, right)
CASES = [
    (1, 3, 32, 32, 16, (3, 3), (1, 1), (1, 1, 1, 1)),  # a U-Net's first conv
    (1, 16, 16, 16, 32, (3, 3), (1, 1), (1, 1, 1, 1)),
    (1, 64, 8, 8, 64, (3, 3), (1, 1), (1, 1, 1, 1)),  # 4 vectors: strips of 3 and 1
    (2, 5, 7, 9, 13, (3, 3), (1, 1), (1, 1, 1, 1)),  # 63 pixels; a partial panel; batch 2
    (1, 4, 6, 11, 9, (5, 3), (1, 1), (2, 1, 0, 1)),  # uneven pads: fewer output rows
    (1, 6, 9, 10, 8, (3, 3), (2, 3), (0, 3, 4, 3)),  # dilation; rows wholly in the padding
    (3, 7, 5, 5, 3, (1, 1), (1, 1), (0, 0, 0, 0)),  # 1x1, fewer channels than a panel
    (1, 2, 12, 20, 10, (1, 7), (1, 1), (0, 3, 0, 3)),
    (1, 3, 4, 4, 16, (7, 7), (1, 1), (3, 3, 3, 3)),  # taps wholly in the padding
    # narrower outputs (OW < W: their last columns computed and dropped), of planes too big
    # for channel vectors
    (1, 3, 34, 34, 8, (3, 3), (1, 1), (0, 0, 0, 0)),  # a "valid" conv after a reflect Pad
    (2, 5, 20, 22, 13, (3, 3), (1, 1), (1, 0, 1, 0)),  # rows padded; a partial panel; batch 2
    (1, 6, 25, 27, 9, (3, 3), (2, 2), (0, 1, 0, 0)),  # dilation; a left pad alone
    (1, 8, 20, 20, 16, (3, 3), (1, 1), (0, 0, 0, 0)),  # 18 x 18: vectors spanning 2-3 rows
]

#: The narrower cases above.
NARROW = CASES[-4:]


def _reference(x, w, b, dilation, pads, z=None):
    """Conv in float64: zero-padded windows summed tap by tap."""
    N, C, H, W = x.shape
    M, _, kh, kw = w.shape
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    OH = H + top + bottom - (kh - 1) * dilation[0]
    OW = W + left + right - (kw - 1) * dilation[1]
    y = np.zeros((N, M, OH, OW)) + b.astype(np.float64)[:, None, None]
    for a in range(kh):
        for c in range(kw):
            r, s = a * dilation[0], c * dilation[1]
            patch = xp[:, :, r : r + OH, s : s + OW]
            y += np.einsum("nchw,mc->nmhw", patch, w[:, :, a, c].astype(np.float64))
    return y if z is None else y + z


def _arrays(case, seed):
    N, C, H, W, M, kernel = case[:6]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((M, C, *kernel)).astype(np.float32)
    w.flags.writeable = False  # (a constant: its set-up is kept)
    b = rng.standard_normal(M).astype(np.float32)
    return x, w, b


@pytest.fixture
def small_calls(monkeypatch):
    """The input shapes the small conv runs from now on."""
    calls, run = [], native.SmallConv.__call__
    monkeypatch.setattr(native.SmallConv, "__call__",
                        lambda self, x, *a: calls.append(x.shape) or run(self, x, *a))  # fmt: skip
    return calls


def _attrs(case):
    kernel, dilation, pads = case[5:]
    return {"kernel_shape": list(kernel), "dilations": list(dilation), "pads": list(pads)}


@pytest.mark.parametrize("case", CASES)
def test_conv_matches_reference(case, small_calls):
    x, w, b = _arrays(case, sum(case[:5]))
    want = _reference(x, w, b, case[6], case[7])
    for _ in range(2):  # (the second call runs the kept set-up)
        got = conv_kernels.conv(x, w, b, **_attrs(case))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(small_calls) == 2, "the small conv did not run"


@pytest.mark.parametrize("activation", ["Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh"])
def test_fused_residual_and_activation(activation, small_calls):
    case = CASES[3]
    x, w, b = _arrays(case, 7)
    z = np.random.default_rng(8).standard_normal((2, 13, 7, 9)).astype(np.float32)
    params = {"LeakyRelu": [0.1], "Clip": [-0.5, 0.7]}.get(activation)
    got = fused_conv(x, w, b, z, activation=activation, activation_params=params, **_attrs(case))
    s = _reference(x, w, b, case[6], case[7], z)
    want = FUSED_ACTIVATIONS[activation](s)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert small_calls, "the small conv did not run"


@pytest.mark.parametrize("case", NARROW)
def test_narrow_outputs_fuse_residual_and_activation(case, small_calls):
    """A narrower output's kept lanes are stored compressed and its residual read expanded:
    each cell gets its own residual, the dropped columns none."""
    x, w, b = _arrays(case, 12)
    s = _reference(x, w, b, case[6], case[7])
    z = np.random.default_rng(13).standard_normal(s.shape).astype(np.float32)
    got = fused_conv(x, w, b, z, activation="Relu", **_attrs(case))
    np.testing.assert_allclose(got, np.maximum(s + z, 0), rtol=1e-4, atol=1e-4)
    assert small_calls, "the small conv did not run"


def test_a_residual_in_another_layout_is_read_as_its_values(small_calls):
    """A Fortran-ordered (or broadcast) Z is copied C-contiguous for the call, and that copy
    lives through it."""
    case = CASES[4]
    x, w, b = _arrays(case, 9)
    want = _reference(x, w, b, case[6], case[7])
    z = np.asfortranarray(np.random.default_rng(10).standard_normal(want.shape), np.float32)
    for residual in (z, z[:, :1]):  # (the second broadcast over the channels)
        got = fused_conv(x, w, b, residual, **_attrs(case))
        np.testing.assert_allclose(got, want + residual, rtol=1e-4, atol=1e-4)
    assert len(small_calls) == 2


def test_threads_split_the_tiles(small_calls):
    """A layer of over a million multiply-adds runs its tiles on two threads: the same sums."""
    case = (1, 32, 16, 16, 40, (3, 3), (1, 1), (1, 1, 1, 1))
    x, w, b = _arrays(case, 3)
    with native.threads(2):
        got = conv_kernels.conv(x, w, b, **_attrs(case))
    with native.threads(1):
        one = conv_kernels.conv(x, w, b, **_attrs(case))
    np.testing.assert_array_equal(got, one)  # (each tile's sums in one order either way)
    np.testing.assert_allclose(got, _reference(x, w, b, (1, 1), (1, 1, 1, 1)), rtol=1e-4, atol=1e-3)
    assert len(small_calls) == 2


@pytest.mark.parametrize(
    "shape, attrs",
    [
        ((1, 8, 40, 40), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # a stride, 400 pixels
        ((1, 4, 136, 136), {"pads": [1, 1, 1, 1]}),  # a large image
        ((1, 3, 8, 8), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # a stem's (K = 27)
    ],
)
def test_other_shapes_keep_the_general_kernels(shape, attrs, small_calls):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((16, shape[1], 3, 3)).astype(np.float32)
    got = conv_kernels.conv(x, w, None, kernel_shape=[3, 3], **attrs)
    with native.disabled():
        want = conv_kernels.conv(x, w, None, kernel_shape=[3, 3], **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert not small_calls


def test_conv_agrees_with_the_numpy_path():
    case = CASES[1]
    x, w, b = _arrays(case, 11)
    got = fused_conv(x, w, b, activation="Relu", **_attrs(case))
    with native.disabled():
        want = fused_conv(x, w, b, activation="Relu", **_attrs(case))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


class _Ctx:
    n_outputs, outputs_wanted = 1, (True,)


@pytest.mark.parametrize("shape", [(1, 16, 32, 32), (2, 3, 7, 9), (1, 1, 2, 2), (1, 5, 6, 50)])
def test_max_pool_2x2(shape, monkeypatch):
    calls, run = [], native.MaxPool2x2.__call__
    monkeypatch.setattr(native.MaxPool2x2, "__call__",
                        lambda self, x: calls.append(x.shape) or run(self, x))  # fmt: skip
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    x.flat[::37] = np.nan  # (a window with a NaN pools to NaN)
    got = max_pool(_Ctx(), x, kernel_shape=[2, 2], strides=[2, 2])
    H, W = shape[2] // 2 * 2, shape[3] // 2 * 2
    want = x[:, :, :H, :W].reshape(*shape[:2], H // 2, 2, W // 2, 2).max(axis=(3, 5))
    np.testing.assert_array_equal(got, want)
    with native.disabled():
        np.testing.assert_array_equal(
            max_pool(_Ctx(), x, kernel_shape=[2, 2], strides=[2, 2]), want
        )
    assert calls == [shape]


def test_max_pool_ceil_mode_of_odd_sides_keeps_the_general_path():
    x = np.random.default_rng(6).standard_normal((1, 2, 5, 5)).astype(np.float32)
    got = max_pool(_Ctx(), x, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    assert got.shape == (1, 2, 3, 3)
    assert got[0, 0, 2, 2] == x[0, 0, 4, 4]


@pytest.mark.parametrize(
    "N, C, M, H, W", [(1, 64, 32, 8, 8), (1, 32, 16, 16, 16), (2, 5, 3, 3, 8), (1, 16, 7, 5, 24)]
)
def test_conv_transpose_2x2_stride_2(N, C, M, H, W, small_calls):
    rng = np.random.default_rng(C + M)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((C, M, 2, 2)).astype(np.float32)
    w.flags.writeable = False
    b = rng.standard_normal(M).astype(np.float32)
    got = conv_transpose.conv_transpose(x, w, b, kernel_shape=[2, 2], strides=[2, 2])
    # y[n, m, 2h + a, 2w + b] = bias[m] + sum over c of x[n, c, h, w] * w[c, m, a, b]
    want = np.einsum("nchw,cmab->nmhawb", x.astype(np.float64), w.astype(np.float64))
    want = want.reshape(N, M, 2 * H, 2 * W) + b[:, None, None]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert small_calls == [x.shape]


def test_conv_transpose_of_other_widths_keeps_the_general_kernel(small_calls):
    x = np.random.default_rng(2).standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = np.random.default_rng(3).standard_normal((4, 3, 2, 2)).astype(np.float32)
    got = conv_transpose.conv_transpose(x, w, None, kernel_shape=[2, 2], strides=[2, 2])
    with native.disabled():
        want = conv_transpose.conv_transpose(x, w, None, kernel_shape=[2, 2], strides=[2, 2])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not small_calls  # (a width of 6: 8 pixels of a vector's half span two rows)


def test_tasks_the_kernels_cannot_serve_are_refused():
    """small_cnn.c fails closed: an upsampling with an activation or a residual (which its
    store would drop) or of a narrower output, and a range of parts past the task's."""
    from onyx.errors import InvalidArgument
    from onyx.runtime.native import _core

    x = np.ones((1, 4, 2, 8), np.float32)
    packed = native.pack_small_conv(np.ones((16, 4, 1, 1), np.float32))
    args = ((1, 4, 2, 8), packed, 16, (1, 1), (2, 8), (1, 1), (0, 0))
    with pytest.raises(InvalidArgument):
        native.SmallConv(*args, activation=1, up=True)(x)
    up = native.SmallConv(*args, up=True)
    with pytest.raises(InvalidArgument):
        up(x, z=np.zeros(up.shape, np.float32))
    narrow = args[:4] + ((2, 6),) + args[5:]  # (an upsampling stores whole rows: none narrower)
    with pytest.raises(InvalidArgument):
        native.SmallConv(*narrow, up=True)(x)
    conv = native.SmallConv(*args)
    y = np.empty(conv.shape, np.float32)
    conv.task.x, conv.task.y = x.ctypes.data, y.ctypes.data
    run = _core.lib.onyx_small_conv_f32_range
    parts = 2  # (one strip of 16 pixels, two panels of 8 channels)
    i64 = ctypes.c_int64
    assert run(ctypes.c_void_p(conv.task_at), i64(0), i64(parts)) == 0
    assert run(ctypes.c_void_p(conv.task_at), i64(0), i64(parts + 1)) != 0
    assert run(ctypes.c_void_p(conv.task_at), i64(1), i64(0)) != 0


@pytest.mark.parametrize("small", [True, False])
def test_a_bias_of_another_size_is_refused(small, monkeypatch):
    """The native convs read M bias values: a bias of another size raises, on the small conv
    and on the general one (_core.bias_entry), where it was read past its end."""
    from onyx.errors import InvalidArgument
    from onyx.runtime.kernels import small_cnn

    monkeypatch.setattr(small_cnn, "ENABLED", small)
    x = np.ones((1, 16, 16, 16), np.float32)
    w = np.ones((32, 16, 3, 3), np.float32)
    w.flags.writeable = False  # (a constant: its set-up is kept, per small)
    with pytest.raises(InvalidArgument, match="bias of 3 values for 32"):
        conv_kernels.conv(x, w, np.ones(3, np.float32), pads=[1, 1, 1, 1])
    y = conv_kernels.conv(x, w, np.full(32, 2, np.float32), pads=[1, 1, 1, 1])
    assert y[0, 0, 5, 5] == 16 * 9 + 2


def test_kernels_refuse_to_run_where_avx512_is_capped():
    """With ONYX_NATIVE_ISA below AVX-512 the entries fail closed (as nhwc.c's) rather than
    run AVX-512 code the setting rules out."""
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from onyx.errors import InvalidArgument\n"
        "from onyx.runtime import native\n"
        "assert not native.small_conv_ok()\n"
        "p = native.pack_small_conv(np.ones((8, 2, 1, 1), np.float32))\n"
        "conv = native.SmallConv((1, 2, 2, 8), p, 8, (1, 1), (2, 8), (1, 1), (0, 0))\n"
        "for run in (conv, native.MaxPool2x2((1, 2, 2, 8))):\n"
        "    try:\n"
        "        run(np.ones((1, 2, 2, 8), np.float32))\n"
        "    except InvalidArgument:\n"
        "        continue\n"
        "    raise SystemExit('ran')\n"
    )
    env = {**os.environ, "ONYX_NATIVE_ISA": "avx2"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_weights_of_fewer_channels_than_the_input_are_refused(monkeypatch):
    """A weight of 8 input channels for a 16-channel input: the small conv and the general one
    read 16 channels' weights from panels packed for 8 (past their end); their set-ups now
    refuse them. (The Conv kernel says so before it reaches them: its group check.)"""
    from onyx.errors import InvalidArgument
    from onyx.runtime.kernels import small_cnn

    x = np.ones((1, 16, 16, 16), np.float32)
    w = np.ones((32, 8, 3, 3), np.float32)
    w.flags.writeable = False
    with pytest.raises(ValueError, match="X has 16 channels"):
        conv_kernels.conv(x, w, None, pads=[1, 1, 1, 1])
    attrs = conv_kernels.conv_key("NOTSET", [1, 1, 1, 1], None, None, None)
    assert conv_kernels.native_conv_f32(x, w, None, 1, attrs) is None  # (the set-ups' front
    # check declines: a bound call, which skips the kernel's check, then runs the kernel)
    monkeypatch.setattr(conv_kernels, "channel_group_problem", lambda *a: None)  # (behind it:)
    w = np.ones((32, 8, 3, 3), np.float32)  # (another W: the set-up's answer is kept per W)
    w.flags.writeable = False
    with pytest.raises(InvalidArgument, match="packed weights"):
        conv_kernels.native_conv_f32(x, w, None, 1, attrs)
    monkeypatch.setattr(small_cnn, "ENABLED", False)  # (the general conv_f32.FloatConv)
    w = np.ones((32, 8, 3, 3), np.float32)
    w.flags.writeable = False
    with pytest.raises(InvalidArgument, match="weights of 72 values"):
        conv_kernels.native_conv_f32(x, w, None, 1, attrs)


# ------------------------------------------------------------------ channel vectors (cv = 1)

#: N, C, H, W, M, kernel, stride, dilation, pads (top, left, bottom, right): output planes of
#: at most 256 pixels, which the small conv runs as channel vectors
CV_CASES = [
    (1, 64, 7, 7, 352, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),  # 1x1 read in place; 22 panels
    (2, 48, 13, 13, 40, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),  # 169 pixels; a partial panel
    (1, 40, 14, 14, 24, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),  # packed by masked loads
    (1, 36, 14, 14, 20, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),  # stride 2: packed by gathers
    (2, 9, 9, 11, 17, (3, 3), (2, 3), (1, 1), (0, 1, 2, 1)),  # uneven strides and pads
    (1, 6, 13, 12, 33, (5, 3), (3, 2), (2, 1), (2, 2, 2, 2)),  # dilation
    (1, 12, 5, 5, 16, (1, 1), (1, 1), (1, 1), (1, 1, 1, 1)),  # a padded 1x1: not in place
    (3, 40, 4, 4, 8, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),  # 16 pixels: one whole block
    (1, 33, 16, 16, 16, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),  # 256 pixels: the most
    (1, 40, 1, 17, 16, (1, 3), (1, 1), (1, 1), (0, 1, 0, 1)),  # 17 pixels: blocks of 8 and 9
]


def _reference_strided(x, w, b, stride, dilation, pads, z=None):
    """Conv in float64 at any stride: zero-padded windows summed tap by tap."""
    N, C, H, W = x.shape
    M, _, kh, kw = w.shape
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    OH = (H + top + bottom - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    OW = (W + left + right - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    y = np.zeros((N, M, OH, OW)) + b.astype(np.float64)[:, None, None]
    for a in range(kh):
        for c in range(kw):
            r, s = a * dilation[0], c * dilation[1]
            patch = xp[:, :, r : r + (OH - 1) * stride[0] + 1 : stride[0]]
            patch = patch[:, :, :, s : s + (OW - 1) * stride[1] + 1 : stride[1]]
            y += np.einsum("nchw,mc->nmhw", patch, w[:, :, a, c].astype(np.float64))
    return y if z is None else y + z


def _cv_attrs(case):
    kernel, stride, dilation, pads = case[5:]
    return {
        "kernel_shape": list(kernel),
        "strides": list(stride),
        "dilations": list(dilation),
        "pads": list(pads),
    }


@pytest.fixture
def cv_calls(monkeypatch):
    """Whether each small conv run from now on took channel vectors (task.cv)."""
    calls, run = [], native.SmallConv.__call__
    monkeypatch.setattr(native.SmallConv, "__call__",
                        lambda self, x, *a: calls.append(self.task.cv) or run(self, x, *a))  # fmt: skip
    return calls


@pytest.mark.parametrize("case", CV_CASES)
def test_channel_vectors_match_reference(case, cv_calls):
    x, w, b = _arrays(case, sum(case[:5]))
    want = _reference_strided(x, w, b, *case[6:])
    for _ in range(2):  # (the second call runs the kept set-up)
        got = conv_kernels.conv(x, w, b, **_cv_attrs(case))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert cv_calls == [1, 1], "the channel-vector conv did not run"
    with native.disabled():
        np.testing.assert_allclose(conv_kernels.conv(x, w, b, **_cv_attrs(case)), want,
                                   rtol=1e-4, atol=1e-4)  # fmt: skip


#: Small planes of whole 16-pixel rows: a kernel wider than 1x1 takes pixel vectors there (no
#: lane idle, no (tap, channel) rows packed per block), a 1x1 still channel vectors (read in
#: place). (N, C, H, W, M, kernel, stride, dilation, pads), then the layout expected.
WHOLE_ROW_CASES = [
    ((1, 64, 16, 16, 32, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)), 0),  # a U-Net's 16x16 layer
    ((2, 20, 8, 16, 12, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)), 0),  # two images, a partial panel
    ((1, 24, 16, 16, 16, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)), 1),  # 1x1: read in place
    ((1, 24, 13, 13, 16, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)), 1),  # 13-wide rows: lanes idle
]


@pytest.mark.parametrize(("case", "layout"), WHOLE_ROW_CASES)
def test_planes_of_whole_vector_rows_take_pixel_vectors(case, layout, cv_calls):
    x, w, b = _arrays(case, 31)
    want = _reference_strided(x, w, b, *case[6:])
    for _ in range(2):  # (the second call runs the kept set-up)
        got = conv_kernels.conv(x, w, b, **_cv_attrs(case))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert cv_calls == [layout, layout]


@pytest.mark.parametrize("activation", ["Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh"])
@pytest.mark.parametrize("case", [CV_CASES[1], CV_CASES[4]])
def test_channel_vectors_fuse_residual_and_activation(activation, case, cv_calls):
    x, w, b = _arrays(case, 17)
    s = _reference_strided(x, w, b, *case[6:])
    z = np.random.default_rng(18).standard_normal(s.shape).astype(np.float32)
    params = {"LeakyRelu": [0.1], "Clip": [-0.5, 0.7]}.get(activation)
    got = fused_conv(x, w, b, z, activation=activation, activation_params=params, **_cv_attrs(case))
    want = FUSED_ACTIVATIONS[activation](s + z)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert cv_calls == [1]


@pytest.mark.parametrize("case", [CV_CASES[0], CV_CASES[3]])
def test_channel_vectors_on_two_threads_give_the_same_sums(case, cv_calls):
    """Claims of whole blocks (packed once a claim) or halves of their panels: each tile's
    sums in one order either way."""
    x, w, b = _arrays(case, 5)
    with native.threads(2):
        two = conv_kernels.conv(x, w, b, **_cv_attrs(case))
    with native.threads(1):
        one = conv_kernels.conv(x, w, b, **_cv_attrs(case))
    np.testing.assert_array_equal(two, one)
    np.testing.assert_allclose(one, _reference_strided(x, w, b, *case[6:]), rtol=1e-4, atol=1e-4)
    assert cv_calls == [1, 1]


def test_channel_vector_tasks_the_kernel_cannot_serve_are_refused():
    """small_cnn.c fails closed on a pixel-vector task of a stride or an output narrower than
    its input (which only channel vectors serve), and on channel vectors with the upsampling
    store (which reads pixel tiles' sums)."""
    from onyx.errors import InvalidArgument

    x = np.ones((1, 4, 8, 8), np.float32)
    packed = native.pack_small_conv(np.ones((8, 4, 1, 1), np.float32))
    strided = native.SmallConv((1, 4, 8, 8), packed, 8, (1, 1), (4, 4), (1, 1), (0, 0),
                               strides=(2, 2))  # fmt: skip
    with pytest.raises(InvalidArgument):
        strided(x)
    cv = native.pack_small_conv(np.ones((16, 4, 1, 1), np.float32), native.CV_PANEL)
    args = ((1, 4, 8, 8), cv, 16, (1, 1), (8, 8), (1, 1), (0, 0))
    with pytest.raises(InvalidArgument):
        native.SmallConv(*args, up=True, cv=True)(x)
    conv = native.SmallConv(*args, cv=True)
    np.testing.assert_array_equal(conv(x), np.full((1, 16, 8, 8), 4))
    conv.task.cv = 2  # (no such layout)
    with pytest.raises(InvalidArgument):
        conv(x)


def test_a_narrow_plane_past_the_row_arithmetic_is_refused():
    """A narrow task's pixel tiles cover an OH x W plane (not OH x OW): its rows are found by
    float division, exact for planes of up to 2**20 pixels, so a task whose OH x W passes
    that is refused (small_cnn.py never makes one: OH x W <= MAX_PIXELS), even where OH x OW
    is small; an empty range of it ran as if it were served."""
    from onyx.runtime.native import _core

    H, W = 3, (1 << 19) + 1  # (OH x W past 2**20; OH x OW = 3)
    packed = native.pack_small_conv(np.ones((8, 1, 1, 1), np.float32))
    conv = native.SmallConv((1, 1, H, W), packed, 8, (1, 1), (H, 1), (1, 1), (0, 0))
    run = _core.lib.onyx_small_conv_f32_range
    assert run(ctypes.c_void_p(conv.task_at), ctypes.c_int64(0), ctypes.c_int64(0)) != 0
