"""Weight-only int4 blockwise quantization of MatMul weights (activations stay float).

Two forms, both computing A @ dequant(W) with W [K, N] cut into blocks of ``block_size`` rows:
- ``matmulnbits``: com.microsoft MatMulNBits. B is uint8 [N, blocks, block_size / 2]: column n's
  block b holds K rows b*bs .. b*bs+bs-1 as unsigned 4-bit codes, two per byte, the lower row
  in the low nibble; scales [N * blocks] float; zero points (asymmetric only) two per byte, per
  column padded to whole bytes; absent means 8 (onnxruntime's contrib operator docs).
- ``qdq``: int4/uint4 DequantizeLinear with ``block_size`` on axis 0 (opset 21) -> MatMul.
"""

from __future__ import annotations

import numpy as np

from .. import ir
from ..errors import InvalidArgument
from .graphedit import Editor, constant_of, drop_unused_initializers, float_tensor

MS = "com.microsoft"


def blockwise(w: np.ndarray, block: int, symmetric: bool):
    """(codes uint8 [N, blocks, block] in 0..15, scales [N, blocks], zero points or None)."""
    k, n = w.shape
    blocks = -(-k // block)
    padded = np.zeros((blocks * block, n), np.float32)
    padded[:k] = w
    cols = padded.T.reshape(n, blocks, block)
    if symmetric:
        absmax = np.abs(cols).max(axis=2)
        scale = np.where(absmax > 0, absmax / 7.0, 1.0).astype(np.float32)
        codes = np.clip(np.rint(cols / scale[..., None]), -8, 7) + 8
        return codes.astype(np.uint8), scale, None
    lo = np.minimum(cols.min(axis=2), 0.0)
    hi = np.maximum(cols.max(axis=2), 0.0)
    scale = np.where(hi > lo, (hi - lo) / 15.0, 1.0).astype(np.float32)
    zp = np.clip(np.rint(-lo / scale), 0, 15).astype(np.uint8)
    codes = np.clip(np.rint(cols / scale[..., None]) + zp[..., None], 0, 15)
    return codes.astype(np.uint8), scale, zp


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """Pack the last axis two 4-bit codes per byte, lower index in the low nibble."""
    if codes.shape[-1] % 2:
        codes = np.concatenate([codes, np.zeros((*codes.shape[:-1], 1), np.uint8)], axis=-1)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def apply(
    model: ir.Model,
    nodes: list[ir.Node],
    block_size: int = 32,
    symmetric: bool = True,
    form: str = "matmulnbits",
) -> int:
    if block_size < 16 or block_size & (block_size - 1):
        raise InvalidArgument(f"block_size must be a power of two >= 16, not {block_size}")
    ed = Editor(model)
    if form == "qdq" and (model.opset("") or 0) < 18:
        raise InvalidArgument(
            "int4 DequantizeLinear needs opset 21; the model's opset is below 18 "
            "(ReduceMean & co. changed form at 18): use weight_only_form='matmulnbits'"
        )
    done = 0
    for node in nodes:
        if node.op_type != "MatMul":
            continue
        w = constant_of(ed.graph, node.inputs[1])
        if w is None or w.dtype != np.float32 or w.ndim != 2 or not float_tensor(node.inputs[0]):
            continue
        if form == "qdq":
            _to_blocked_dq(ed, node, w, block_size, symmetric)
        else:
            _to_matmulnbits(ed, node, w, block_size, symmetric)
        done += 1
    ed.graph.topological_sort()
    drop_unused_initializers(ed.graph)
    return done


def _to_matmulnbits(ed: Editor, node: ir.Node, w, block: int, symmetric: bool) -> None:
    k, n = w.shape
    codes, scale, zp = blockwise(w, block, symmetric)
    base = node.name or node.outputs[0].name
    inputs = [
        node.inputs[0],
        ed.const(f"{base}_B", pack_nibbles(codes)),
        ed.const(f"{base}_scales", scale.reshape(-1)),
    ]
    if zp is not None:
        inputs.append(ed.const(f"{base}_zero_points", pack_nibbles(zp).reshape(-1)))
    new = ir.Node(
        "MatMulNBits",
        inputs,
        [ed.name(base + "_nbits")],
        {"K": k, "N": n, "bits": 4, "block_size": block},
        domain=MS,
        name=ed.name(base + "_MatMulNBits"),
    )
    _replace(ed, node, new)
    ed.use_opset(MS, 1)


def _to_blocked_dq(ed: Editor, node: ir.Node, w, block: int, symmetric: bool) -> None:
    k, n = w.shape
    codes, scale, zp = blockwise(w, block, symmetric)  # [N, blocks, block]
    q = codes.transpose(1, 2, 0).reshape(-1, n)[:k]  # back to [K, N]
    base = node.name or node.outputs[0].name
    if symmetric:
        dtype, qv, zv = ir.DataType.INT4, q.astype(np.int8) - 8, None
    else:
        dtype, qv, zv = ir.DataType.UINT4, q, zp.T.copy()
    wq = ed.const(f"{base}_W_int4", qv, dtype=dtype)
    inputs = [wq, ed.const(f"{base}_W_scale", scale.T.copy())]
    if zv is not None:
        inputs.append(ed.const(f"{base}_W_zero_point", zv, dtype=dtype))
    dq = ed.node("DequantizeLinear", inputs, base=base, before=node, axis=0, block_size=block)
    dq.outputs[0].type = ir.TensorType(ir.DataType.FLOAT, ir.Shape((k, n)))
    node.set_input(1, dq.outputs[0])
    ed.use_opset("", 21, bump_from=18)  # 18 -> 21: no op changed form


def _replace(ed: Editor, old: ir.Node, new: ir.Node) -> None:
    from .dynamic import _finish

    ed.graph.insert_before(old, new)
    _finish(ed, old.outputs[0], new.outputs[0])
    ed.graph.remove(old, safe=False)


__all__ = ["apply", "blockwise", "pack_nibbles"]
