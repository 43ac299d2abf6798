"""Sweep one-node models over the numeric types against onnxruntime (a bug finder, not a test).

    python scripts/zoo/sweep_ops.py

Each case is one node on seeded data in every type onnxruntime has a kernel for (models whose
strict shape inference or onnxruntime session fails are skipped); prints what differs: values
beyond 1e-5 (fp16: 1e-2), another shape or type, or an onyx error. Found the ReduceLogSumExp
unsigned-integer bug (docs/compatibility.md).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from onyx.runtime.session import InferenceSession

warnings.filterwarnings("ignore")
RNG = np.random.default_rng(0)
TYPES = {np.float32: T.FLOAT, np.float64: T.DOUBLE, np.float16: T.FLOAT16, np.int8: T.INT8,
         np.uint8: T.UINT8, np.int16: T.INT16, np.uint16: T.UINT16, np.int32: T.INT32,
         np.int64: T.INT64, np.uint32: T.UINT32, np.uint64: T.UINT64}  # fmt: skip
UNARY = ["Abs", "Neg", "Relu", "Sign", "Ceil", "Floor", "Round", "Exp", "Sqrt", "Reciprocal",
         "Sigmoid", "Tanh", "Softplus", "Erf", "IsNaN", "Identity", "Cos", "Sin", "Log",
         "HardSwish", "Mish"]  # fmt: skip
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Greater", "LessOrEqual",
          "Equal", "BitShift", "BitwiseAnd", "PRelu"]  # fmt: skip
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2",
          "ReduceLogSumExp", "ReduceSumSquare"]  # fmt: skip


def data(dtype, shape) -> np.ndarray:
    if np.issubdtype(dtype, np.floating):
        return (RNG.standard_normal(shape) * 3).astype(dtype)
    info = np.iinfo(dtype)
    return RNG.integers(max(info.min, -50), min(info.max, 50), shape).astype(dtype)


def check(name: str, node, inputs: dict, inits=(), opset: int = 18) -> str | None:
    """Why onyx differs from onnxruntime on the one-node model, '' when it agrees, None when
    the case does not apply (onnxruntime or strict inference rejects it)."""
    vis = [h.make_tensor_value_info(k, h.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in inputs.items()]  # fmt: skip
    outs = [h.make_tensor_value_info(o, 0, None) for o in node.output]
    model = h.make_model(h.make_graph([node], "g", vis, outs, list(inits)),
                         opset_imports=[h.make_opsetid("", opset)])  # fmt: skip
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        inferred = {v.name: v for v in model.graph.value_info}
        for o in model.graph.output:
            o.CopyFrom(inferred.get(o.name, o))
        data_ = model.SerializeToString()
        expected = ort.InferenceSession(data_, providers=["CPUExecutionProvider"]).run(None, inputs)
    except Exception:
        return None
    try:
        actual = InferenceSession(data_).run(None, inputs)
    except Exception as e:
        return f"onyx fails: {type(e).__name__}: {e}"[:200]
    for e, a in zip(expected, actual):
        e, a = np.asarray(e), np.asarray(a)
        if e.shape != a.shape or e.dtype != a.dtype:
            return f"shape/type {a.shape} {a.dtype}, expected {e.shape} {e.dtype}"
        if e.dtype.kind == "f":
            tol = 1e-2 if e.dtype == np.float16 else 1e-5
            if not np.allclose(
                a.astype(float), e.astype(float), rtol=tol, atol=tol, equal_nan=True
            ):
                return (
                    f"values differ by {np.nanmax(np.abs(a.astype(float) - e.astype(float))):.3g}"
                )
        elif not np.array_equal(a, e):
            return f"{int((a != e).sum())} values differ"
    return ""


def cases():
    axes = nh.from_array(np.array([0, 2], np.int64), "axes")
    for dtype in TYPES:
        x, y = data(dtype, (2, 3, 4)), data(dtype, (3, 1))
        if not np.issubdtype(dtype, np.floating):
            y = np.where(y == 0, 3, y).astype(dtype)
        small = (np.abs(y) % 5).astype(dtype)
        for op in UNARY:
            yield f"{op}:{dtype.__name__}", h.make_node(op, ["x"], ["z"]), {"x": x}, ()
        for op in BINARY:
            attrs = {"direction": "LEFT"} if op == "BitShift" else {}
            other = small if op in ("BitShift", "Pow") else y
            yield (f"{op}:{dtype.__name__}", h.make_node(op, ["x", "y"], ["z"], **attrs),
                   {"x": x, "y": other}, ())  # fmt: skip
        for op in REDUCE:
            yield (f"{op}:{dtype.__name__}", h.make_node(op, ["x", "axes"], ["z"], keepdims=1),
                   {"x": x}, (axes,))  # fmt: skip


def main() -> None:
    tried = differ = 0
    for name, node, inputs, inits in cases():
        why = check(name, node, inputs, inits)
        if why is None:
            continue
        tried += 1
        if why:
            differ += 1
            print(f"{name}: {why}")
    print(f"{tried} cases against onnxruntime, {differ} differ")


if __name__ == "__main__":
    main()
