"""Runs of channels-last layers as one native call (runtime/conv_chain.py, native/nhwc_chain.c):
the same bits as the layers called one by one, at every batch, thread count and signature,
from several Python threads at once; the numpy path untouched; the native entry refusing
steps whose tensors do not fit their buffers."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from test_channels_last import mobile_net

import onyx
from onyx.optimizer import layout
from onyx.runtime import conv_chain
from onyx.runtime.native import nhwc

RNG = np.random.default_rng(3)
needs_native = pytest.mark.skipif(not conv_chain.enabled(), reason="chains: AVX-512 kernels")


@pytest.fixture
def forced(monkeypatch):
    """The layout pass runs wherever the test runs (on the numpy path without AVX-512)."""
    monkeypatch.setattr(layout, "_worthwhile", lambda: True)


@pytest.fixture
def chain_runs(monkeypatch):
    """The number of native chain calls so far (a list: read it after the runs)."""
    calls = [0]
    run = conv_chain.ChainSetup.run

    def counted(self, xs):
        calls[0] += 1
        return run(self, xs)

    monkeypatch.setattr(conv_chain.ChainSetup, "run", counted)
    return calls


def _sessions(model: bytes, monkeypatch, threads: int = 1):
    """(chained, one by one) sessions of the model."""
    options = onyx.SessionOptions()
    options.intra_op_num_threads = threads
    chained = onyx.InferenceSession(model, options)
    monkeypatch.setenv("ONYX_NHWC_CHAIN", "0")
    plain = onyx.InferenceSession(model, options)
    monkeypatch.delenv("ONYX_NHWC_CHAIN")
    return chained, plain


def _image(batch: int, hw=(13, 11)) -> dict:
    return {"x": RNG.uniform(-1, 1, (batch, 3, *hw)).astype(np.float32)}


@pytest.mark.parametrize(
    "C, E, stride, opset, batch, threads",
    [(20, 36, 2, 18, 1, 1), (16, 48, 1, 17, 2, 2), (7, 24, 2, 14, 3, 1), (33, 40, 1, 18, 2, 2)],
)
def test_chain_gives_the_layers_bits(forced, monkeypatch, chain_runs, C, E, stride, opset, batch,
                                     threads):  # fmt: skip
    """The chained runner's outputs are those of the layers run one by one, bit for bit, and
    onnxruntime's on the original model; the chain runs wherever the kernels do."""
    m = mobile_net(C, E, stride, opset)
    chained, plain = _sessions(m, monkeypatch, threads)
    feeds = _image(batch)
    want = plain.run(None, feeds)[0]
    for _ in range(3):  # (the first run is the checked one: the layers one by one)
        np.testing.assert_array_equal(chained.run(None, feeds)[0], want)
    assert chain_runs[0] >= (2 if conv_chain.enabled() else 0)
    theirs = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(want, theirs, rtol=1e-4, atol=1e-4)


@needs_native
@pytest.mark.parametrize("threads", [1, 2])
def test_a_chain_takes_the_set_ups_its_layers_made_at_the_first_run(forced, monkeypatch,
                                                                    chain_runs, threads):  # fmt: skip
    """The checked first run sets each layer up (packing, work split, task); the chain's set-up
    at the second run takes those: no layer is set up twice for a signature, and the bits are
    the layers' one by one."""
    made = []
    init = nhwc.NhwcConv.__init__

    def counted(self, *args):
        made.append(self)
        init(self, *args)

    monkeypatch.setattr(nhwc.NhwcConv, "__init__", counted)
    chained, plain = _sessions(mobile_net(), monkeypatch, threads)
    images = [_image(2), _image(3)]
    wants = [plain.run(None, feeds)[0] for feeds in images]  # (checked runs: one by one)
    del made[:]
    for _ in range(3):
        np.testing.assert_array_equal(chained.run(None, images[0])[0], wants[0])
    layers = len(made)
    assert layers == sum(n.op_type in layout.CONVS for n in chained.plan.graph) and layers >= 5
    assert chain_runs[0] > 0
    for _ in range(3):  # (a new signature: its set-ups made once, by its first run or chain)
        np.testing.assert_array_equal(chained.run(None, images[1])[0], wants[1])
    assert len(made) == 2 * layers


def test_batch_changes_between_runs(forced, monkeypatch):
    """A dynamic batch: each new signature gets its set-up (past SIGNATURES they start
    afresh), an earlier one is found again."""
    chained, plain = _sessions(mobile_net(), monkeypatch)
    monkeypatch.setattr(conv_chain, "SIGNATURES", 2)
    for batch in (1, 3, 1, 2, 5, 3, 1):
        feeds = _image(batch)
        for _ in range(2):
            np.testing.assert_array_equal(chained.run(None, feeds)[0], plain.run(None, feeds)[0])


def test_thread_setting_changes_between_runs(forced, monkeypatch):
    from onyx.runtime import native

    chained, plain = _sessions(mobile_net(16, 64, 1, 18, hw=(24, 24)), monkeypatch)
    feeds = _image(2, (24, 24))
    want = plain.run(None, feeds)[0]
    for threads in (1, 2, 1, 3):
        with native.threads(threads):
            for _ in range(2):
                np.testing.assert_array_equal(chained.run(None, feeds)[0], want)


def test_intermediate_graph_output(forced, monkeypatch):
    """A value inside a run that the graph also returns leaves the chain as its output."""
    import onnx

    model = onnx.load_from_string(mobile_net())
    model.graph.output.append(helper.make_tensor_value_info("d1", onnx.TensorProto.FLOAT, None))
    m = model.SerializeToString()
    chained, plain = _sessions(m, monkeypatch)
    feeds = _image(2)
    want = plain.run(None, feeds)
    for _ in range(3):
        got = chained.run(None, feeds)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    assert got[1].flags.writeable


def test_layers_without_a_native_path_run_one_by_one(forced, monkeypatch, chain_runs):
    """Where a layer's native path does not apply to a signature, the run's steps run as the
    runner would call them."""

    def refuse(*args):
        raise conv_chain.NoNativePath

    monkeypatch.setattr(conv_chain, "layer_task", refuse)
    chained, plain = _sessions(mobile_net(), monkeypatch)
    feeds = _image(2)
    for _ in range(3):
        np.testing.assert_array_equal(chained.run(None, feeds)[0], plain.run(None, feeds)[0])
    assert chain_runs[0] == 0


def test_several_python_threads_share_a_session(forced, monkeypatch):
    """Runs at once on one session: one holds the kept scratch, the others their own."""
    chained, plain = _sessions(mobile_net(16, 48, 1, 18, hw=(20, 20)), monkeypatch)
    cases = [_image(b, (20, 20)) for b in (1, 2, 1, 2)]
    wants = [plain.run(None, f)[0] for f in cases]
    errors = []

    def work(k):
        for _ in range(40):
            if not np.array_equal(chained.run(None, cases[k])[0], wants[k]):
                errors.append(k)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors


def test_off_switch_and_numpy_path(forced, monkeypatch):
    """ONYX_NHWC_CHAIN=0, or no channels-last kernels: no chain is made."""
    monkeypatch.setenv("ONYX_NHWC_CHAIN", "0")
    assert not conv_chain.enabled()
    monkeypatch.delenv("ONYX_NHWC_CHAIN")
    monkeypatch.setattr(nhwc, "available", lambda: False)
    assert not conv_chain.enabled()


def test_scratch_layout_keeps_live_values_apart():
    """lay_out: two values whose lives overlap (a layer's output and its inputs included)
    never share a byte; dead ones are reused."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 12))
        lives, known = {}, {}
        for slot in range(n):
            born = int(rng.integers(0, 10))
            lives[slot] = (born, born + int(rng.integers(0, 4)))
            known[slot] = ((1, int(rng.integers(1, 5)), int(rng.integers(1, 5)), 16), None)
        offsets, top = conv_chain.lay_out(lives, known)
        spans = {s: (offsets[s], offsets[s] + 4 * int(np.prod(known[s][0]))) for s in lives}
        assert all(end <= top and start % 64 == 0 for start, end in spans.values())
        for a in lives:
            for b in lives:
                overlap = lives[a][0] <= lives[b][1] and lives[b][0] <= lives[a][1]
                if a < b and overlap:
                    assert spans[a][1] <= spans[b][0] or spans[b][1] <= spans[a][0]
    chain = {0: (0, 1), 1: (1, 2), 2: (2, 3)}  # (a straight chain: ping-pong)
    offsets, top = conv_chain.lay_out(chain, {s: ((1, 1, 1, 16), None) for s in chain})
    assert offsets[0] == offsets[2] != offsets[1] and top == 128


# ------------------------------------------------------------------------------ the entry


def _one_conv():
    """An NhwcConv of a (1, 5, 6, 8) input to (1, 5, 6, 16), its input and output sizes."""
    from onyx.runtime.kernels.conv_geometry import _conv_geometry

    w = RNG.standard_normal((16, 8, 3, 3)).astype(np.float32)
    geo = _conv_geometry((1, 8, 5, 6), w.shape, "NOTSET", [1, 1, 1, 1], None, None, None)
    conv = nhwc.NhwcConv((1, 5, 6, 8), w, None, geo, (0, 0.0, 0.0))
    conv.set_strides((5 * 6 * 8 * 4, 6 * 8 * 4, 8 * 4, 4))
    return conv, 5 * 6 * 8 * 4, 5 * 6 * 16 * 4


@needs_native
@pytest.mark.parametrize(
    "refs, sizes",
    [
        (((1, 0), (2, 4), (-1, 0), (-1, 0)), None),  # y one float past its buffer
        (((1, 4), (2, 0), (-1, 0), (-1, 0)), None),  # x past its buffer
        (((1, 0), (5, 0), (-1, 0), (-1, 0)), None),  # no such base
        (((1, 0), (-2, 0), (-1, 0), (-1, 0)), None),  # a negative base
        (((1, 2), (2, 0), (-1, 0), (-1, 0)), "big"),  # a byte offset inside a float
        (((-1, 0), (2, 0), (-1, 0), (-1, 0)), None),  # no x
        (((0, 0), (0, 64), (-1, 0), (-1, 0)), "big"),  # y overlapping x
        (((1, 0), (2, 0), (-1, 0), (0, 0)), "small"),  # a residual past its buffer
    ],
)
def test_entry_refuses_steps_outside_their_buffers(refs, sizes):
    from onyx.errors import OnyxError
    from onyx.runtime.native.nhwc_chain import ChainProgram

    conv, x_bytes, y_bytes = _one_conv()
    scratch = {"big": 1 << 16, "small": y_bytes - 4}.get(sizes, 64)
    program = ChainProgram(
        [(conv.task, conv.cuts, conv.parts, conv.ways, refs)], [scratch, x_bytes, y_bytes]
    )
    buffers = [np.zeros(scratch // 4 + 1, np.float32), np.ones(x_bytes // 4, np.float32)]
    y = np.full(y_bytes // 4, 7.0, np.float32)
    bases = np.array([b.ctypes.data for b in (*buffers, y)], np.int64)
    with pytest.raises((OnyxError, ValueError)):
        program(bases)
    assert (y == 7.0).all()  # (nothing written)


@needs_native
def test_entry_refuses_cuts_past_the_tasks_work():
    """The kernels run each part's rows as its cuts say: cuts past the task's rows would write
    past y, so the entry refuses them before running anything."""
    from onyx.errors import OnyxError
    from onyx.runtime.native.nhwc_chain import NONE, ChainProgram

    conv, x_bytes, y_bytes = _one_conv()
    rows = conv.shape[0] * conv.shape[1]  # (a 3x3 conv: its cuts split N * OH rows)
    cuts = np.array([0, rows + 1], np.int64)
    program = ChainProgram(
        [(conv.task, cuts, 1, 1, ((1, 0), (2, 0), NONE, NONE))], [64, x_bytes, y_bytes]
    )
    x = np.ones(x_bytes // 4, np.float32)
    y = np.full(y_bytes // 4 + 16 * 6, 7.0, np.float32)  # (room for the row past it)
    scratch = np.empty(16, np.float32)
    with pytest.raises(OnyxError):
        program(np.array([scratch.ctypes.data, x.ctypes.data, y.ctypes.data], np.int64))
    assert (y == 7.0).all()  # (nothing written)


@needs_native
@pytest.mark.parametrize("kind", ["pointwise", "depthwise"])
def test_entry_refuses_strides_its_kernel_does_not_read(kind):
    """The pointwise kernel reads x contiguous and the depthwise ones a row's pixels C floats
    apart, whatever the task's strides: a task with other strides is refused, not read
    wrong (or past x, its strides spanning less than the kernel reads)."""
    from onyx.errors import OnyxError
    from onyx.runtime.kernels.conv_geometry import _conv_geometry
    from onyx.runtime.native.nhwc_chain import NONE, ChainProgram

    shape, C = (1, 5, 6, 8), 8
    if kind == "pointwise":
        w = RNG.standard_normal((16, C, 1, 1)).astype(np.float32)
        strides = (5 * 6 * C * 4, 6 * 4, 4, 5 * 6 * 4)  # (an NCHW array's transposed view)
    else:
        w = RNG.standard_normal((C, 1, 3, 3)).astype(np.float32)
        strides = (5 * 6 * 2 * C * 4, 6 * 2 * C * 4, 2 * C * 4, 4)  # (a channel slice)
    pads = [0] * 4 if kind == "pointwise" else [1] * 4
    geo = _conv_geometry((1, C, 5, 6), w.shape, "NOTSET", pads, None, None, None)
    conv = nhwc.NhwcConv(shape, w, None, geo, (0, 0.0, 0.0))
    assert conv.task.kind == (nhwc.POINTWISE if kind == "pointwise" else nhwc.DEPTHWISE)
    conv.set_strides(strides)
    x = np.ones(5 * 6 * 2 * C, np.float32)
    y = np.full(conv.size, 7.0, np.float32)
    program = ChainProgram(
        [(conv.task, conv.cuts, conv.parts, conv.ways, ((1, 0), (2, 0), NONE, NONE))],
        [64, x.nbytes, y.nbytes],
    )
    scratch = np.empty(16, np.float32)
    with pytest.raises(OnyxError):
        program(np.array([scratch.ctypes.data, x.ctypes.data, y.ctypes.data], np.int64))
    assert (y == 7.0).all()  # (nothing written)


@needs_native
def test_entry_runs_a_step_as_the_layer():
    from onyx.runtime.native.nhwc_chain import NONE, ChainProgram

    conv, x_bytes, y_bytes = _one_conv()
    x = RNG.standard_normal((1, 5, 6, 8)).astype(np.float32)
    program = ChainProgram(
        [(conv.task, conv.cuts, conv.parts, conv.ways, ((1, 0), (2, 0), NONE, NONE))],
        [64, x_bytes, y_bytes],
    )
    y = np.empty((1, 5, 6, 16), np.float32)
    scratch = np.empty(16, np.float32)
    program(np.array([scratch.ctypes.data, x.ctypes.data, y.ctypes.data], np.int64))
    np.testing.assert_array_equal(y, conv(x))
    with pytest.raises(ValueError):
        program(np.zeros(2, np.int64))


@pytest.mark.parametrize("limit", [None, 0])
def test_large_runs_go_layer_by_layer(forced, monkeypatch, chain_runs, limit):
    """A run whose scratch passes KEPT_SCRATCH runs its layers one by one (split between
    threads here, each writing its layer's kept output again)."""
    from onyx.runtime import native

    if limit is not None:
        monkeypatch.setattr(conv_chain, "KEPT_SCRATCH", limit)
    monkeypatch.setattr(nhwc, "_GROUP1_MACS", 2)  # (every layer worth two threads)
    monkeypatch.setattr(nhwc, "_DEPTHWISE_MACS", 2)
    chained, plain = _sessions(mobile_net(16, 64, 1, 18, hw=(24, 24)), monkeypatch, threads=2)
    feeds = _image(2, (24, 24))
    with native.threads(2):
        for _ in range(3):
            np.testing.assert_array_equal(chained.run(None, feeds)[0], plain.run(None, feeds)[0])
    assert (chain_runs[0] > 0) == (limit is None and conv_chain.enabled())


@needs_native
def test_depthwise_layer_takes_only_whole_rows_of_channels():
    """nhwc.c's depthwise kernels step a pixel by C floats: an input whose channels are
    contiguous but whose pixels lie further apart (a channel slice of a wider NHWC array) has
    no native path in a chain (its kernel then runs the layer on its own)."""
    from types import SimpleNamespace

    from onyx.runtime.kernels.channels_last import activation_code
    from onyx.runtime.kernels.conv_geometry import conv_key
    from onyx.runtime.native import thread_setting

    C = 16
    w = RNG.standard_normal((C, 1, 3, 3)).astype(np.float32)
    w.flags.writeable = False
    layer = SimpleNamespace(
        op="NhwcFusedConv",
        slots={"X": 0, "W": 1, "B": -1},
        step=None,  # (no kernel of its own: no set-up to take)
        code=activation_code("", None),
        group=C,
        geometry=conv_key("NOTSET", [1, 1, 1, 1], None, None, None),
    )
    wide = np.zeros((1, 6, 7, 2 * C), np.float32)
    whole, sliced = np.zeros((1, 6, 7, C), np.float32), wide[..., :C]
    for x, native_path in ((whole, True), (sliced, False)):
        args = (layer, x.shape, x.strides, {1: w}, {}, nhwc, thread_setting())
        if native_path:
            assert conv_chain.layer_task(*args)[1].kind == nhwc.DEPTHWISE
        else:
            with pytest.raises(conv_chain.NoNativePath):
                conv_chain.layer_task(*args)


@needs_native
def test_kept_scratch_has_a_cap_across_chains(forced, monkeypatch, chain_runs):
    """Every chain's set-ups together keep at most KEPT_SCRATCH_ALL bytes of scratch (each
    set-up kept up to KEPT_SCRATCH, SIGNATURES of them per chain, with no cap over sessions):
    past it a set-up's runs take their own, with the same bits; freed set-ups give theirs back."""
    import gc

    before = conv_chain._kept_scratch[0]  # noqa: SLF001
    monkeypatch.setattr(conv_chain, "KEPT_SCRATCH_ALL", before + 1)
    chained, plain = _sessions(mobile_net(), monkeypatch)
    feeds = _image(2)
    for _ in range(3):
        np.testing.assert_array_equal(chained.run(None, feeds)[0], plain.run(None, feeds)[0])
    assert chain_runs[0] >= 2 and conv_chain._kept_scratch[0] == before  # noqa: SLF001
    monkeypatch.setattr(conv_chain, "KEPT_SCRATCH_ALL", 64 << 20)
    more = onyx.InferenceSession(mobile_net(16, 48, 1, 17))
    for batch in (1, 2, 3):
        more.run(None, _image(batch))
        more.run(None, _image(batch))
    assert conv_chain._kept_scratch[0] > before  # noqa: SLF001
    del more
    gc.collect()
    assert conv_chain._kept_scratch[0] == before  # noqa: SLF001


@needs_native
def test_chain_gives_back_the_layers_kept_outputs(forced, monkeypatch, chain_runs):
    """A session's checked first run runs the layers one by one, and a layer split between
    threads keeps its output (counted in nhwc._SPARE_FLOATS, process-wide); once the chain
    runs them, the layers give their share back (it was held for the session's life, and a
    few sessions took the whole budget from every other model)."""
    from onyx.runtime import native

    monkeypatch.setattr(nhwc, "_GROUP1_MACS", 2)  # (every layer worth two threads)
    monkeypatch.setattr(nhwc, "_DEPTHWISE_MACS", 2)
    before = nhwc._held[0]  # noqa: SLF001
    if nhwc._SOLE is None:  # noqa: SLF001
        pytest.skip("no output is kept here (free-threaded Python)")
    chained, plain = _sessions(mobile_net(16, 64, 1, 18, hw=(24, 24)), monkeypatch, threads=2)
    feeds = _image(1, (24, 24))
    with native.threads(2):
        got = chained.run(None, feeds)[0]  # (checked: one by one)
        assert nhwc._held[0] > before  # noqa: SLF001
        for _ in range(2):
            np.testing.assert_array_equal(chained.run(None, feeds)[0], got)
    assert chain_runs[0] >= 2
    assert nhwc._held[0] == before  # noqa: SLF001
    np.testing.assert_array_equal(plain.run(None, feeds)[0], got)


def test_the_runner_generation_asks_for_chains_by_the_layout_ops_prefix():
    # plan._generate imports conv_chain only where two steps' ops start with "Nhwc" (a model
    # without them skips the module's import): a chainable op named otherwise would never chain
    assert conv_chain.CHAINABLE
    assert all(op.startswith("Nhwc") for op in conv_chain.CHAINABLE)
