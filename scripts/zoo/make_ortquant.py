"""onnxruntime's quantizer and onnxconverter_common's fp16 converter on small float models.

- dynamic quantization (``quantize_dynamic``): an LSTM model (DynamicQuantizeLSTM) and an MLP
  (MatMulInteger / DynamicQuantizeLinear), per tensor and per channel;
- static quantization, QDQ format with per-channel weights, and QOperator format (QLinearConv,
  QGemm, QLinearAdd/Mul, QLinearConcat, QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax,
  QLinearAveragePool, QLinearGlobalAveragePool, ...), calibrated on seeded data;
- fp16 conversion with keep_io_types (Casts at the graph's edges), by onnxconverter_common and
  by onnxruntime.transformers (whose Casts come out of topological order).

Runs in its own venv (build.sh: onnx, onnxruntime, onnxconverter-common).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from stage import stage

RNG = np.random.default_rng(3)


def _w(name, *shape, scale=0.3):
    return nh.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits, opset=17):
    graph = h.make_graph(nodes, "g", inputs, outputs, inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=9)


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return h.make_tensor_value_info(name, dtype, shape)


def vision_model() -> onnx.ModelProto:
    """The ops static quantization maps to QLinear* / QGemm, each on a [N, 3, 16, 16] image."""
    n = h.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=4),
        n("LeakyRelu", ["c2"], ["l2"], alpha=0.1),
        n("Add", ["l2", "r1"], ["a2"]),
        n("Sigmoid", ["a2"], ["s2"]),
        n("Mul", ["a2", "s2"], ["m2"]),
        n("MaxPool", ["m2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        n("AveragePool", ["m2"], ["q2"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Concat", ["p2", "q2"], ["cat"], axis=1),
        n("Resize", ["cat", "", "scales"], ["up"], mode="nearest"),
        n("Conv", ["up", "w3", "b3"], ["c3"], strides=[2, 2], pads=[1, 1, 1, 1]),
        # (no Where: onnxruntime 1.32's QOperator quantizer loses its inputs' float names;
        # QLinearWhere is tested on its own in tests/test_compat_leniency.py)
        n("GlobalAveragePool", ["c3"], ["g"]),
        n("Flatten", ["g"], ["f"]),
        n("Gemm", ["f", "wg", "bg"], ["logits"], transB=1),
        n("Softmax", ["logits"], ["prob"], axis=-1),
    ]
    inits = [_w("w1", 8, 3, 3, 3), _w("b1", 8, scale=0.1), _w("w2", 8, 2, 3, 3),
             _w("b2", 8, scale=0.1), _w("w3", 16, 16, 3, 3, scale=0.1), _w("b3", 16, scale=0.1),
             nh.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             _w("wg", 10, 16), _w("bg", 10, scale=0.1)]  # fmt: skip
    return _model(nodes, [_vi("x", ["N", 3, 16, 16])], [_vi("prob", ["N", 10])], inits)


def lstm_model() -> onnx.ModelProto:
    nodes = [
        h.make_node(
            "LSTM",
            ["x", "W", "R", "B"],
            ["y", "yh", "yc"],
            hidden_size=32,
            direction="bidirectional",
        ),  # fmt: skip
        h.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),
        h.make_node("Reshape", ["yt", "shape"], ["flat"]),
        h.make_node("MatMul", ["flat", "head"], ["out"]),
    ]
    inits = [_w("W", 2, 128, 16), _w("R", 2, 128, 32), _w("B", 2, 256, scale=0.1),
             nh.from_array(np.array([0, 0, 64], np.int64), "shape"), _w("head", 64, 6)]  # fmt: skip
    return _model(nodes, [_vi("x", [12, "N", 16])], [_vi("out", [12, "N", 6])], inits)


def mlp_model() -> onnx.ModelProto:
    nodes = [
        h.make_node("MatMul", ["x", "w1"], ["h1"]),
        h.make_node("Add", ["h1", "b1"], ["h2"]),
        h.make_node("Relu", ["h2"], ["h3"]),
        h.make_node("MatMul", ["h3", "w2"], ["y"]),
    ]
    inits = [_w("w1", 24, 48), _w("b1", 48, scale=0.1), _w("w2", 48, 8)]
    return _model(nodes, [_vi("x", ["N", 24])], [_vi("y", ["N", 8])], inits)


class _Reader(CalibrationDataReader):
    def __init__(self, name: str, shape):
        self.batches = iter([{name: RNG.standard_normal(shape).astype(np.float32)}
                             for _ in range(8)])  # fmt: skip

    def get_next(self):
        return next(self.batches, None)


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    image = {"x": RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)}
    seq = {"x": RNG.standard_normal((12, 3, 16)).astype(np.float32)}
    rows = {"x": RNG.standard_normal((5, 24)).astype(np.float32)}
    floats = {"vision": (vision_model(), image), "lstm": (lstm_model(), seq),
              "mlp": (mlp_model(), rows)}  # fmt: skip
    for name, (model, feeds) in floats.items():
        src = tmp / f"{name}.onnx"
        onnx.save(model, src)
        stage("float-reference", name, model, feeds)
        if name != "vision":
            for per_channel in (False, True):
                out = tmp / f"{name}_dyn{per_channel}.onnx"
                quantize_dynamic(src, out, weight_type=QuantType.QInt8, per_channel=per_channel)
                tag = "perchannel" if per_channel else "pertensor"
                stage("ort-quant-dynamic", f"{name}_{tag}", out, feeds, kind="quantized")
        shape = (4, *feeds["x"].shape[1:]) if name != "lstm" else (12, 4, 16)
        for fmt, per_channel, tag in ((QuantFormat.QDQ, True, "qdq_perchannel"),
                                      (QuantFormat.QOperator, False, "qoperator"),
                                      (QuantFormat.QOperator, True, "qoperator_perchannel")):  # fmt: skip
            if name == "lstm" and fmt == QuantFormat.QOperator:
                continue  # (static LSTM quantization is dynamic's DynamicQuantizeLSTM)
            out = tmp / f"{name}_{tag}.onnx"
            quantize_static(src, out, _Reader("x", shape), quant_format=fmt,
                            per_channel=per_channel, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8)  # fmt: skip
            stage("ort-quant-static", f"{name}_{tag}", out, feeds, kind="quantized")
        from onnxconverter_common import float16

        half = float16.convert_float_to_float16(model, keep_io_types=True)
        stage("fp16-converter", f"{name}_keep_io", half, feeds, kind="fp16")
        # onnxruntime.transformers' converter appends the Casts it adds at the end of the node
        # list (out of topological order: onnxruntime sorts, and so does onyx)
        from onnxruntime.transformers.float16 import convert_float_to_float16

        for blocked in (None, ["Softmax", "LSTM"]):
            half = convert_float_to_float16(model, keep_io_types=True, op_block_list=blocked)
            tag = "keep_io" if blocked is None else "keep_io_blocked"
            stage("fp16-ort-transformers", f"{name}_{tag}", half, feeds, kind="fp16")


if __name__ == "__main__":
    main()
