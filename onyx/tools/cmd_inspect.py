"""onyx inspect: what a model file holds, at a glance."""

from __future__ import annotations

import argparse
import json
from collections import Counter

HELP = "show a model's IR version, opsets, producer, inputs/outputs, ops, parameters, metadata"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _type_str(t) -> str:
    from ..checker import type_string

    if t is None:
        return "?"
    s = type_string(t) or str(t)
    shape = getattr(t, "shape", None)
    if shape is not None:
        s += "[" + ",".join("?" if d is None else str(d) for d in shape.dims) + "]"
    return s


def summarize(model) -> dict:
    """The facts ``onyx inspect`` prints, as data."""
    g = model.graph
    init_names = set(g.initializers)
    ops = Counter()
    for node in g.all_nodes():
        ops[f"{node.domain}::{node.op_type}" if node.domain else node.op_type] += 1
    params = nbytes = 0
    external: dict[str, int] = {}
    for v in g.initializers.values():
        t = v.const_value
        if t is None:
            continue
        params += t.size
        try:
            nbytes += t.nbytes
        except Exception:  # unreadable string data
            pass
        if t.external is not None:
            loc = (
                t.external.location
                if hasattr(t.external, "location")
                else t.external.get("location")
            )
            external[loc] = external.get(loc, 0) + 1
    return {
        "ir_version": model.ir_version,
        "opsets": {d or "ai.onnx": v for d, v in model.opset_imports.items()},
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "domain": model.domain,
        "model_version": model.model_version,
        "inputs": {v.name: _type_str(v.type) for v in g.inputs if v.name not in init_names},
        "outputs": {v.name: _type_str(v.type) for v in g.outputs},
        "nodes": sum(ops.values()),
        "ops": dict(ops.most_common()),
        "functions": [f"{f.domain}::{f.name}" for f in model.functions.values()],
        "parameters": params,
        "parameter_bytes": nbytes,
        "initializers": len(g.initializers),
        "metadata": dict(model.metadata_props),
        "external_data": external,
    }


def main(args) -> int:
    from ..serde import load

    model = load(args.model, load_external_data=False)
    info = summarize(model)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"model:       {args.model}")
    print(f"IR version:  {info['ir_version']}")
    print("opsets:      " + ", ".join(f"{d} {v}" for d, v in info["opsets"].items()))
    print(f"producer:    {info['producer'] or '-'}")
    if info["domain"] or info["model_version"]:
        print(f"domain:      {info['domain'] or '-'} (model version {info['model_version']})")
    print("inputs:")
    for name, t in info["inputs"].items():
        print(f"  {name}: {t}")
    print("outputs:")
    for name, t in info["outputs"].items():
        print(f"  {name}: {t}")
    print(
        f"parameters:  {info['parameters']:,} in {info['initializers']} initializers "
        f"({info['parameter_bytes']:,} bytes)"
    )
    print(f"nodes:       {info['nodes']}")
    for op, n in info["ops"].items():
        print(f"  {op:<28} {n}")
    if info["functions"]:
        print("functions:   " + ", ".join(info["functions"]))
    if info["metadata"]:
        print("metadata:")
        for k, v in info["metadata"].items():
            print(f"  {k}: {v}")
    if info["external_data"]:
        print("external data files:")
        for loc, n in info["external_data"].items():
            print(f"  {loc} ({n} tensors)")
    return 0
