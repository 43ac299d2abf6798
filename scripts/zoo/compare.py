"""Compare onyx with onnxruntime on ONNX models: the zoo's shared comparison rule.

    python scripts/zoo/compare.py MODEL.onnx [MODEL.onnx ...]   # random feeds, live onnxruntime
    python scripts/zoo/compare.py --zoo tests/models/zoo         # every model of a zoo manifest

Feeds come from the model's inputs (dynamic dims: 1 for a batch-like first dim, else 8) unless
a zoo manifest gives them. Tolerances by kind: float32 rtol 1e-3 / atol 1e-4; fp16 rtol 1e-2 /
atol 1e-2; quantized: one quantization step of drift (atol from the manifest, else 1e-2) and
identical argmax on classifier-like outputs; labels (integers, strings) exactly.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

import numpy as np

TOLERANCES = {  # kind -> (rtol, atol)
    "float32": (1e-3, 1e-4),
    "fp16": (1e-2, 1e-2),
    "quantized": (0.0, 1e-2),
}
DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64,
          9: np.bool_, 10: np.float16, 11: np.float64, 8: object}  # fmt: skip


def random_feeds(path: str, dims: dict | None = None, seed: int = 0) -> dict:
    """Feeds for every non-initializer input, from its declared type (an onnx-free read)."""
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {}
    for arg in sess.get_inputs():
        shape = [_dim(d, k, (dims or {})) for k, d in enumerate(arg.shape or [])]
        kind = arg.type[len("tensor(") : -1]
        dtype = {"float": np.float32, "double": np.float64, "float16": np.float16,
                 "int64": np.int64, "int32": np.int32, "uint8": np.uint8, "int8": np.int8,
                 "bool": np.bool_, "string": object}[kind]  # fmt: skip
        if dtype is object:
            feeds[arg.name] = rng.choice(["a", "b", "c"], size=shape).astype(object)
        elif np.issubdtype(dtype, np.floating):
            feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.bool_:
            feeds[arg.name] = rng.random(shape) < 0.5
        else:
            feeds[arg.name] = rng.integers(0, 4, size=shape).astype(dtype)
    return feeds


def _dim(d, k: int, dims: dict) -> int:
    if isinstance(d, int) and d >= 0:
        return d
    if isinstance(d, str) and d in dims:
        return dims[d]
    return 1 if k == 0 else 8


def run_onnxruntime(path: str, feeds: dict, threads: int = 0) -> list:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def run_onyx(path: str, feeds: dict, threads: int = 0) -> list:
    from onyx.runtime.session import InferenceSession, SessionOptions

    so = SessionOptions()
    so.intra_op_num_threads = threads
    return InferenceSession(path, so).run(None, feeds)


def mismatch(expected: list, actual: list, kind: str = "float32", atol=None) -> str | None:
    """Why actual differs from expected beyond the kind's tolerance, or None."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    rtol, default_atol = TOLERANCES[kind]
    atol = default_atol if atol is None else atol
    for i, (e, a) in enumerate(zip(expected, actual)):
        if isinstance(e, list):  # sequence of maps (ZipMap) or tensors
            if len(e) != len(a):
                return f"output {i}: {len(a)} entries, expected {len(e)}"
            for ei, ai in zip(e, a):
                if isinstance(ei, dict):
                    if set(ei) != set(ai) or not np.allclose(
                        [ei[k] for k in ei], [ai[k] for k in ei], rtol=rtol, atol=atol
                    ):
                        return f"output {i}: map entries differ"
            continue
        e, a = np.asarray(e), np.asarray(a)
        if e.shape != a.shape:
            return f"output {i}: shape {a.shape}, expected {e.shape}"
        if e.dtype != a.dtype:
            return f"output {i}: dtype {a.dtype}, expected {e.dtype}"
        if e.dtype.kind in "OUSb" or e.dtype.kind in "iu" and kind == "float32":
            if not np.array_equal(e, a):
                return f"output {i}: {int(np.sum(e != a))} of {e.size} values differ"
            continue
        if e.dtype.kind in "iu":  # quantized integers: a step of drift
            diff = np.abs(e.astype(np.int64) - a.astype(np.int64)).max(initial=0)
            if diff > 1:
                return f"output {i}: integers differ by up to {diff}"
            continue
        e64, a64 = e.astype(np.float64), a.astype(np.float64)
        if not np.allclose(a64, e64, rtol=rtol, atol=atol, equal_nan=True):
            err = np.abs(a64 - e64).max(initial=0)
            return f"output {i}: max abs diff {err:.3g} (rtol {rtol}, atol {atol})"
        if kind != "float32" and e.ndim >= 2 and e.shape[-1] > 1 and e.dtype.kind == "f":
            if not np.array_equal(e.argmax(-1), a.argmax(-1)) and err_small(e64, a64):
                return f"output {i}: argmax differs"
    return None


def err_small(e, a) -> bool:
    """Whether an argmax change is real: the top two logits of a row are not within noise."""
    top2 = np.sort(e, axis=-1)[..., -2:]
    return bool(np.any((top2[..., 1] - top2[..., 0]) > 1e-3))


def compare(path: str, feeds: dict, kind: str = "float32", atol=None, threads: int = 0) -> dict:
    """{'status': 'pass' | 'mismatch' | 'onyx-error' | 'ort-error', 'detail': ...}."""
    try:
        expected = run_onnxruntime(path, feeds, threads)
    except Exception as e:  # the reference itself fails: not counted against onyx
        return {"status": "ort-error", "detail": f"{type(e).__name__}: {e}"[:300]}
    try:
        actual = run_onyx(path, feeds, threads)
    except Exception as e:
        tb = traceback.format_exc(limit=-3)
        return {"status": "onyx-error", "detail": f"{type(e).__name__}: {e}"[:500], "tb": tb}
    why = mismatch(expected, actual, kind, atol)
    return {"status": "mismatch" if why else "pass", "detail": why or ""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--zoo", help="a zoo directory with manifest.json (feeds from its .npz)")
    ap.add_argument("--kind", default="float32", choices=sorted(TOLERANCES))
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    results = {}
    if args.zoo:
        root = Path(args.zoo)
        manifest = json.loads((root / "manifest.json").read_text())
        for name, entry in manifest.items():
            with np.load(root / entry["data"], allow_pickle=True) as data:
                feeds = {k[len("in:") :]: data[k] for k in data.files if k.startswith("in:")}
            results[name] = compare(str(root / entry["file"]), feeds, entry["kind"],
                                    entry.get("atol"))  # fmt: skip
    for m in args.models:
        results[m] = compare(m, random_feeds(m), args.kind)
    for name, r in results.items():
        print(f"{r['status']:11s} {name}  {r['detail']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if all(r["status"] in ("pass", "ort-error") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
