"""TensorFlow / Keras models through tf2onnx (opsets 13 and 17).

Runs in its own venv (build.sh: tensorflow-cpu, tf2onnx). tf2onnx writes Resize with
coordinate_transformation_mode='tf_half_pixel_for_nn' for UpSampling2D / nearest resizes,
which the spec removed at opset 13 and onnxruntime still runs (docs/compatibility.md).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf2onnx  # noqa: E402
from stage import stage  # noqa: E402

tf.keras.utils.set_random_seed(0)
RNG = np.random.default_rng(9)
L = tf.keras.layers


def vision():
    x = L.Input((24, 24, 3), name="image")
    y = L.Conv2D(8, 3, padding="same", activation="relu")(x)
    y = L.BatchNormalization()(y)
    y = L.DepthwiseConv2D(3, padding="same")(y)
    y = L.MaxPooling2D()(y)
    y = L.Conv2D(12, 3, strides=2, padding="same", activation="swish")(y)
    a = L.Resizing(12, 12, interpolation="nearest")(y)  # tf_half_pixel_for_nn
    b = L.Resizing(12, 12, interpolation="bilinear")(y)
    y = L.Concatenate()([a, b])
    y = L.Conv2DTranspose(6, 3, strides=2, padding="same")(y)
    pooled = L.GlobalAveragePooling2D()(y)
    out = L.Dense(5, activation="softmax")(pooled)
    return tf.keras.Model(x, [out, y]), {"image": RNG.random((2, 24, 24, 3), dtype=np.float32)}


def sequence():
    x = L.Input((10,), dtype="int32", name="tokens")
    y = L.Embedding(50, 16)(x)
    y = L.Bidirectional(L.LSTM(12, return_sequences=True))(y)
    y = L.GRU(8)(y)
    y = L.LayerNormalization()(y)
    out = L.Dense(3)(y)
    feeds = {"tokens": RNG.integers(0, 50, (3, 10)).astype(np.int32)}
    return tf.keras.Model(x, out), feeds


def audio():
    x = L.Input((400,), name="audio")
    spec = L.Lambda(lambda a: tf.abs(tf.signal.stft(a, 64, 16, fft_length=64)))(x)
    y = L.Lambda(lambda s: tf.math.log(s + 1e-6))(spec)
    y = L.Conv1D(8, 3, activation="relu")(y)
    out = L.GlobalMaxPooling1D()(y)
    return tf.keras.Model(x, out), {"audio": RNG.standard_normal((2, 400)).astype(np.float32)}


W_LOOP = np.random.default_rng(2).standard_normal((6, 6)).astype(np.float32) * 0.4


def control_flow(x):
    """tf.while_loop with a data-dependent trip count and tf.cond: Loop and If."""
    w = tf.constant(W_LOOP)  # (a constant made outside the function becomes an input)
    steps = tf.cast(tf.reduce_sum(tf.abs(x)) > 10.0, tf.int32) + 2
    _, y = tf.while_loop(lambda i, v: i < steps, lambda i, v: (i + 1, tf.tanh(v @ w)),
                         (tf.constant(0), x))  # fmt: skip
    return tf.cond(tf.reduce_mean(y) > 0, lambda: y * 2.0, lambda: y - 1.0)


def main() -> None:
    for name, make in (("vision", vision), ("sequence", sequence), ("audio", audio)):
        model, feeds = make()
        ((key, value),) = feeds.items()
        outs = model(value)
        outs = [np.asarray(o) for o in (outs if isinstance(outs, list | tuple) else [outs])]
        spec = [tf.TensorSpec((None, *value.shape[1:]), tf.as_dtype(value.dtype), name=key)]
        # from_function: tf2onnx's from_keras predates Keras 3
        fn = tf.function(lambda x, model=model: model(x), input_signature=spec)
        for opset in (13, 17):
            try:
                onx, _ = tf2onnx.convert.from_function(fn, input_signature=spec, opset=opset)
            except Exception as e:
                print(f"export failed: {name} opset {opset}: {type(e).__name__}: {e}"[:300])
                continue
            stage("tf2onnx", f"{name}_op{opset}", onx, feeds, framework=outs)
    x = np.random.default_rng(4).standard_normal((3, 6)).astype(np.float32)
    spec = [tf.TensorSpec((None, 6), tf.float32, name="x")]
    fn = tf.function(control_flow, input_signature=spec)
    for opset in (13, 17):
        onx, _ = tf2onnx.convert.from_function(fn, input_signature=spec, opset=opset)
        stage("tf2onnx", f"control_flow_op{opset}", onx, {"x": x},
              framework=[fn(tf.constant(x)).numpy()])  # fmt: skip


if __name__ == "__main__":
    main()
