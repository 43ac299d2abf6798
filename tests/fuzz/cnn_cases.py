"""Generated cases for the convolution paths the node suite does not reach: random small
MobileNet-like CNNs (their convs go channels-last and into native chains, runtime/conv_chain.py),
dynamically quantized convs (ConvInteger, QLinearConv, ConvIntegerToFloat's one-pixel path),
and direct calls of the native entries with bad arguments (the C checks are their only guard).

Each generator takes a random.Random and returns (ModelProto, feeds) or, for the native calls,
runs its own check. A generated model that runs is checked against itself: the same feeds run
twice give the same bits, a second feed shape in between changes nothing (a chain's kept
scratch and set-ups), and the results agree with the same model run without chains
(ONYX_NHWC_CHAIN=0, bit for bit) and without the optimizer (closely).
"""

from __future__ import annotations

import ctypes
import os
import random

import numpy as np

#: Values that overflow 32- or 64-bit sizes, with small odd ones that split work unevenly.
EXTREME = [2**31 - 1, 2**31, 2**32 - 5, 2**32, 2**62, 2**63 - 1, -(2**63), -1, 0]
ODD_CHANNELS = [1, 3, 5, 7, 8, 16, 17, 24, 33, 48]


# -- random MobileNet-like CNNs ---------------------------------------------------------------
class _Builder:
    def __init__(self, rng: random.Random):
        self.rng, self.nodes, self.inits, self.n = rng, [], [], 0
        self.np_rng = np.random.default_rng(rng.randrange(2**32))

    def name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"

    def const(self, array: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self.name("c")
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        from onnx import helper

        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(self, x: str, c: int, m: int, k: int, group: int = 1, stride: int = 1,
             dilation: int = 1, pads=None) -> str:  # fmt: skip
        w = self.np_rng.standard_normal((m, c // group, k, k)).astype(np.float32) * 0.3
        b = self.np_rng.standard_normal(m).astype(np.float32) * 0.1
        half = (k - 1) * dilation // 2
        pads = pads if pads is not None else [half] * 4
        return self.node("Conv", [x, self.const(w), self.const(b)], group=group,
                         kernel_shape=[k, k], strides=[stride, stride],
                         dilations=[dilation, dilation], pads=pads)  # fmt: skip

    def activation(self, x: str) -> str:
        kind = self.rng.choice(["Relu", "Clip", "HardSwish", "HardSigmoidMul", "none", "LeakyRelu"])
        if kind == "Clip":
            lo, hi = self.const(np.float32(0)), self.const(np.float32(6))
            return self.node("Clip", [x, lo, hi])
        if kind == "HardSigmoidMul":  # (HardSigmoidMulFusion's pattern)
            return self.node("Mul", [x, self.node("HardSigmoid", [x], alpha=1 / 6, beta=0.5)])
        if kind == "none":
            return x
        return self.node(kind, [x])


def random_cnn(rng: random.Random):
    """A small MobileNet-like CNN (stem conv, depthwise-separable blocks with residuals and
    squeeze-excite, a pooled head), its sizes drawn from odd channel counts, strides, pads,
    dilations, batch 0 to 3 and now and then a spatial size past the chains' scratch cap; one
    attribute of one conv may then get an extreme value. Returns (model, [feeds, feeds])."""
    from onnx import TensorProto, helper

    b = _Builder(rng)
    batch = rng.choice([1, 1, 1, 2, 3, 0])
    side = rng.choice([1, 2, 5, 7, 8, 13, 16, 24, 31])
    channels = rng.choice([1, 3, 4, 8])
    c = rng.choice(ODD_CHANNELS)
    blocks = rng.randint(1, 5)
    # past conv_chain.KEPT_SCRATCH (16 MiB): the layers run one by one; one small block, so
    # that the numpy paths (ONYX_NATIVE=0) run it in seconds too
    big = rng.random() < 0.06
    if big:
        side, batch, channels = 520, rng.choice([1, 1, 0]), 3
        c, blocks = rng.choice([8, 16]), 1
    x = "x"
    stride = rng.choice([1, 2]) if not big else 1
    h = b.activation(b.conv(x, channels, c, rng.choice([1, 3]), stride=stride))
    for _ in range(blocks):
        h, c = _block(b, h, c, big)
    if rng.random() < 0.7:
        h = b.node("GlobalAveragePool", [h])
        if rng.random() < 0.5:
            h = b.node("Flatten", [h])
    _maybe_extreme(b.nodes, rng)
    dims = ["N", "C", "H", "W"] if rng.random() < 0.5 else [batch, channels, side, side]
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    out = helper.make_tensor_value_info(h, TensorProto.FLOAT, None)
    graph = helper.make_graph(b.nodes, "fz_cnn", [inp], [out], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    first = b.np_rng.standard_normal((batch, channels, side, side)).astype(np.float32)
    other = (batch + 1, channels, side, side) if isinstance(dims[0], str) else first.shape
    second = b.np_rng.standard_normal(other).astype(np.float32)
    return model, [{"x": first}, {"x": second}]


def _block(b: _Builder, x: str, c: int, big: bool = False) -> tuple[str, int]:
    """A MobileNet block: [expand 1x1] -> depthwise kxk -> [squeeze-excite] -> project 1x1
    [+ residual]."""
    rng = b.rng
    expand = rng.choice([1, 2, 3]) if c < 64 and not big else 1
    e = c * expand
    h = b.activation(b.conv(x, c, e, 1)) if expand > 1 else x
    k, stride, dilation = rng.choice([3, 3, 5, 1]), rng.choice([1, 1, 2]), rng.choice([1, 1, 2])
    pads = None
    if rng.random() < 0.2:
        pads = [rng.randint(0, 2) for _ in range(4)]  # (asymmetric)
    h = b.activation(b.conv(h, e, e, k, group=e, stride=stride, dilation=dilation, pads=pads))
    if rng.random() < 0.3:  # squeeze-excite
        s = b.node("GlobalAveragePool", [h])
        r = max(1, e // 4)
        s = b.node("Relu", [b.conv(s, e, r, 1)])
        s = b.node("HardSigmoid", [b.conv(s, r, e, 1)], alpha=1 / 6, beta=0.5)
        h = b.node("Mul", [h, s])
    m = rng.choice(ODD_CHANNELS) if rng.random() < 0.5 and not big else c
    h = b.conv(h, e, m, 1)
    if m == c and stride == 1 and pads is None and rng.random() < 0.7:
        h = b.node("Add", [h, x])
    return h, m


def _maybe_extreme(nodes, rng: random.Random) -> None:
    """With probability 0.3, one window attribute of one conv gets an extreme or odd value."""
    from onnx import helper

    convs = [n for n in nodes if n.op_type == "Conv"]
    if not convs or rng.random() > 0.3:
        return
    n = rng.choice(convs)
    name = rng.choice(["kernel_shape", "strides", "pads", "dilations", "group"])
    pick = lambda: rng.choice(EXTREME + [1, 2, 3, 7])  # noqa: E731
    value = pick() if name == "group" else [pick() for _ in range(4 if name == "pads" else 2)]
    keep = [a for a in n.attribute if a.name != name]
    del n.attribute[:]
    n.attribute.extend(keep + [helper.make_attribute(name, value)])


# -- quantized convs --------------------------------------------------------------------------
_QTYPES = {np.uint8: 2, np.int8: 3}


def quant_conv(rng: random.Random):
    """A dynamically quantized conv as onnxruntime's quantizer writes it
    (DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul [-> Add]: ConvIntegerToFloat), a
    QLinearConv or a bare ConvInteger, one-pixel inputs often (the 1x1 GEMV path), with now and
    then zero points of the other 8-bit type, scales and zero points of the wrong length,
    batch 0 or an extreme attribute."""
    from onnx import TensorProto, helper, numpy_helper

    np_rng = np.random.default_rng(rng.randrange(2**32))
    batch = rng.choice([1, 1, 2, 0])
    c, m = rng.choice([1, 3, 8, 17]), rng.choice([1, 4, 7, 16])
    side = rng.choice([1, 1, 3, 6])
    k = rng.choice([1, 1, 3]) if side > 1 else 1
    group = rng.choice([1, 1, c]) if c == m else 1
    wt = rng.choice([np.int8, np.uint8])
    xt = np.uint8 if rng.random() < 0.7 else np.int8
    w = np_rng.integers(-100 if wt is np.int8 else 0, 100, (m, c // group, k, k)).astype(wt)
    inits, nodes = [numpy_helper.from_array(w, "w")], []

    def zp(dtype, n: int, name: str) -> str:
        wrong = rng.random() < 0.15
        dtype = (np.int8 if dtype is np.uint8 else np.uint8) if wrong else dtype
        n = rng.choice([2, m + 1, 0]) if rng.random() < 0.1 else n
        inits.append(numpy_helper.from_array(np_rng.integers(0, 5, n).astype(dtype), name))
        if n == 1 and rng.random() < 0.5:
            inits[-1].ClearField("dims")  # (a scalar)
        return name

    attrs = {"kernel_shape": [k, k], "group": group, "pads": [k // 2] * 4}
    if rng.random() < 0.15:
        attrs[rng.choice(["strides", "dilations", "pads"])] = [rng.choice(EXTREME + [1, 2])] * (
            4 if rng.random() < 0.5 else 2
        )
    kind = rng.choice(["dynamic", "dynamic", "qlinear", "integer"])
    x_type = TensorProto.FLOAT if kind == "dynamic" else _QTYPES[xt]
    if kind == "dynamic":
        nodes.append(helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]))
        wz = zp(wt, rng.choice([1, m]), "wz")
        nodes.append(helper.make_node("ConvInteger", ["xq", "w", "xz", wz], ["acc"], **attrs))
        nodes.append(helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT))
        ws = np_rng.random(rng.choice([1, 1, m, m + 1])).astype(np.float32) * 0.01
        inits.append(numpy_helper.from_array(ws.reshape(-1, 1, 1) if ws.size > 1 else ws, "ws"))
        nodes.append(helper.make_node("Mul", ["xs", "ws"], ["scale"]))
        nodes.append(helper.make_node("Mul", ["accf", "scale"], ["y0"]))
        bias = np_rng.standard_normal((m, 1, 1)).astype(np.float32)
        inits.append(numpy_helper.from_array(bias, "bias"))
        nodes.append(helper.make_node("Add", ["y0", "bias"], ["y"]))
        out_type = TensorProto.FLOAT
    elif kind == "qlinear":
        inits += [numpy_helper.from_array(np.float32(0.02), "xs"),
                  numpy_helper.from_array(np.float32(0.05), "ys")]  # fmt: skip
        ws = np_rng.random(rng.choice([1, m, m, m + 2])).astype(np.float32) * 0.01
        inits.append(numpy_helper.from_array(ws, "ws"))
        ins = ["x", "xs", zp(xt, 1, "xz"), "w", "ws", zp(wt, len(ws), "wz"), "ys", zp(xt, 1, "yz")]
        nodes.append(helper.make_node("QLinearConv", ins, ["y"], **attrs))
        out_type = _QTYPES[xt]
    else:
        ins = ["x", "w", zp(xt, 1, "xz"), zp(wt, rng.choice([1, m]), "wz")]
        nodes.append(helper.make_node("ConvInteger", ins, ["y"], **attrs))
        out_type = TensorProto.INT32
    graph = helper.make_graph(
        nodes, "fz_qconv",
        [helper.make_tensor_value_info("x", x_type, ["N", c, side, side])],
        [helper.make_tensor_value_info("y", out_type, None)], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    shape = (batch, c, side, side)
    if kind == "dynamic":
        x = np_rng.standard_normal(shape).astype(np.float32)
    else:
        x = np_rng.integers(0, 100, shape).astype(xt)
    return model, [{"x": x}, {"x": x[:0] if batch else np.concatenate([x] * 1)}]


GENERATORS = {"random_cnn": random_cnn, "quant_conv": quant_conv}


# -- checking a generated model -----------------------------------------------------------------
def check_runs(path: str, feeds: list[dict]) -> None:
    """Runs the model on each feed, then the first again: bit-identical to the first run, to
    a session without chains and close to one without the optimizer; AssertionError if not."""
    import onyx

    sess = onyx.InferenceSession(path)
    first = sess.run(None, feeds[0])
    if not _equal(first, sess.run(None, feeds[0])):
        return  # (random ops, Dropout...: no two runs agree)
    for f in feeds[1:]:
        sess.run(None, f)
    again = sess.run(None, feeds[0])
    _same(first, again, "the same feeds run again")
    old = os.environ.get("ONYX_NHWC_CHAIN")
    os.environ["ONYX_NHWC_CHAIN"] = "0"
    try:
        plain = onyx.InferenceSession(path).run(None, feeds[0])
    finally:
        if old is None:
            del os.environ["ONYX_NHWC_CHAIN"]
        else:
            os.environ["ONYX_NHWC_CHAIN"] = old
    _same(first, plain, "the model without chains")
    opts = onyx.SessionOptions()
    opts.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_DISABLE_ALL
    raw = onyx.InferenceSession(path, opts).run(None, feeds[0])
    for a, b in zip(first, raw):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            raise AssertionError(f"optimized shape {a.shape} != unoptimized {b.shape}")
        if a.dtype.kind == "f" and a.size:
            a, b = a.astype(np.float64), b.astype(np.float64)
            both = np.isfinite(a) & np.isfinite(b)  # (inf and NaN may come either way)
            if not both.any():
                continue
            scale = 1.0 + float(np.max(np.abs(b[both])))
            err = float(np.max(np.abs(a[both] - b[both])))
            if not err <= 1e-3 * scale:
                raise AssertionError(f"optimized differs from unoptimized by {err} (scale {scale})")
        elif a.dtype.kind in "iub" and a.size and not np.array_equal(a, b):
            raise AssertionError("optimized integer results differ from unoptimized")


def _equal(a: list, b: list) -> bool:
    return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))


def same_value(a, b) -> bool:
    """Whether two run results are the same bits: tensors, sequences (lists) of them, maps."""
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (
            isinstance(a, (list, tuple))
            and isinstance(b, (list, tuple))
            and len(a) == len(b)
            and all(same_value(x, y) for x, y in zip(a, b))
        )
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and a.keys() == b.keys()
            and all(same_value(a[k], b[k]) for k in a)
        )
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == object or b.dtype == object:
        return a.shape == b.shape and all(x == y for x, y in zip(a.ravel(), b.ravel()))
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _same(a: list, b: list, what: str) -> None:
    if not _equal(a, b):
        raise AssertionError(f"results differ from {what}")


# -- native entries called directly -------------------------------------------------------------
class _Guarded:
    """A float32 buffer of n floats between two guard zones; ``intact`` says whether anything
    wrote outside it."""

    GUARD = 4096

    def __init__(self, n: int, fill: float = 0.0):
        self.all = np.full(n + 2 * self.GUARD, 7.25, np.float32)
        self.view = self.all[self.GUARD : self.GUARD + n]
        self.view[:] = fill
        self.address = self.view.ctypes.data

    def intact(self) -> bool:
        g = self.GUARD
        return bool((self.all[:g] == 7.25).all() and (self.all[len(self.all) - g :] == 7.25).all())


def native_calls(rng: random.Random) -> None:
    """One of the native entries' bindings called with a valid set-up, then one of its fields
    made bad: the call must refuse (a status, an OnyxError) or stay inside its buffers."""
    from onyx.runtime import native

    if not native.available():
        return
    rng.choice(_NATIVE_CASES)(rng)


def _pick(rng: random.Random, valid: int) -> int:
    return rng.choice(EXTREME + [valid + 1, valid - 1, valid * 2, valid + 100])


def _chain_case(rng: random.Random) -> None:
    """A one-step chain (a pointwise conv) with one of its refs, sizes, cuts or strides bad."""
    from onyx.errors import OnyxError
    from onyx.runtime.native import nhwc, nhwc_chain

    if not nhwc_chain.available():
        return
    N, H, W, C, M = 1, 5, 7, 8, 16
    w = np.ones((M, C, 1, 1), np.float32)
    geo = {"pads": [0, 0, 0, 0], "strides": [1, 1], "dilations": [1, 1],
           "kernel_shape": [1, 1], "out_shape": [H, W]}  # fmt: skip
    conv = nhwc.NhwcConv((N, H, W, C), w, None, geo, (0, 0.0, 0.0))
    conv.set_strides((4 * H * W * C, 4 * W * C, 4 * C, 4))
    x, y = _Guarded(N * H * W * C, 1.0), _Guarded(N * H * W * M)
    sizes = [4 * N * H * W * C, 4 * N * H * W * M]
    refs = [(0, 0), (1, 0), (-1, 0), (-1, 0)]
    cuts = conv.cuts.copy()
    parts = conv.parts
    what = rng.choice(["size", "offset", "base", "cut", "parts", "stride", "shape", "alias"])
    if what == "size":
        k = rng.randrange(2)
        sizes[k] = rng.choice([0, -1, sizes[k] - 4, sizes[k] // 2, 2**63 - 1])
        if sizes[k] > 4 * N * H * W * max(C, M):  # (claims more than there is: not checkable)
            sizes[k] = 4
    elif what == "offset":
        k = rng.randrange(2)
        refs[k] = (refs[k][0], rng.choice([4, 2, -4, 2**62, sizes[k]]))
    elif what == "base":
        k = rng.randrange(4)
        refs[k] = (rng.choice([2, 5, -2, 2**40]), 0)
    elif what == "cut":
        cuts[-1] = _pick(rng, int(cuts[-1]))
    elif what == "parts":
        parts = _pick(rng, parts)
        if parts > len(cuts) - 1:  # (cuts holds parts + 1 entries: no more is checkable)
            parts = len(cuts) - 1
    elif what == "stride":
        setattr(conv.task, rng.choice(["xs_n", "xs_h", "xs_w", "xs_c"]), _pick(rng, C))
    elif what == "shape":
        setattr(conv.task, rng.choice(["N", "H", "W", "C", "M", "OH", "OW"]), _pick(rng, H))
    else:  # y over x
        refs[1] = (0, 0)
    program = nhwc_chain.ChainProgram([(conv.task, cuts, parts, conv.ways, refs)], sizes)
    bases = np.array([x.address, y.address], np.int64)
    try:
        program(bases)
    except (OnyxError, ValueError):
        pass
    if not (x.intact() and y.intact()):
        raise AssertionError(f"a chain step with a bad {what} wrote outside its buffers")


def _nhwc_call_case(rng: random.Random) -> None:
    """nhwc.c's onyx_nhwc_call with cuts past the task's work or a bad field."""
    from onyx.errors import OnyxError
    from onyx.runtime.native import _core as core
    from onyx.runtime.native import nhwc

    if not nhwc.available():
        return
    N, H, W, C = 1, 6, 6, 8
    k = rng.choice([1, 3])
    w = np.ones((C, 1 if k == 3 else C, k, k), np.float32)
    geo = {"pads": [k // 2] * 4, "strides": [1, 1], "dilations": [1, 1],
           "kernel_shape": [k, k], "out_shape": [H, W]}  # fmt: skip
    conv = nhwc.NhwcConv((N, H, W, C), w, None, geo, (0, 0.0, 0.0))
    conv.set_strides((4 * H * W * C, 4 * W * C, 4 * C, 4))
    x, y = _Guarded(N * H * W * C, 1.0), _Guarded(N * H * W * C)
    cuts, parts = conv.cuts.copy(), conv.parts
    what = rng.choice(["cut", "x", "z"])
    if what == "cut":
        cuts[-1] = _pick(rng, int(cuts[-1]))
        call = nhwc._CALL[0]  # noqa: SLF001  (the entry itself: cuts are its only guard)
        status = call(conv.task_at, x.address, y.address, None, None, cuts.ctypes.data, parts, 1)
        try:
            core.check(status, "channels-last conv")
        except OnyxError:
            pass
    else:  # the binding's call with an x or a residual of another shape
        shape = list(conv.shape if what == "z" else (N, H, W, C))
        shape[rng.randrange(4)] += rng.choice([1, 5, -1])
        bad = _Guarded(int(np.prod(shape)), 1.0)
        args = (bad.view.reshape(shape),) if what == "x" else (x.view.reshape(N, H, W, C), None,
                                                             bad.view.reshape(shape))  # fmt: skip
        try:
            conv(*args)
        except OnyxError:
            return
        raise AssertionError(f"NhwcConv set up for x {(N, H, W, C)} took {what} {shape}")
    if not (x.intact() and y.intact()):
        raise AssertionError(f"onyx_nhwc_call with a bad {what} wrote outside its buffers")


def _conv_f32_case(rng: random.Random) -> None:
    """conv_f32.c's range entries with a part range past the work or a columns buffer shorter
    than its packed columns."""
    from onyx.runtime.native import _core as core
    from onyx.runtime.native import conv_f32

    if not conv_f32.conv_f32_ok():
        return
    t, needed = _conv_f32_task()
    x, y = _Guarded(t.N * t.C * t.H * t.W, 1.0), _Guarded(t.N * t.M * t.OH * t.OW)
    what = rng.choice(["end", "begin", "cols", "pack_end"])
    cols = _Guarded(needed if what != "cols" else rng.choice([1, needed - 1, needed // 2]))
    t.x, t.y, t.cols, t.ncols = x.address, y.address, cols.address, cols.view.size
    if what == "cols" and rng.random() < 0.5:  # (claims more than it holds: not checkable)
        t.ncols = rng.choice([0, -1, 2**63 - 1]) if rng.random() < 0.5 else cols.view.size
    fn = core.lib.onyx_conv_f32_pack_range if what in ("cols", "pack_end") else None
    fn = fn or core.lib.onyx_conv_f32_range
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    begin, end = 0, 1
    if what in ("end", "pack_end"):
        end = rng.choice([2**31, 2**40, 2**63 - 1, 10**6])
    elif what == "begin":
        begin, end = rng.choice([(-1, 1), (2**62, 2**62 + 1), (5, 2)])
    elif what == "cols":
        end = t.group * -(-t.C // t.group * t.kh * t.kw // t.kc) * t.strips  # (every job)
    if t.ncols > cols.view.size:
        return
    fn(ctypes.addressof(t), begin, end)
    if not all(b.intact() for b in (x, y, cols)):
        raise AssertionError(f"conv_f32 with a bad {what} wrote outside its buffers")


def _conv_f32_task():
    """A valid conv_f32 task (a 3x3 conv, its columns packed beforehand: not wide) without its
    buffers, and the floats its columns take."""
    from onyx.runtime.native import _core as core
    from onyx.runtime.native import conv_f32

    N, C, H, W, M = 1, 16, 12, 12, 16
    packed = conv_f32.pack_conv_f32(np.ones((M, C, 3, 3), np.float32), 1)
    conv = conv_f32.FloatConv((N, C, H, W), packed, M, (3, 3), (H, W), (1, 1), (1, 1), (1, 1))
    t = type(conv.task).from_buffer_copy(conv.task)
    nr = core.lib.conv_f32_tile[1]
    t.H, t.W, t.top, t.left, t.wide, t.raw = H, W, 1, 1, 0, 0
    t.strips = -(-N * H * W // nr)
    t.per_part = min(t.per_part, t.strips)
    return t, t.group * t.strips * (C // t.group * 9) * nr


_NATIVE_CASES = [_chain_case, _nhwc_call_case, _conv_f32_case]
