"""The geometry of windowed ops (conv, pooling): attribute defaults, auto_pad, the checks of
the window sizes and the output shape, without numpy. kernels/conv.py (which re-exports these
names) imports much; the channels-last kernels (channels_last.py) need only this, so a model
whose convs all run channels-last never imports conv.py."""

from __future__ import annotations

import math
import os


def spatial_defaults(n: int, strides, dilations, pads) -> tuple[list[int], list[int], list[int]]:
    """strides, dilations (ones) and pads (zeros, 2n long) with the spec's defaults filled in."""
    return (
        list(strides) if strides else [1] * n,
        list(dilations) if dilations else [1] * n,
        list(pads) if pads else [0] * (2 * n),
    )


#: The longest padded axis a windowed op (conv, pooling) takes: beyond, its sizes come from a
#: broken or hostile model (dilations near 2**32, kernels near 2**63), and the native kernels
#: (checks.h) would refuse them too.
MAX_EXTENT = 1 << 30
#: The most cells of one padded image (the product of the padded axes).
MAX_PADDED = 1 << 36
#: The most window taps (outputs x kernel cells) a pooling op may read: its kernel is an
#: attribute, bounded by no tensor.
MAX_TAPS = 1 << 40


def check_window_attributes(op: str, n: int, kernel, strides, dilations, pads) -> None:
    """ValueError naming op and the attribute unless kernel, strides and dilations are n
    positive sizes and pads 2n, all within MAX_EXTENT (the plan reports it as the node's)."""
    if len(kernel) == len(strides) == len(dilations) == n and len(pads) == 2 * n:
        for k, s, d in zip(kernel, strides, dilations):  # (every call: one cheap loop)
            if not (0 < k <= MAX_EXTENT and 0 < s <= MAX_EXTENT and 0 < d <= MAX_EXTENT):
                break
        else:
            if not pads or (min(pads) >= -MAX_EXTENT and max(pads) <= MAX_EXTENT):
                return
    for name, values, least, count in (
        ("kernel_shape", kernel, 1, n),
        ("strides", strides, 1, n),
        ("dilations", dilations, 1, n),
        ("pads", pads, None, 2 * n),
    ):
        values = list(values)
        if len(values) != count:
            raise ValueError(f"{op}: {name} {values} should have {count} values")
        for v in values:
            if (least is not None and v < least) or abs(v) > MAX_EXTENT:
                limit = f"in [{least}, 2**30]" if least is not None else "within +-2**30"
                raise ValueError(f"{op}: {name} {values} out of range: each must be {limit}")


def check_windows(op: str, in_shape, kernel, strides, dilations, pads, out_shape) -> None:
    """ValueError naming op unless every window fits its padded input (no negative output
    size) and the padded axes stay within MAX_EXTENT and MAX_PADDED."""
    n = len(in_shape)
    cells, fits = 1, True
    for i in range(n):  # (every call: one cheap loop)
        reach = (out_shape[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1
        extent = max(in_shape[i] + pads[i] + pads[n + i], reach)
        cells *= extent
        fits = fits and out_shape[i] >= 1 and extent <= MAX_EXTENT
    if fits and cells <= MAX_PADDED:
        return
    padded = [in_shape[i] + pads[i] + pads[n + i] for i in range(n)]
    reach = [(out_shape[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 for i in range(n)]
    extents = [max(p, r) for p, r in zip(padded, reach)]
    eff = effective_kernel(kernel, dilations)
    for i in range(n):
        if out_shape[i] < 0 or (out_shape[i] == 0 and in_shape[i] > 0 and padded[i] < eff[i]):
            raise ValueError(
                f"{op}: the window along spatial axis {i} ({eff[i]} cells: kernel_shape "
                f"{list(kernel)}, dilations {list(dilations)}) is larger than the padded input "
                f"({padded[i]} cells)"
            )
    if max(extents, default=0) > MAX_EXTENT or math.prod(extents) > MAX_PADDED:
        raise ValueError(
            f"{op}: the padded input would be {' x '.join(map(str, extents))} cells (pads "
            f"{list(pads)}, dilations {list(dilations)}): more than onyx takes (2**30 per "
            f"axis, 2**36 in all)"
        )


#: Buffers smaller than this are never checked against the machine's memory (the check's two
#: system calls would cost more than such an allocation).
CHECKED_BYTES = 1 << 30


def memory_bytes() -> int:
    """The most memory this process could ever hold: the machine's physical memory, or less
    under an address-space limit (RLIMIT_AS)."""
    try:
        most = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # (not on every platform)
        most = 1 << 62
    try:
        import resource
    except ImportError:  # (Windows)
        return most
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    return most if soft == resource.RLIM_INFINITY else min(most, soft)


def check_buffer(op: str, what: str, shape, itemsize: int) -> None:
    """ValueError naming op unless a buffer of ``shape`` could be allocated at all: a
    fuzzed model's strides or output_shape asked a ConvTranspose for hundreds of gigabytes,
    which numpy's allocation refuses (a MemoryError) or, under overcommit, grants until the
    kernel is killed for memory as it writes."""
    size = math.prod(shape) * itemsize
    if size <= CHECKED_BYTES:
        return
    limit = memory_bytes()
    if size > limit:
        raise ValueError(
            f"{op}: the {what} would be {size} bytes ({list(shape)}), more than the {limit} "
            "bytes of memory this process can have"
        )


def group_problem(x_shape, w_shape, group, transpose: bool = False) -> str | None:
    """Why ``group`` cannot split a convolution's channels (X's, and W's (M, C / group, ...);
    a ConvTranspose's W is (C, M / group, ...)), or None. Each kernel would otherwise fail in
    numpy's words (a reshape) or read past a group."""
    if len(x_shape) < 3 or len(w_shape) < 3:
        return None  # (the geometry names a wrong rank)
    if group < 1:
        return f"group {group} must be at least 1"
    return channel_group_problem(x_shape[1], w_shape, group, transpose)


def channel_group_problem(channels, w_shape, group: int, transpose: bool) -> str | None:
    """group_problem's rule for X's channel count and W's shape, either None where unknown
    (the checker's declared shapes: unknown dims pass, the kernels check them at run)."""
    if transpose:
        if w_shape is not None and channels is not None and channels != w_shape[0]:
            return f"X has {channels} channels, W {list(w_shape)} takes {w_shape[0]}"
        channels = w_shape[0] if w_shape is not None else channels
        if channels is not None and channels % group:
            return f"group {group} does not divide the {channels} input channels"
        return None
    if w_shape is None:
        return None
    if w_shape[0] % group:
        return f"group {group} does not divide W's {w_shape[0]} output channels ({list(w_shape)})"
    if channels is not None and channels != w_shape[1] * group:
        return (
            f"X has {channels} channels, W {list(w_shape)} takes {w_shape[1]} per group x "
            f"group {group} = {w_shape[1] * group}"
        )
    return None


def check_groups(op: str, x_shape, w_shape, group, transpose: bool = False) -> None:
    """ValueError naming op where :func:`group_problem` finds one (the plan reports it as the
    node's)."""
    if group == 1 and x_shape[1:2] == (w_shape[:1] if transpose else w_shape[1:2]):
        return  # (the common case, at every call: one comparison)
    wrong = group_problem(x_shape, w_shape, group, transpose)
    if wrong:
        raise ValueError(f"{op}: {wrong}")


def effective_kernel(kernel, dilations) -> list[int]:
    """Extent of a dilated kernel: (k - 1) * d + 1."""
    return [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]


def same_pads(auto_pad: str, total: list[int]) -> list[int]:
    """Split total paddings per SAME_UPPER (extra at the end) or SAME_LOWER (extra at the start)."""
    if auto_pad == "SAME_UPPER":
        begin = [t // 2 for t in total]
    else:
        begin = [t - t // 2 for t in total]
    return begin + [t - b for t, b in zip(total, begin)]


def conv_pads(auto_pad: str, in_shape, kernel, strides, dilations, pads) -> list[int]:
    """Explicit [begins..., ends...] pads of a forward convolution for any auto_pad mode."""
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        eff = effective_kernel(kernel, dilations)
        out = [-(-i // s) for i, s in zip(in_shape, strides)]
        total = [max(0, (o - 1) * s + e - i) for o, s, e, i in zip(out, strides, eff, in_shape)]
        return same_pads(auto_pad, total)
    if auto_pad == "VALID":
        return [0] * (2 * len(in_shape))
    return list(pads)


def conv_out_shape(in_shape, kernel, strides, dilations, pads) -> list[int]:
    n = len(in_shape)
    eff = effective_kernel(kernel, dilations)
    return [(in_shape[i] + pads[i] + pads[n + i] - eff[i]) // strides[i] + 1 for i in range(n)]


#: The conv attributes in the integer conv kernels' order (their ``attrs`` tuples).
CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _conv_geometry(
    x_shape, w_shape, auto_pad, pads, strides, dilations, kernel_shape, op: str = "Conv"
):
    n = len(x_shape) - 2
    kernel = list(kernel_shape) if kernel_shape else list(w_shape[2:])
    if kernel_shape and len(w_shape) == n + 2 and kernel != list(w_shape[2:]):
        # (the kernels read W by its own shape and others by the attribute: onnxruntime refuses
        # the pair too)
        raise ValueError(f"{op}: kernel_shape {kernel} does not match W's {list(w_shape[2:])}")
    strides, dilations, pads = spatial_defaults(n, strides, dilations, pads)
    check_window_attributes(op, n, kernel, strides, dilations, pads)
    pads = conv_pads(auto_pad, x_shape[2:], kernel, strides, dilations, pads)
    out_shape = conv_out_shape(x_shape[2:], kernel, strides, dilations, pads)
    check_windows(op, x_shape[2:], kernel, strides, dilations, pads, out_shape)
    return dict(pads=pads, strides=strides, dilations=dilations, out_shape=out_shape)


def conv_key(*attributes) -> tuple:
    """A conv's geometry attributes as a hashable ``attrs`` (native_conv_f32's: auto_pad,
    pads, strides, dilations, kernel_shape)."""
    return tuple(tuple(v) if isinstance(v, list) else v for v in attributes)
