"""ai.onnx.preview.training optimizers: Adagrad, Adam, Momentum.

Each takes R (learning rate), T (update count), then the optimized tensors followed by their
per-tensor state groups; the update is applied to every tensor independently.

Gradient is not implemented: it differentiates tensors of the enclosing graph by name, which a
kernel cannot see.
"""

from __future__ import annotations

import numpy as np

from ..registry import op

TRAINING = "ai.onnx.preview.training"


def _groups(inputs: tuple, n_groups: int) -> list[tuple]:
    """[X_1..X_n, G_1..G_n, ...] -> one (X_i, G_i, ...) tuple per optimized tensor."""
    n = len(inputs) // n_groups
    return [tuple(inputs[g * n + i] for g in range(n_groups)) for i in range(n)]


def _outputs(per_tensor: list[tuple]) -> tuple:
    """Regroup per-tensor results (X_new, S_new, ...) as [X_1_new..X_n_new, S_1_new.., ...]."""
    return tuple(np.asarray(v) for column in zip(*per_tensor) for v in column)


def _scalar(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


@op("Adagrad", since=1, domain=TRAINING)
def adagrad(R, T, *inputs, decay_factor=0.0, epsilon=1e-6, norm_coefficient=0.0):
    r = _scalar(R) / (1 + _scalar(T) * decay_factor)

    def update(x, g, h):
        g_reg = norm_coefficient * x + g
        h_new = h + g_reg * g_reg
        x_new = x - r * g_reg / (np.sqrt(h_new) + epsilon)
        return x_new.astype(x.dtype), h_new.astype(h.dtype)

    return _outputs([update(*group) for group in _groups(inputs, 3)])


@op("Adam", since=1, domain=TRAINING)
def adam(
    R,
    T,
    *inputs,
    alpha=0.9,
    beta=0.999,
    epsilon=1e-6,
    norm_coefficient=0.0,
    norm_coefficient_post=0.0,
):
    r, t = _scalar(R), _scalar(T)
    r_adjusted = r * np.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r

    def update(x, g, v, h):
        g_reg = norm_coefficient * x + g
        v_new = alpha * v + (1 - alpha) * g_reg
        h_new = beta * h + (1 - beta) * g_reg * g_reg
        x_new = x - r_adjusted * v_new / (np.sqrt(h_new) + epsilon)
        x_final = (1 - norm_coefficient_post) * x_new
        return x_final.astype(x.dtype), v_new.astype(v.dtype), h_new.astype(h.dtype)

    return _outputs([update(*group) for group in _groups(inputs, 4)])


@op("Momentum", since=1, domain=TRAINING)
def momentum(R, T, *inputs, alpha, beta, mode, norm_coefficient):
    r = _scalar(R)
    beta_adjusted = beta if _scalar(T) > 0 else 1.0  # the first update takes the full gradient

    def update(x, g, v):
        g_reg = norm_coefficient * x + g
        v_new = alpha * v + beta_adjusted * g_reg
        step = g_reg + alpha * v_new if mode == "nesterov" else v_new
        return (x - r * step).astype(x.dtype), v_new.astype(v.dtype)

    return _outputs([update(*group) for group in _groups(inputs, 3)])
