"""JAX functions through jax2onnx (``to_onnx``), seeded random weights.

Runs in its own venv (build.sh: jax, jax2onnx).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax2onnx import to_onnx
from stage import stage

RNG = np.random.default_rng(13)
W1 = jnp.asarray(RNG.standard_normal((16, 32)).astype(np.float32) * 0.3)
W2 = jnp.asarray(RNG.standard_normal((32, 4)).astype(np.float32) * 0.3)
K = jnp.asarray(RNG.standard_normal((6, 3, 3, 3)).astype(np.float32) * 0.3)


def mlp(x):
    h = jax.nn.gelu(x @ W1)
    h = (h - h.mean(-1, keepdims=True)) / jnp.sqrt(h.var(-1, keepdims=True) + 1e-5)
    return jax.nn.softmax(h @ W2, axis=-1)


def conv(x):
    y = jax.lax.conv_general_dilated(x, K, (1, 1), "SAME")
    y = jax.nn.relu(y)
    return jnp.max(y, axis=(2, 3))


def scan(x):  # a cumulative recurrence: jax.lax.scan becomes a Loop / Scan
    def step(carry, v):
        carry = jnp.tanh(carry * 0.5 + v)
        return carry, carry

    _, ys = jax.lax.scan(step, jnp.zeros(x.shape[1:], x.dtype), x)
    return ys


WQ = jnp.asarray(RNG.standard_normal((3, 16, 16)).astype(np.float32) * 0.3)


def attention(x):  # causal single-head attention with a mask built in the graph
    q, k, v = (x @ WQ[i] for i in range(3))
    scores = q @ k.T / 4.0
    n = x.shape[0]
    causal = jnp.tril(jnp.ones((n, n), bool))
    scores = jnp.where(causal, scores, -1e9)
    return jax.nn.softmax(scores, axis=-1) @ v


def branch(x):  # jax.lax.cond: an If
    return jax.lax.cond(x.sum() > 0, lambda v: jnp.sin(v) * 2, lambda v: jnp.cos(v) - 1, x)


def loop(x):  # jax.lax.fori_loop: a Loop
    return jax.lax.fori_loop(0, 5, lambda i, v: jnp.tanh(v * 1.1 + i), x)


def main() -> None:
    cases = {
        "mlp": (mlp, RNG.standard_normal((5, 16)).astype(np.float32)),
        "conv": (conv, RNG.standard_normal((2, 3, 12, 12)).astype(np.float32)),
        "scan": (scan, RNG.standard_normal((7, 4)).astype(np.float32)),
        "attention": (attention, RNG.standard_normal((6, 16)).astype(np.float32)),
        "cond": (branch, RNG.standard_normal((3, 4)).astype(np.float32)),
        "fori_loop": (loop, RNG.standard_normal((3, 4)).astype(np.float32)),
    }
    for name, (fn, x) in cases.items():
        fw = [np.asarray(fn(x))]
        try:
            model = to_onnx(fn, [x.shape], model_name=name)
        except Exception as e:
            print(f"export failed: {name}: {type(e).__name__}: {e}"[:300])
            continue
        feeds = {model.graph.input[0].name: x}
        stage("jax2onnx", name, model, feeds, framework=fw)


if __name__ == "__main__":
    main()
