"""Dev-time: build the bundled example model onyx/examples/tiny_cnn.onnx (needs onnx).

A small image classifier (Conv, BatchNormalization, Relu, MaxPool, GlobalAveragePool, Flatten,
Gemm, Softmax) with fixed pseudo-random weights and a symbolic batch dimension.
"""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parents[1] / "onyx" / "examples" / "tiny_cnn.onnx"


def main() -> None:
    rng = np.random.default_rng(0)

    def w(name, *shape, scale=0.3):
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    inits = [
        w("conv1.w", 8, 1, 3, 3),
        w("conv1.b", 8),
        numpy_helper.from_array(np.ones(8, np.float32), "bn.scale"),
        w("bn.bias", 8, scale=0.1),
        w("bn.mean", 8, scale=0.1),
        numpy_helper.from_array((rng.random(8) + 0.5).astype(np.float32), "bn.var"),
        w("conv2.w", 16, 8, 3, 3, scale=0.1),
        w("conv2.b", 16),
        w("fc.w", 10, 16),
        w("fc.b", 10),
    ]
    nodes = [
        helper.make_node(
            "Conv", ["image", "conv1.w", "conv1.b"], ["c1"], pads=[1, 1, 1, 1], name="conv1"
        ),
        helper.make_node(
            "BatchNormalization",
            ["c1", "bn.scale", "bn.bias", "bn.mean", "bn.var"],
            ["b1"],
            name="bn1",
        ),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node(
            "MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"
        ),
        helper.make_node(
            "Conv", ["p1", "conv2.w", "conv2.b"], ["c2"], pads=[1, 1, 1, 1], name="conv2"
        ),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], transB=1, name="fc"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 28, 28])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onyx-examples"
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    OUT.write_bytes(model.SerializeToString())
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
