"""Runs of consecutive channels-last steps (the optimizer's layout chains: NhwcFusedConv and
its variants, NhwcGlobalAveragePool) as one step of the generated runner, one native call a
run (native/nhwc_chain.c).

A small CNN at batch 1 spends as long between its layers as in them: each layer's line in the
runner, its kernel's checks, its output's allocation and its ctypes call. ``fuse`` finds the
runs of such steps in a schedule and puts a ChainStep in their place; the values only the run
reads live in one scratch buffer the step keeps (laid out once, lifetimes permitting), the
values read after it are its outputs. A ChainStep is set up per signature of its inputs
(shapes, strides, the thread setting), each layer with the very nhwc.NhwcConv set-up its
kernel makes (the same tasks, hence the same bits): the set-up itself where the layer's kernel
made one for this signature (the session's checked first run calls each layer, so a chain's
first set-up packs nothing and splits no work again); where any layer's native path does not
apply to a signature, the run's own steps run one by one, as they would without the chain.
Profiled and checked runs take the plan's steps as they are.

ONYX_NHWC_CHAIN=0 turns it off (the runner then calls each step).
"""

from __future__ import annotations

import functools
import math
import os
import threading
import weakref

import numpy as np

from ..errors import OnyxError
from .bind import Step
from .registry import ONYX_DOMAIN
from .values import ALIGNMENT, aligned_empty

#: op -> (its activation where the op fixes it, the node inputs by role)
CHAINABLE = {
    "NhwcFusedConv": (None, ("X", "W", "B")),
    "NhwcConvHardSwish": ("HardSwish", ("X", "W", "B")),
    "NhwcFusedConvAdd": (None, ("X", "W", "B", "Z")),
    "NhwcScaledFusedConv": (None, ("X", "S", "W", "B")),
    "NhwcScaledFusedConvAdd": (None, ("X", "S", "W", "B", "Z")),
    "NhwcGlobalAveragePool": (None, ("X",)),
}
#: Scratch bytes a chain may keep between runs (a larger run goes layer by layer: its layers
#: take long enough that returning to Python between them costs next to nothing).
KEPT_SCRATCH = 16 << 20
#: Input signatures a ChainStep keeps set-ups for (a new one past this starts afresh).
SIGNATURES = 4
#: Scratch bytes all chains of the process keep together (SIGNATURES set-ups of many
#: sessions' chains would each keep up to KEPT_SCRATCH): a set-up past it keeps none and
#: each of its runs takes its own, as a second thread's run does.
KEPT_SCRATCH_ALL = 32 << 20
_kept_scratch = [0]  # (the bytes kept now)
_KEPT_LOCK = threading.Lock()  # (held while _kept_scratch is read and changed)


def enabled() -> bool:
    if os.environ.get("ONYX_NHWC_CHAIN", "1") == "0":
        return False
    from . import native

    if not native.available():
        return False
    from .native import nhwc_chain

    return nhwc_chain.available()


# -- finding runs ---------------------------------------------------------------------------


class _Layer:
    """One step of a run, by role: slots of X, S, Z, W, B and the output; its attributes."""

    __slots__ = ("step", "op", "slots", "out", "code", "group", "geometry")

    def __init__(self, step: Step, attrs: dict):
        self.step, self.op = step, step.node.op_type
        fixed, roles = CHAINABLE[self.op]
        self.slots = {r: (step.ins[k] if k < len(step.ins) else -1) for k, r in enumerate(roles)}
        self.out = step.outs[0]
        if self.op == "NhwcGlobalAveragePool":
            return
        from .kernels.channels_last import activation_code
        from .kernels.conv_geometry import conv_key

        activation = attrs.get("activation", "") if fixed is None else fixed
        params = attrs.get("activation_params") if fixed is None else None
        #: (code, alpha, beta) as the native kernels take the activation, None where they
        #: do not apply it
        self.code = activation_code(activation, tuple(params) if params is not None else None)
        self.group = attrs.get("group", 1)
        self.geometry = conv_key(
            *(attrs.get(a) for a in ("auto_pad", "pads", "strides", "dilations", "kernel_shape"))
        )


def _layer(plan, step: Step) -> _Layer | None:
    """The step as a chain layer, or None where it is not one (another op, or its W or B not
    read-only float32 constants)."""
    node = step.node
    if node.domain != ONYX_DOMAIN or node.op_type not in CHAINABLE or step.takes_ctx:
        return None
    if len(step.outs) != 1 or step.outs[0] < 0:
        return None
    if node.op_type == "NhwcGlobalAveragePool":  # (no attributes: a plain kernel)
        return None if step.attrs else _Layer(step, {})
    attrs = getattr(step.fn, "attrs", None)  # (a PreparedCall's: every attribute)
    if attrs is None or step.attrs:
        return None
    layer = _Layer(step, attrs)
    for role in ("W", "B"):
        slot = layer.slots.get(role, -1)
        if slot < 0:
            if role == "W":
                return None
            continue
        if not plan.is_constant(slot):
            return None
        value = plan.template[slot]
        if not isinstance(value, np.ndarray) or value.dtype != np.float32:
            return None
        if value.flags.writeable:
            return None
    return layer


def fuse(plan, steps: list[Step], out_slots, first: int = 0) -> list[Step]:
    """``steps`` with each run of two or more consecutive chain layers (from index ``first``
    on) replaced by one ChainStep."""
    chainable = [s.node.op_type in CHAINABLE and s.node.domain == ONYX_DOMAIN for s in steps]
    if sum(chainable) < 2 or not enabled():  # (enabled loads the library: only for these)
        return steps
    from .plan import _last_reads  # (plan.py imports this module)

    result, run = list(steps[:first]), []
    last_reads = _last_reads(steps)
    keep = set(out_slots)
    for j in range(first, len(steps) + 1):
        layer = _layer(plan, steps[j]) if j < len(steps) else None
        if layer is not None:
            run.append((j, layer))
            continue
        result += _chain_or_steps(plan, run, last_reads, keep)
        run = []
        if j < len(steps):
            result.append(steps[j])
    return result


def _chain_or_steps(plan, run: list, last_reads: dict[int, int], keep: set[int]) -> list[Step]:
    if len(run) < 2:
        return [layer.step for _, layer in run]
    last = run[-1][0]
    made = {layer.out for _, layer in run}
    # (read after the run, or returned)
    exports = [
        layer.out for _, layer in run if last_reads.get(layer.out, -1) > last or layer.out in keep
    ]
    inputs: list[int] = []
    for _, layer in run:
        for slot in layer.step.reads:
            if slot not in made and slot not in inputs and not plan.is_constant(slot):
                inputs.append(slot)
    frees = []
    for _, layer in run:
        frees += [s for s in layer.step.frees if s not in made or s in exports]
    layers = [layer for _, layer in run]
    first = layers[0].step
    fn = ChainStep(plan, layers, inputs, exports)
    return [
        Step(
            node=first.node,
            fn=fn,
            takes_ctx=False,
            attrs={},
            n_outputs=len(exports),
            outputs_wanted=(True,) * len(exports),
            opset=first.opset,
            n_inputs=len(inputs),
            ins=tuple(inputs),
            outs=tuple(exports),
            frees=tuple(dict.fromkeys(frees)),
            reads=tuple(inputs),
        )
    ]


# -- running ----------------------------------------------------------------------------------


class ChainStep:
    """The kernel of a run of layers: fn(*inputs) -> its exported values (a tuple where more
    than one), set up per input signature."""

    def __init__(self, plan, layers: list[_Layer], inputs: list[int], exports: list[int]):
        self.plan, self.layers, self.inputs, self.exports = plan, layers, inputs, exports
        #: per layer: the values it is the last to read that only the run reads (dropped
        #: after it when the layers run one by one: a layer's kept output is written again
        #: only once nothing else holds it, nhwc.NhwcConv._output)
        self.lives = lives = _lifetimes(layers, set(exports) | set(inputs))
        self.drops = [
            [s for s, (_, dies) in lives.items() if dies == j] for j in range(len(layers))
        ]
        #: signature -> ChainSetup, or None where some layer has no native path for it
        self.setups: dict = {}
        self.last = None  # (the last set-up used: most runs repeat their signature)

    def __call__(self, *xs):
        s = self.last
        if s is None or not s.fits(xs):
            s = self._setup_for(xs)
            if s is None:
                return self.one_by_one(xs)
        return s.run(xs)

    def _setup_for(self, xs):
        from .native import thread_setting

        if not all(x.__class__ is np.ndarray for x in xs):
            return None
        key = (thread_setting(), *((x.shape, x.strides, x.dtype.str) for x in xs))
        s = self.setups.get(key, _UNSEEN)  # (one look-up: another thread may clear it)
        if s is _UNSEEN:
            if len(self.setups) >= SIGNATURES:
                self.setups.clear()
            s = self.setups[key] = ChainSetup.make(self, xs, key[0])
            if s is not None:
                _give_back_kept(self.layers)
        self.last = s
        return s

    def one_by_one(self, xs) -> tuple | np.ndarray:
        """The run's own steps, each as the runner calls it."""
        values = dict(zip(self.inputs, xs))
        template = self.plan.template
        for layer, drops in zip(self.layers, self.drops):
            step = layer.step
            args = [
                None if i < 0 else (values[i] if i in values else template[i]) for i in step.ins
            ]
            try:
                r = step.fn(*args)
            except OnyxError:
                raise
            except Exception as e:
                raise self.plan.failure(step, args, e) from e
            values[layer.out] = r[0] if r.__class__ is tuple else r
            del args, r
            for slot in drops:
                del values[slot]
        if len(self.exports) == 1:
            return values[self.exports[0]]
        return tuple(values[e] for e in self.exports)


class ChainSetup:
    """A ChainStep's native program for one input signature."""

    __slots__ = (
        *("program", "sigs", "setting", "out_shapes", "out_sizes", "scratch"),
        *("scratch_bytes", "bases", "bases_at", "lock", "first_out", "convs"),
    )

    @classmethod
    def make(cls, chain: ChainStep, xs, setting: int):
        try:
            return cls(chain, xs, setting)
        except NoNativePath:
            return None

    def __init__(self, chain: ChainStep, xs, setting: int):
        from .native.nhwc_chain import NONE, ChainProgram

        nhwc = _Native.bind()
        self.setting = setting
        self.sigs = tuple((x.shape, x.strides) for x in xs)
        base_of = {slot: 1 + k for k, slot in enumerate(chain.inputs)}  # (0: the scratch)
        n_in = len(chain.inputs)
        out_base = {slot: 1 + n_in + k for k, slot in enumerate(chain.exports)}
        #: slot -> (shape, byte strides) of every value the chain reads or makes
        known = {slot: (x.shape, x.strides) for slot, x in zip(chain.inputs, xs)}
        for x in xs:
            if x.dtype != np.float32 or x.ndim != 4 or not x.size or min(x.strides) < 0:
                raise NoNativePath
        template = chain.plan.template
        tasks, self.convs = [], []
        for layer in chain.layers:
            shape, strides = known[layer.slots["X"]]
            task = layer_task(layer, shape, strides, template, known, nhwc, setting)
            self.convs.append(task[0])  # (the set-up owns the packed weights)
            out_shape = task[-1]
            known[layer.out] = (out_shape, _contiguous(out_shape))
            tasks.append(task)
        offsets, self.scratch_bytes = lay_out(chain.lives, known)
        if self.scratch_bytes > KEPT_SCRATCH:
            raise NoNativePath
        self.out_shapes = [known[s][0] for s in chain.exports]
        self.out_sizes = [math.prod(s) for s in self.out_shapes]

        def ref(slot: int) -> tuple:
            if slot < 0:
                return NONE
            if slot in base_of:
                return (base_of[slot], 0)
            if slot in out_base:
                return (out_base[slot], 0)
            return (0, offsets[slot])

        steps = []
        for layer, (_owner, task_struct, cuts, parts, ways, _) in zip(chain.layers, tasks):
            refs = [ref(layer.slots[r]) if r in layer.slots else NONE for r in "XSZ"]
            x_ref, s_ref, z_ref = refs
            steps.append((task_struct, cuts, parts, ways, (x_ref, ref(layer.out), s_ref, z_ref)))
        sizes = [max(self.scratch_bytes, 4)]
        sizes += [_span_bytes(x) for x in xs]
        sizes += [4 * n for n in self.out_sizes]
        self.program = ChainProgram(steps, sizes)
        self.bases = np.zeros(len(sizes), np.int64)
        self.bases_at = self.bases.ctypes.data
        self.first_out = 1 + n_in
        self.scratch = _kept_scratch_of(self.scratch_bytes)
        if self.scratch is not None:
            self.bases[0] = self.scratch.ctypes.data
        self.lock = threading.Lock()

    def fits(self, xs) -> bool:
        if _Native.setting() != self.setting or len(xs) != len(self.sigs):
            return False
        for x, (shape, strides) in zip(xs, self.sigs):
            if x.__class__ is not np.ndarray or x.dtype != _F32:
                return False
            if x.shape != shape or x.strides != strides:
                return False
        return True

    def run(self, xs):
        aligned, base_addr = _Native.aligned, _Native.base_addr
        outs = [aligned(shape, size) for shape, size in zip(self.out_shapes, self.out_sizes)]
        mine = self.scratch is not None and self.lock.acquire(False)
        try:
            if mine:
                bases, at = self.bases, self.bases_at
            else:  # (another thread runs the kept scratch: one of this run's own)
                bases, scratch = self.bases.copy(), _aligned_bytes(self.scratch_bytes)
                bases[0], at = scratch.ctypes.data, bases.ctypes.data
            for k, x in enumerate(xs):
                bases[1 + k] = base_addr(x)
            for k, (_, address) in enumerate(outs):
                bases[self.first_out + k] = address
            self.program.run_at(at)
        finally:
            if mine:
                self.lock.release()
        if len(outs) == 1:
            return outs[0][0]
        return tuple(y for y, _ in outs)


class _Native:
    """The native module's functions a set-up and its calls use, bound at the first set-up
    (not at import: the library loads later; and an import statement in a function costs
    each call a look-up)."""

    setting = aligned = base_addr = check_sizes = mean_setup = conv_geometry = None
    nhwc = None

    @classmethod
    def bind(cls):
        """The nhwc module (its names bound here once)."""
        if cls.nhwc is None:
            from .kernels.conv_geometry import _conv_geometry
            from .native import nhwc, thread_setting
            from .native._core import _check_sizes
            from .native.nhwc import _aligned, _base_addr, _mean_setup

            cls.setting, cls.aligned, cls.base_addr = thread_setting, _aligned, _base_addr
            cls.check_sizes, cls.mean_setup = _check_sizes, _mean_setup
            cls.conv_geometry, cls.nhwc = _conv_geometry, nhwc
        return cls.nhwc


_UNSEEN = object()
_F32 = np.dtype(np.float32)


class NoNativePath(Exception):
    """A layer has no native path for this signature (its steps then run one by one)."""


@functools.lru_cache(maxsize=1024)
def _contiguous(shape: tuple) -> tuple:
    strides, step = [], 4
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def _span_bytes(x: np.ndarray) -> int:
    """The bytes x covers from its first element (strides not negative)."""
    return 4 + sum((d - 1) * s for d, s in zip(x.shape, x.strides))


def _aligned_bytes(n: int) -> np.ndarray:
    """A scratch of n bytes (4 at least) on a 64-byte line."""
    return aligned_empty((max(n, 4),), np.uint8)


def _kept_scratch_of(n: int) -> np.ndarray | None:
    """A set-up's kept scratch of n bytes, counted in KEPT_SCRATCH_ALL until it is freed;
    None where the chains' kept scratch would pass it."""
    n = max(n, 4)
    with _KEPT_LOCK:
        if _kept_scratch[0] + n > KEPT_SCRATCH_ALL:
            return None
        _kept_scratch[0] += n
    try:
        scratch = _aligned_bytes(n)
    except BaseException:  # (MemoryError: counted, never kept)
        _give_back_scratch(n)
        raise
    weakref.finalize(scratch, _give_back_scratch, n)
    return scratch


def _give_back_scratch(n: int) -> None:
    with _KEPT_LOCK:
        _kept_scratch[0] -= n


def _give_back_kept(layers: list[_Layer]) -> None:
    """The layers' own kernels let go of their kept outputs (nhwc.NhwcConv's, counted in a
    process-wide budget): the chain runs these layers from now on, and a checked first run
    that ran them one by one would otherwise hold its share for the session's life."""
    for layer in layers:
        give_back = getattr(getattr(layer.step.fn, "fn", None), "give_back", None)
        if give_back is not None:
            give_back()


def layer_task(layer: _Layer, shape, strides, template, known, nhwc, setting: int) -> tuple:
    """(owner, task struct, cuts, parts, ways, output shape) of one layer on an input of this
    shape and byte strides, as its kernel sets it up under this thread setting; NoNativePath
    where it does not apply."""
    _Native.bind()
    if layer.op == "NhwcGlobalAveragePool":
        if strides != _contiguous(shape):
            raise NoNativePath
        task, cuts, ways = _Native.mean_setup(tuple(shape), setting)
        return task, task, cuts, len(cuts) - 1, ways, (shape[0], 1, 1, shape[3])
    W = template[layer.slots["W"]]
    b_slot = layer.slots.get("B", -1)
    B = template[b_slot] if b_slot >= 0 else None
    if layer.code is None or W.ndim != 4 or any(s % 4 for s in strides):
        raise NoNativePath
    C = shape[3]
    M, Cg = W.shape[:2]
    group = layer.group
    depthwise = group == C == M and Cg == 1
    if not (depthwise or (group == 1 and Cg == C)):
        raise NoNativePath
    if B is not None and B.shape != (M,):
        raise NoNativePath
    conv = _own_set_up(layer, shape, strides, W, B, setting)
    if conv is None:
        conv = _new_set_up(layer, shape, strides, W, B, nhwc)
    kind = conv.task.kind
    # (nhwc.c's depthwise kernels step a pixel by C floats: the channels and the pixels of a
    # row contiguous, whatever the task's xs_w says)
    if kind == nhwc.DEPTHWISE and (strides[3] != 4 or strides[2] != 4 * C):
        raise NoNativePath
    if kind == nhwc.POINTWISE and strides != _contiguous(shape):
        raise NoNativePath
    _extras(layer, conv, shape, known, nhwc)
    return conv, conv.task, conv.cuts, conv.parts, conv.ways, conv.shape


def _own_set_up(layer: _Layer, shape, strides, W, B, setting: int):
    """The layer's own kernel's native set-up where it is the one this chain would make (the
    first, checked run called the layer on an input of this shape and strides, with these
    W and B, under this thread setting: the same geometry, packing, work split and task),
    else None. A chain's first set-up then costs no conv set-up of its own."""
    prepared = getattr(layer.step, "fn", None)  # (a PreparedCall: its fn, channels_last's)
    last = getattr(getattr(prepared, "fn", None), "last", None)
    bound = last[0] if last is not None else None
    if bound is None or bound.copies or bound.setting != setting:
        return None
    conv = bound.conv
    if conv is None or conv.x_shape != shape or conv.x_strides != strides:
        return None
    if bound.w() is not W or bound.b() is not B:
        return None
    return conv


def _new_set_up(layer: _Layer, shape, strides, W, B, nhwc):
    """The layer's native conv set up for an input of this shape and byte strides (as its
    kernel would set it up); NoNativePath where the geometry does not apply."""
    N, H, Wd, C = shape
    try:
        _Native.check_sizes("conv", *shape, *W.shape)
        geo = _Native.conv_geometry((N, C, H, Wd), W.shape, *layer.geometry)
    except Exception:  # (the layer's own kernel reports it, one by one)
        raise NoNativePath from None
    if min(geo["pads"]) < 0 or min(geo["out_shape"]) <= 0:
        raise NoNativePath
    conv = nhwc.NhwcConv(shape, W, B, geo, layer.code, layer.group)
    conv.set_strides(strides)
    return conv


def _extras(layer: _Layer, conv, shape, known, nhwc) -> None:
    """NoNativePath unless the layer's S and Z are as the native conv takes them."""
    s_slot, z_slot = layer.slots.get("S", -1), layer.slots.get("Z", -1)
    if s_slot >= 0:
        s_shape, s_strides = known.get(s_slot, (None, None))
        want = (shape[0], 1, 1, shape[3])
        if conv.task.kind != nhwc.POINTWISE or s_shape != want:
            raise NoNativePath
        if s_strides != _contiguous(want) and shape[0] * shape[3] > 1:
            raise NoNativePath
    if z_slot >= 0:
        z_shape, z_strides = known.get(z_slot, (None, None))
        if z_shape != conv.shape or z_strides != _contiguous(z_shape):
            raise NoNativePath


def _lifetimes(layers: list[_Layer], outside: set[int]) -> dict[int, tuple[int, int]]:
    """slot -> (the index of its layer, the index of its last reader) for each value the run
    makes and keeps to itself."""
    lives = {}
    for j, layer in enumerate(layers):
        if layer.out not in outside:
            lives[layer.out] = (j, j)
        for slot in layer.slots.values():
            if slot in lives:
                lives[slot] = (lives[slot][0], j)
    return lives


def lay_out(lives: dict, known: dict) -> tuple[dict[int, int], int]:
    """Byte offsets in one scratch for the values of ``lives`` (two whose lives overlap, a
    layer's output and its inputs included, never share a byte), and the scratch's size."""
    placed: list[tuple[int, int, int]] = []  # (offset, end, last reader)
    offsets, top = {}, 0
    for slot, (born, dies) in sorted(lives.items(), key=lambda kv: kv[1][0]):
        size = -(-4 * math.prod(known[slot][0]) // ALIGNMENT) * ALIGNMENT
        live = sorted((o, e) for o, e, d in placed if d >= born)
        offset = 0
        for o, e in live:
            if offset + size <= o:
                break
            offset = max(offset, e)
        placed.append((offset, offset + size, dies))
        offsets[slot] = offset
        top = max(top, offset + size)
    return offsets, top
