"""Collect the staged zoo: onnxruntime's references, the committed fixtures, the comparison
with onyx, and docs/conformance.md's exporter table.

    python scripts/zoo/collect.py [--commit-limit-kb 200] [--real results.json]

For every staged model (stage.py): run onnxruntime on its feeds; if the source framework's
outputs were staged, check onnxruntime against them (a model the exporter got wrong is marked,
not counted against onyx); copy the model with an .npz of feeds and expected outputs into
tests/models/zoo/ when the model is small enough to commit; compare onyx with onnxruntime live;
and write the exporter x models x pass table into docs/conformance.md (between markers).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import compare, run_onnxruntime  # noqa: E402
from stage import ROOT, STAGING  # noqa: E402

ZOO = ROOT / "tests" / "models" / "zoo"
CONFORMANCE = ROOT / "docs" / "conformance.md"
BEGIN, END = "<!-- exporter-zoo:begin -->", "<!-- exporter-zoo:end -->"


def _outputs_npz(expected: list) -> dict:
    out = {}
    for i, v in enumerate(expected):
        if isinstance(v, list):  # ZipMap's list of dicts: keys and values as arrays
            keys = sorted(v[0]) if v else []
            out[f"out:{i}:zipmap"] = np.array([[d[k] for k in keys] for d in v], np.float32)
            out[f"out:{i}:keys"] = np.array(keys)
        else:
            out[f"out:{i}"] = np.asarray(v)
    return out


def _framework_check(expected: list, data, kind: str) -> str:
    """'' when onnxruntime agrees with the source framework (or none was staged)."""
    fw = [data[k] for k in sorted((k for k in data.files if k.startswith("fw:")),
                                  key=lambda k: int(k[3:]))]  # fmt: skip
    for i, f in enumerate(fw):
        e = np.asarray(expected[i]) if i < len(expected) else None
        if e is None or e.shape != f.shape:
            return f"onnxruntime's output {i} has shape {None if e is None else e.shape}, the framework's {f.shape}"
        if e.dtype.kind == "f":
            tol = 1e-3 if kind == "float32" else 5e-2
            if not np.allclose(e.astype(np.float64), f.astype(np.float64), rtol=tol, atol=tol):
                return f"onnxruntime differs from the framework on output {i}"
    return ""


def collect(limit_kb: int) -> dict:
    results = {}
    manifest = {}
    ZOO.mkdir(parents=True, exist_ok=True)
    for meta_path in sorted(STAGING.glob("*/*.json")):
        meta = json.loads(meta_path.read_text())
        name = f"{meta_path.parent.name}_{meta_path.stem}"
        model = meta_path.with_suffix(".onnx")
        with np.load(meta_path.with_suffix(".npz"), allow_pickle=True) as data:
            feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
            has_framework = "fw:0" in data.files
            try:
                expected = run_onnxruntime(str(model), feeds, threads=1)
                framework = _framework_check(expected, data, meta["kind"])
            except Exception as e:
                expected, framework = None, ""
                results[name] = {**meta, "status": "ort-error", "detail": str(e)[:300]}
        if expected is None:
            continue
        r = compare(str(model), feeds, meta["kind"], meta["atol"], threads=1)
        r.pop("tb", None)
        if has_framework:  # the exporter's own correctness, not onyx's
            r["framework"] = framework or "onnxruntime agrees with the framework"
        results[name] = {**meta, **r}
        print(f"{r['status']:11s} {name}  {r['detail']}", flush=True)
        data_path = ZOO / f"{name}.npz"
        np.savez_compressed(data_path, **{f"in:{k}": v for k, v in feeds.items()},
                            **_outputs_npz(expected))  # fmt: skip
        if model.stat().st_size + data_path.stat().st_size <= limit_kb * 1024:
            shutil.copy(model, ZOO / f"{name}.onnx")
            manifest[name] = {"file": f"{name}.onnx", "data": f"{name}.npz", **meta}
        else:  # too large to commit: compared live only
            data_path.unlink()
            (ZOO / f"{name}.onnx").unlink(missing_ok=True)
    (ZOO / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return results


def table(results: dict) -> str:
    by = defaultdict(lambda: [0, 0, [], 0, 0])
    for name, r in results.items():
        row = by[r["exporter"]]
        row[0] += 1
        row[1] += r["status"] == "pass"
        if r.get("framework"):  # onnxruntime against the source framework's own outputs
            row[3] += 1
            row[4] += r["framework"].startswith("onnxruntime agrees")
        if r["status"] != "pass":
            short = name.split(":", 1)[1] if ":" in name else name.split("_", 1)[-1]
            row[2].append(f"{short}: {r['status']}")
    lines = [
        "| exporter | models | pass | onnxruntime = framework | not passing |",
        "|---|---:|---:|---:|---|",
    ]
    for exporter in sorted(by):
        n, ok, bad, checked, agree = by[exporter]
        fw = f"{agree}/{checked}" if checked else ""
        lines.append(f"| {exporter} | {n} | {ok} | {fw} | {'; '.join(bad)} |")
    total = sum(v[0] for v in by.values()), sum(v[1] for v in by.values())
    lines.append(f"| **all** | {total[0]} | {total[1]} | | |")
    return "\n".join(lines)


def write_conformance(results: dict) -> None:
    text = CONFORMANCE.read_text()
    block = f"{BEGIN}\n{table(results)}\n{END}"
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text += (
            "\n## Exporter zoo (issue 20)\n\n"
            "Models from the exporters users bring, and real models that PyPI packages ship in "
            "their wheels, each compared with onnxruntime (float32 rtol 1e-3 / atol 1e-4; fp16 "
            "1e-2; quantized: one step of drift). Generated by `scripts/zoo/build.sh` "
            "(`scripts/zoo/collect.py` writes this table); the small models are committed "
            "under tests/models/zoo/ and checked by tests/test_exporter_zoo.py. `ort-error`: "
            "onnxruntime itself rejects the exported model (an exporter bug, not counted "
            "against onyx); `onyx-error` / `mismatch`: onyx's failures.\n\n" + block + "\n"
        )
    CONFORMANCE.write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commit-limit-kb", type=int, default=200, help="model + data, per model")
    ap.add_argument("--real", help="fetch_real.py's --json results, added to the table")
    ap.add_argument("--json", default=str(ROOT / "build" / "zoo" / "results.json"))
    args = ap.parse_args()
    results = collect(args.commit_limit_kb)
    if args.real and Path(args.real).exists():
        results.update(json.loads(Path(args.real).read_text()))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1))
    write_conformance(results)
    return 0 if all(r["status"] == "pass" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
