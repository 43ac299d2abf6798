"""The Winograd F(2x2, 3x3) float32 conv (onyx/runtime/native/winograd.c) against float64 numpy
references, through the Conv and FusedConv kernels: odd output sizes (a last tile row and
column half outside), uneven pads, output channels past a panel's 8, blocks of tiles that
span tile rows and images, residuals, activations, two threads; the shapes it leaves to the
direct kernels; the range entry's refusals; and AVX2 / numpy-only processes, where it does
not run."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import FUSED_ACTIVATIONS

from onyx.errors import InvalidArgument
from onyx.runtime import native
from onyx.runtime.kernels import conv as conv_kernels
from onyx.runtime.kernels.fused import fused_conv
from onyx.runtime.native import _core as native_core

pytestmark = pytest.mark.skipif(not native.winograd_ok(), reason="no AVX-512 Winograd conv")

#: N, C, H, W, M, pads (top, left, bottom, right)
CASES = [
    (2, 16, 16, 16, 8, (1, 1, 1, 1)),  # 128 tiles: a block spans the two images
    (2, 32, 17, 13, 24, (1, 1, 1, 1)),  # odd sides: half-outside tiles; 3 panels
    (3, 20, 9, 30, 13, (0, 2, 1, 0)),  # uneven pads; a partial panel
    (1, 24, 28, 28, 40, (1, 1, 1, 1)),
    (1, 16, 20, 40, 16, (2, 0, 2, 2)),  # rows wholly in the padding
]


def _reference(x, w, b, pads, z=None):
    """A 3x3 conv in float64: zero-padded windows summed tap by tap."""
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    OH, OW = xp.shape[2] - 2, xp.shape[3] - 2
    y = np.zeros((x.shape[0], w.shape[0], OH, OW)) + b.astype(np.float64)[:, None, None]
    for a in range(3):
        for c in range(3):
            patch = xp[:, :, a : a + OH, c : c + OW]
            y += np.einsum("nchw,mc->nmhw", patch, w[:, :, a, c].astype(np.float64))
    return y if z is None else y + z


def _arrays(case, seed):
    N, C, H, W, M = case[:5]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((M, C, 3, 3)) / np.sqrt(9 * C)).astype(np.float32)
    w.flags.writeable = False  # (a constant: its set-up is kept)
    b = rng.standard_normal(M).astype(np.float32)
    return x, w, b


#: The bound on work below which the conv is left to the direct kernels, as shipped.
SHIPPED_MIN_MACS = native_core.WINOGRAD_MIN_MACS


@pytest.fixture(autouse=True)
def _small_layers_too(monkeypatch):
    """The cases here are small (fast): the Winograd conv takes them all the same."""
    monkeypatch.setattr(native_core, "WINOGRAD_MIN_MACS", 0)


@pytest.fixture
def winograd_calls(monkeypatch):
    """The input shapes the Winograd conv runs from now on."""
    calls, run = [], native.WinogradConv.__call__
    monkeypatch.setattr(native.WinogradConv, "__call__",
                        lambda self, x, *a: calls.append(x.shape) or run(self, x, *a))  # fmt: skip
    return calls


@pytest.mark.parametrize("case", CASES)
def test_conv_matches_reference(case, winograd_calls):
    x, w, b = _arrays(case, sum(case[:5]))
    want = _reference(x, w, b, case[5])
    for _ in range(2):  # (the second call runs the kept set-up)
        got = conv_kernels.conv(x, w, b, pads=list(case[5]))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(winograd_calls) == 2, "the Winograd conv did not run"


def test_no_bias(winograd_calls):
    x, w, _ = _arrays(CASES[1], 4)
    got = conv_kernels.conv(x, w, None, pads=[1, 1, 1, 1])
    want = _reference(x, w, np.zeros(w.shape[0], np.float32), (1, 1, 1, 1))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert winograd_calls


@pytest.mark.parametrize("activation", ["Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh"])
def test_fused_residual_and_activation(activation, winograd_calls):
    case = CASES[1]
    x, w, b = _arrays(case, 7)
    z = np.random.default_rng(8).standard_normal((2, 24, 17, 13)).astype(np.float32)
    params = {"LeakyRelu": [0.1], "Clip": [-0.5, 0.7]}.get(activation)
    got = fused_conv(x, w, b, z, activation=activation, activation_params=params, pads=[1] * 4)
    s = _reference(x, w, b, case[5], z)
    want = FUSED_ACTIVATIONS[activation](s)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert winograd_calls


def test_threads_split_the_blocks(winograd_calls):
    """A layer of many blocks runs them on two threads: the same sums as on one."""
    case = (2, 32, 32, 32, 40, (1, 1, 1, 1))
    x, w, b = _arrays(case, 3)
    with native.threads(2):
        got = conv_kernels.conv(x, w, b, pads=[1, 1, 1, 1])
    with native.threads(1):
        one = conv_kernels.conv(x, w, b, pads=[1, 1, 1, 1])
    np.testing.assert_array_equal(got, one)  # (each block's sums in one order either way)
    np.testing.assert_allclose(got, _reference(x, w, b, (1, 1, 1, 1)), rtol=1e-4, atol=1e-4)
    assert len(winograd_calls) == 2


@pytest.mark.parametrize(
    "x_shape, w_shape, attrs",
    [
        ((1, 16, 32, 32), (16, 16, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ((1, 16, 32, 32), (16, 16, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
        ((1, 16, 32, 32), (16, 8, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
        ((1, 8, 32, 32), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # few input channels
        ((1, 512, 8, 8), (512, 512, 3, 3), {"pads": [1, 1, 1, 1]}),  # many weights a tile
        ((1, 16, 32, 32), (16, 16, 5, 5), {"pads": [2, 2, 2, 2]}),
        ((1, 16, 32, 32), (16, 16, 3, 3), {"pads": [3, 3, 3, 3]}),
    ],
)
def test_shapes_left_to_the_direct_kernels(x_shape, w_shape, attrs, winograd_calls):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    w.flags.writeable = False
    got = conv_kernels.conv(x, w, None, **attrs)
    with native.disabled():
        want = conv_kernels.conv(x, w, None, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    assert not winograd_calls


def test_small_layers_are_left_to_the_direct_kernels(monkeypatch, winograd_calls):
    monkeypatch.setattr(native_core, "WINOGRAD_MIN_MACS", SHIPPED_MIN_MACS)
    x, w, b = _arrays((1, 32, 16, 16, 32), 5)  # (2.4 M multiply-adds)
    got = conv_kernels.conv(x, w, b, pads=[1, 1, 1, 1])
    np.testing.assert_allclose(got, _reference(x, w, b, (1, 1, 1, 1)), rtol=1e-4, atol=1e-4)
    assert not winograd_calls
    x, w, b = _arrays((1, 64, 32, 32, 64), 6)  # (38 M)
    got = conv_kernels.conv(x, w, b, pads=[1, 1, 1, 1])
    np.testing.assert_allclose(got, _reference(x, w, b, (1, 1, 1, 1)), rtol=1e-4, atol=1e-4)
    assert winograd_calls


def test_weights_of_fewer_channels_than_the_input_are_not_taken(winograd_calls, monkeypatch):
    """Weights for 8 input channels and a 16-channel input: the Winograd conv would read
    16 channels' transformed weights; it leaves them to the kernels that refuse them. (The
    Conv kernel says so before it reaches them: its group check; and the native set-ups'
    front check declines them, for a bound call that skips the kernel's.)"""
    x = np.ones((1, 16, 32, 32), np.float32)
    w = np.ones((32, 8, 3, 3), np.float32)
    w.flags.writeable = False
    with pytest.raises(ValueError, match="X has 16 channels"):
        conv_kernels.conv(x, w, None, pads=[1, 1, 1, 1])
    attrs = conv_kernels.conv_key("NOTSET", [1, 1, 1, 1], None, None, None)
    assert conv_kernels.native_conv_f32(x, w, None, 1, attrs) is None
    monkeypatch.setattr(conv_kernels, "channel_group_problem", lambda *a: None)  # (behind it:)
    w = np.ones((32, 8, 3, 3), np.float32)  # (another W: the set-up's answer is kept per W)
    w.flags.writeable = False
    with pytest.raises(InvalidArgument):
        conv_kernels.native_conv_f32(x, w, None, 1, attrs)
    assert not winograd_calls
    packed = native.pack_winograd(np.ones((32, 8, 3, 3), np.float32))
    with pytest.raises(InvalidArgument, match="packed weights"):
        native.WinogradConv((1, 16, 32, 32), packed, 32, (32, 32), (1, 1))


def test_range_entry_refuses_blocks_past_the_end():
    from onyx.runtime.native import _core

    packed = native.pack_winograd(np.ones((8, 16, 3, 3), np.float32))
    conv = native.WinogradConv((1, 16, 20, 20), packed, 8, (20, 20), (1, 1))
    x, y = np.ones((1, 16, 20, 20), np.float32), np.empty((1, 8, 20, 20), np.float32)
    task = type(conv.task).from_buffer_copy(conv.task)
    task.x, task.y = x.ctypes.data, y.ctypes.data
    run = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        _core.lib.winograd_range
    )
    blocks = -(-100 // 48)  # (10 x 10 tiles)
    assert run(ctypes.addressof(task), 0, blocks) == 0
    np.testing.assert_allclose(y[0, 0, 5, 5], 16 * 9, rtol=1e-5)
    assert run(ctypes.addressof(task), 0, blocks + 1) != 0
    assert run(ctypes.addressof(task), -1, 1) != 0


@pytest.mark.parametrize("env", [{"ONYX_NATIVE_ISA": "avx2"}, {"ONYX_NATIVE": "0"}])
def test_other_processes_compute_the_same_conv(env):
    """Below AVX-512 (or without the library) the Winograd conv does not run, and the conv
    it would have taken gives the same values on the other paths."""
    code = (
        "import numpy as np\n"
        "from onyx.runtime import native\n"
        "from onyx.runtime.kernels import conv\n"
        "assert not native.winograd_ok()\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.standard_normal((1, 16, 24, 24)).astype(np.float32)\n"
        "w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)\n"
        "import sys\n"
        "y = conv.conv(x, w, None, pads=[1, 1, 1, 1])\n"
        "sys.stdout.buffer.write(np.ascontiguousarray(y, np.float32).tobytes())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()
    got = np.frombuffer(done.stdout, np.float32).reshape(1, 16, 24, 24)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, 24, 24)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    want = _reference(x, w, np.zeros(16, np.float32), (1, 1, 1, 1))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    mine = conv_kernels.conv(x, w, None, pads=[1, 1, 1, 1])  # (this process: Winograd's)
    np.testing.assert_allclose(mine, want, rtol=1e-4, atol=1e-3)
