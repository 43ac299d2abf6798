"""Dev-time generator of onyx/defs/schemas.json from the installed onnx package.

The file holds one JSON document per line (plain text: onyx reads it on a cold start, where
unzipping it cost more than reading it): first the header (``max_opsets``,
``onnx_version``), then one line per operator, ``domain<TAB>name<TAB>[its versions]``, and
``schemas.bin``, the table a session reads: each operator version as a marshal blob behind a
text head saying where each lies, so that onyx decodes only the versions a model uses
(``onyx/defs/__init__.py``). ``--table`` writes the table again from the JSON as it is.

Only facts are extracted (names, versions, types, defaults, constraints, function bodies); no
documentation prose is copied. Run: python scripts/gen_schemas.py
"""

from __future__ import annotations

import json
import marshal
import math
import pathlib
import sys

import numpy as np
import onnx
import onnx.defs as d
from onnx import numpy_helper

OUT = pathlib.Path(__file__).resolve().parent.parent / "onyx" / "defs" / "schemas.json"
TABLE_OUT = OUT.with_name("schemas.bin")
#: The table's first word (its format's version).
TABLE_MAGIC = "onyxdefs1"
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
    TABLE_OUT.write_bytes(render_table(raw))
    return raw


def render_table(raw: bytes) -> bytes:
    """schemas.bin for the data ``raw``: what a session's checker reads in place of the JSON
    (onyx/defs/__init__.py). A text head, then each operator version's dict as its own
    marshal blob (format 4: decoded by the interpreter's own C code, no JSON scanner to
    import, and only the versions asked for are decoded, where a line held all of an
    operator's). The head's lines (tab-separated):

        onyxdefs1 <the JSON's size> <the head's size>     (a table for another file is not read)
        max  <domain>  <first opset>  <last opset>        (the JSON header's max_opsets)
        op   <domain>  <op>  <since>:<offset>:<length> ...  (oldest first; offsets after the head)

    found by ``bytes.find`` of an operator's line start: no table is decoded whole."""
    lines = raw.split(b"\n")
    rows, blobs, at = [], [], 0
    max_opsets = json.loads(lines[0])["max_opsets"]
    for domain, (lo, hi) in sorted(max_opsets.items()):
        rows.append(f"max\t{domain}\t{lo}\t{hi}")
    for line in lines[1:]:
        domain, name, versions = line.split(b"\t", 2)
        entries = []
        for v in sorted(json.loads(versions), key=lambda s: s["since"]):
            blob = marshal.dumps(v, 4)
            entries.append(f"{v['since']}:{at}:{len(blob)}")
            blobs.append(blob)
            at += len(blob)
        rows.append(f"op\t{domain.decode()}\t{name.decode()}\t{' '.join(entries)}")
    body = ("\n" + "\n".join(rows) + "\n").encode()
    size = len(body)
    while True:  # (the first line holds the head's size, its own digits included)
        first = f"{TABLE_MAGIC} {len(raw)} {size}".encode()
        if len(first) + len(body) == size:
            break
        size = len(first) + len(body)
    return first + body + b"".join(blobs)


def _compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--table"]:  # (schemas.bin again from schemas.json as it is: no onnx)
        TABLE_OUT.write_bytes(render_table(OUT.read_bytes()))
    else:
        main()
