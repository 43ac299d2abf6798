"""Dev-time generator of onyx/defs/schemas.json from the installed onnx package.

The file holds one JSON document per line (plain text: onyx reads it on a cold start, where
unzipping it cost more than reading it): first the header (``max_opsets``,
``onnx_version``), then one line per operator, ``domain<TAB>name<TAB>[its versions]``, so that
onyx parses only the operators a model uses (``onyx/defs/__init__.py``).

Only facts are extracted (names, versions, types, defaults, constraints, function bodies); no
documentation prose is copied. Run: python scripts/gen_schemas.py
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import onnx
import onnx.defs as d
from onnx import numpy_helper

OUT = pathlib.Path(__file__).resolve().parent.parent / "onyx" / "defs" / "schemas.json"
SPANS_OUT = OUT.with_name("_spans.py")
SPANS_HEADER = '''"""Where each operator's versions lie in schemas.json (byte offsets of their JSON), its
header's end and its size: generated with it by scripts/gen_schemas.py (do not edit;
tests/test_defs.py checks it against the file)."""

'''
OPTION = {0: "single", 1: "optional", 2: "variadic"}


def _json_float(x: float):
    if math.isnan(x) or math.isinf(x):
        return str(x)  # "nan", "inf", "-inf"
    return float(str(np.float32(x)))  # attributes are float32: keep the shortest spelling


def attr_value(a: onnx.AttributeProto):
    """An AttributeProto as [type, value] with JSON-friendly values (None when unset)."""
    t = a.type
    A = onnx.AttributeProto
    if a.ref_attr_name:
        return [int(t), {"ref": a.ref_attr_name}]
    if t == A.FLOAT:
        return [int(t), _json_float(a.f)]
    if t == A.INT:
        return [int(t), a.i]
    if t == A.STRING:
        return [int(t), a.s.decode("utf-8", "replace")]
    if t == A.FLOATS:
        return [int(t), [_json_float(x) for x in a.floats]]
    if t == A.INTS:
        return [int(t), list(a.ints)]
    if t == A.STRINGS:
        return [int(t), [s.decode("utf-8", "replace") for s in a.strings]]
    if t == A.TENSOR:
        return [int(t), tensor_json(a.t)]
    if t == A.GRAPH:
        g = a.g
        return [
            int(t),
            {
                "inputs": [v.name for v in g.input],
                "outputs": [v.name for v in g.output],
                "nodes": graph_nodes(g.node),
            },
        ]
    return [int(t), None]


def tensor_json(t: onnx.TensorProto):
    arr = numpy_helper.to_array(t)
    flat = arr.reshape(-1).tolist()
    if arr.dtype.kind == "f":
        flat = [_json_float(float(x)) for x in flat]
    elif arr.dtype.kind in "OSU":
        flat = [x.decode() if isinstance(x, bytes) else str(x) for x in flat]
    elif arr.dtype.kind not in "iub":
        flat = [_json_float(float(x)) for x in flat]
    return {"dtype": int(t.data_type), "dims": list(t.dims), "data": flat}


def graph_nodes(nodes):
    out = []
    for n in nodes:
        attrs = {a.name: attr_value(a) for a in n.attribute}
        entry = {"op": n.op_type, "in": list(n.input), "out": list(n.output)}
        if n.domain:
            entry["domain"] = n.domain
        if attrs:
            entry["attrs"] = attrs
        out.append(entry)
    return out


def function_json(f: onnx.FunctionProto):
    return {
        "inputs": list(f.input),
        "outputs": list(f.output),
        "attributes": list(f.attribute),
        "opsets": {o.domain: o.version for o in f.opset_import},
        "nodes": graph_nodes(f.node),
    }


def param(p):
    return [
        p.name,
        p.type_str,
        OPTION[int(p.option.value)],
        bool(p.is_homogeneous),
        int(p.differentiation_category.value),
        int(p.min_arity),
    ]


def schema_json(s):
    attrs = []
    for a in s.attributes.values():
        default = None
        if a.default_value is not None and a.default_value.type != 0:
            default = attr_value(a.default_value)[1]
        attrs.append([a.name, int(a.type.value), default, bool(a.required)])
    bodies = {}
    if s.has_function:
        for v in s.function_opset_versions or [s.since_version]:
            f = s.get_function_with_opset_version(v)
            if f:
                bodies[str(v)] = function_json(onnx.FunctionProto.FromString(f))
        if not bodies and s.function_body is not None:
            bodies[str(s.since_version)] = function_json(s.function_body)
    entry = {
        "name": s.name,
        "domain": s.domain,
        "since": s.since_version,
        "inputs": [param(p) for p in s.inputs],
        "outputs": [param(p) for p in s.outputs],
        "attrs": attrs,
        "types": [[c.type_param_str, list(c.allowed_type_strs)] for c in s.type_constraints],
        "min_input": s.min_input,
        "max_input": s.max_input,
        "min_output": s.min_output,
        "max_output": s.max_output,
    }
    if s.deprecated:
        entry["deprecated"] = True
    if bodies:
        entry["functions"] = bodies
    if s.has_context_dependent_function:
        entry["context_function"] = True
    if int(s.support_level.value) != 0:
        entry["experimental"] = True
    return entry


def main() -> None:
    schemas = sorted(
        d.get_all_schemas_with_history(), key=lambda s: (s.domain, s.name, s.since_version)
    )
    data = {
        "onnx_version": onnx.__version__,
        "max_opsets": d.C.schema_version_map() if hasattr(d.C, "schema_version_map") else {},
        "schemas": [schema_json(s) for s in schemas],
    }
    raw = write(data)
    print(f"{len(schemas)} schemas, {len(raw)} bytes json -> {OUT}")


def write(data: dict) -> bytes:
    """Write ``data`` (the header's keys and "schemas") to OUT in its per-operator lines."""
    by_op: dict[tuple[str, str], list] = {}
    for s in data["schemas"]:
        by_op.setdefault((s["domain"], s["name"]), []).append(s)
    header = {k: v for k, v in data.items() if k != "schemas"}
    lines = [_compact(header)]
    for (domain, name), versions in sorted(by_op.items()):
        versions.sort(key=lambda s: s["since"])
        lines.append(f"{domain}\t{name}\t{_compact(versions)}")
    raw = "\n".join(lines).encode()
    OUT.write_bytes(raw)
    SPANS_OUT.write_text(render_spans(raw))
    return raw


def render_spans(raw: bytes) -> str:
    """_spans.py for the data ``raw``: where each operator's versions start and end in it,
    the header's end and the file's size (the defs read a line alone through it)."""
    header_end = raw.index(b"\n")
    rows, at = [], header_end + 1
    while at:
        end = raw.find(b"\n", at)
        end = end if end >= 0 else len(raw)
        domain, name, versions = raw[at:end].split(b"\t", 2)
        start = end - len(versions)
        rows.append(f"    ({domain.decode()!r}, {name.decode()!r}): ({start}, {end}),")
        at = end + 1 if end < len(raw) else 0
    return (
        SPANS_HEADER
        + f"DATA_SIZE = {len(raw)}\nHEADER_END = {header_end}\n\n"
        + "# fmt: off\nSPANS: dict[tuple[str, str], tuple[int, int]] = {\n"
        + "\n".join(rows)
        + "\n}\n"
    )


def _compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


if __name__ == "__main__":
    main()
