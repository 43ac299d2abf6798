"""Quantization: ``onyx.quantize(model, mode=...)`` makes a smaller, faster model that onyx and
onnxruntime both run, in onnxruntime's formats.

    q = onyx.quantize("model.onnx", mode="static", calibration=feeds)   # QDQ, int8
    q = onyx.quantize(model, mode="dynamic")                            # MatMulInteger & co.
    q = onyx.quantize(model, mode="weight_only", weight_type="int4")    # MatMulNBits
    report = onyx.quantization.evaluate(model, q, held_out_feeds)

Modes: ``static`` calibrates activation ranges by running onyx on sample inputs and writes
QuantizeLinear/DequantizeLinear pairs (``format="qdq"``) or the fused integer operators
(``format="qoperator"``: QLinearConv, QLinearMatMul, com.microsoft QLinearAdd ...);
``dynamic`` quantizes weights ahead of time and activations at run time; ``weight_only``
quantizes MatMul weights blockwise to int4. See docs/quantization.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .. import ir
from ..errors import InvalidArgument
from .calibration import calibrate, read_feeds
from .params import qtype
from .report import Report, evaluate, sensitivity

__all__ = ["quantize", "preprocess", "evaluate", "sensitivity", "Report", "calibrate"]

MODES = ("static", "dynamic", "weight_only")
FORMATS = ("qdq", "qoperator")
#: Standard-op fusions that make a model quantize better (fewer, larger node units); the rest
#: of the optimizer's fusions write com.microsoft ops a portable model should not hold.
PREPROCESS_FUSIONS = (
    "ConvBNFusion",
    "ConvAddFusion",
    "ConvMulFusion",
    "BatchNormScaleFusion",
    "MatMulAddFusion",
)


def preprocess(model: Any) -> ir.Model:
    """A copy ready to quantize: basic optimizations (constant folding, dead code ...), the
    standard-op fusions above, and inferred shapes, as onnxruntime's quant_pre_process."""
    from ..debug.runners import as_model
    from ..inference import infer_shapes
    from ..optimizer import optimize, passes

    m = as_model(model)
    keep = set(passes("basic")) | set(PREPROCESS_FUSIONS)
    disabled = [p for p in passes("extended") if p not in keep]
    m = optimize(m, level="extended", disabled=disabled)
    # (element types are what quantization reads; data propagation mis-sizes a Reshape of
    # bert_torchscript_op17 after constant folding, a shape ORT then refuses to load)
    return infer_shapes(m)


def quantize(
    model: Any,
    mode: str = "static",
    format: str = "qdq",
    calibration: Any = None,
    method: str = "minmax",
    per_channel: bool = True,
    weight_type: Any = "int8",
    activation_type: Any = "uint8",
    op_types: Sequence[str] | None = None,
    nodes_to_exclude: Iterable[str] = (),
    symmetric: bool | None = None,
    reduce_range: bool = False,
    *,
    block_size: int = 32,
    weight_only_form: str = "matmulnbits",
    percentile: float = 99.999,
    progress: bool = True,
    ranges: dict[str, tuple[float, float]] | None = None,
    preprocessed: bool = False,
) -> ir.Model:
    """The quantized model (a new ir.Model; ``model`` is a path, bytes or an ir.Model).

    ``symmetric``: activations quantized symmetrically (weights of signed types always are).
    ``ranges``: activation ranges from an earlier calibration (skips calibrating again).
    """
    if mode not in MODES:
        raise InvalidArgument(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
    if format not in FORMATS:
        raise InvalidArgument(f"unknown format {format!r} (one of {', '.join(FORMATS)})")
    m = preprocess(model) if not preprocessed else _copy(model)
    excluded = set(nodes_to_exclude)
    if mode == "weight_only":
        from . import weight_only

        wt = qtype(weight_type)
        if wt not in ("int4", "uint4"):
            raise InvalidArgument(f"weight_only quantizes to int4 or uint4, not {wt}")
        nodes = _select(m, op_types or ("MatMul",), excluded)
        weight_only.apply(m, nodes, block_size, symmetric=wt == "int4", form=weight_only_form)
        return m
    if mode == "dynamic":
        from . import dynamic

        nodes = _select(m, op_types or dynamic.DEFAULT_OPS, excluded)
        fused = format == "qoperator"  # onnxruntime's fused com.microsoft DynamicQuantizeMatMul
        dynamic.apply(m, nodes, per_channel, qtype(weight_type), reduce_range, fused)
        return m
    return _static(
        m,
        format,
        calibration,
        method,
        per_channel,
        qtype(weight_type),
        qtype(activation_type),
        op_types,
        excluded,
        bool(symmetric),
        reduce_range,
        percentile,
        progress,
        ranges,
    )


def _static(
    m,
    format,
    calibration,
    method,
    per_channel,
    wt,
    at,
    op_types,
    excluded,
    symmetric,
    reduce_range,
    percentile,
    progress,
    ranges,
) -> ir.Model:
    from . import static

    if wt not in ("int8", "uint8") or at not in ("int8", "uint8"):
        raise InvalidArgument("static quantization takes 8-bit weight and activation types")
    nodes = _select(m, op_types or static.DEFAULT_OPS, excluded, static.RULES)
    p = static.plan(m.graph, nodes)
    if ranges is None:
        feeds = read_feeds(calibration)
        ranges = calibrate(m, feeds, p.tensors + list(p.shared), method, percentile, progress)
    settings = static.Settings(at, wt, per_channel, symmetric, wt == "int8", reduce_range)
    static.apply(m, p, ranges, settings)
    if format == "qoperator":
        m = to_qoperator(m)
    return m


def to_qoperator(model: ir.Model) -> ir.Model:
    """QDQ node units fused into QLinear* operators (onyx's optimizer, QDQ passes only)."""
    from ..optimizer import optimize, passes

    keep = set(passes("basic")) | {"QDQSelectorActionTransformer"}
    disabled = [p for p in passes("extended") if p not in keep]
    return optimize(model, level="extended", disabled=disabled)


def _select(m: ir.Model, op_types, excluded: set, rules=None) -> list[ir.Node]:
    ops = set(op_types)
    if rules is not None and (unknown := ops - set(rules)):
        raise InvalidArgument(
            f"op types {sorted(unknown)} cannot be quantized statically "
            f"(known: {', '.join(sorted(rules))})"
        )
    return [
        n
        for n in m.graph
        if n.op_type in ops and n.domain in ("", "ai.onnx") and n.name not in excluded
    ]


def _copy(model: Any) -> ir.Model:
    from ..debug.runners import as_model
    from ..optimizer.core import clone_model

    return clone_model(as_model(model))
