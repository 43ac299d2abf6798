"""onyx.defs against onnx.defs: every schema version with the same facts."""

import json

import onnx
import onnx.defs as od
import pytest

from onyx import defs
from onyx.ir import AttrType

ONNX_SCHEMAS = od.get_all_schemas_with_history()
OPTION = {0: "single", 1: "optional", 2: "variadic"}


def test_every_schema_version_present():
    ours = {(s.domain, s.name, s.since_version) for s in defs.schemas()}
    theirs = {(s.domain, s.name, s.since_version) for s in ONNX_SCHEMAS}
    assert ours == theirs


@pytest.mark.parametrize("domain", ["", "ai.onnx.ml", "ai.onnx.preview.training"])
def test_facts_match(domain):
    for ref in (s for s in ONNX_SCHEMAS if s.domain == domain):
        s = defs.get_schema(ref.name, ref.since_version, ref.domain)
        assert s.since_version == ref.since_version
        assert s.deprecated == ref.deprecated
        assert [p.name for p in s.inputs] == [p.name for p in ref.inputs]
        assert [p.option for p in s.outputs] == [OPTION[int(p.option.value)] for p in ref.outputs]
        assert set(s.attributes) == set(ref.attributes)
        for a in ref.attributes.values():
            assert s.attributes[a.name].type == AttrType(int(a.type.value))
            assert s.attributes[a.name].required == a.required
        assert {k: set(v.allowed) for k, v in s.type_constraints.items()} == {
            c.type_param_str: set(c.allowed_type_strs) for c in ref.type_constraints
        }
        assert (s.min_input, s.max_input) == (ref.min_input, ref.max_input)
        assert s.has_function == ref.has_function


def test_version_lookup():
    assert defs.get_schema("Softmax", 12).since_version == 11
    assert defs.get_schema("Softmax", 13).since_version == 13
    assert defs.get_schema("Softmax").since_version == max(
        s.since_version for s in ONNX_SCHEMAS if s.name == "Softmax" and s.domain == ""
    )
    assert defs.get_schema("Softmax", 12, "ai.onnx") is defs.get_schema("Softmax", 12)
    assert defs.get_schema("NoSuchOp", 13) is None
    assert defs.get_schema("Softmax", 13, "ai.onnx.ml") is None
    assert defs.get_schema("LabelEncoder", 4, "ai.onnx.ml").since_version == 4


def test_defaults():
    assert defs.get_schema("Softmax", 11).defaults == {"axis": 1}
    assert defs.get_schema("Softmax", 13).defaults == {"axis": -1}
    eps = defs.get_schema("LayerNormalization", 17).attributes["epsilon"]
    assert eps.default == pytest.approx(1e-5)
    assert defs.get_schema("Conv", 11).attributes["auto_pad"].default == "NOTSET"
    assert defs.get_schema("Cast", 21).attributes["to"].required


def test_function_body_builds():
    s = defs.get_schema("Celu")
    f = s.function_body.to_function("", "Celu")
    assert [n.op_type for n in f.graph.nodes][-1] == "Mul"
    assert f.graph.inputs[0].name == "X"
    # every stored body converts
    for s in defs.schemas():
        for body in s.functions.values():
            body.to_function(s.domain, s.name)


def test_function_body_matches_onnx():
    ref = od.get_schema("Celu")
    v = ref.function_opset_versions[-1]
    body = onnx.FunctionProto.FromString(ref.get_function_with_opset_version(v))
    ours = defs.get_schema("Celu").function_for(v)
    assert [n["op"] for n in ours.nodes] == [n.op_type for n in body.node]


def test_domains_and_max_opset():
    assert defs.max_opset("") == od.onnx_opset_version()
    assert defs.max_opset("ai.onnx.ml") >= 5
    assert defs.max_opset("com.unknown") is None


def test_every_operator_line_is_found_and_parsed_as_json_parses_it():
    # (lines are found through an index of tab and newline positions and parsed with _json's
    # C scanner: every one must give what json.loads gives)
    import json
    from pathlib import Path

    from onyx import defs

    rows = (Path(defs.__file__).with_name("schemas.json")).read_bytes().split(b"\n")[1:]
    for row in rows:
        domain, op, versions = (part.decode() for part in row.split(b"\t", 2))
        want = sorted(json.loads(versions), key=lambda s: s["since"])
        got = defs.schema_versions(op, domain)
        assert [s.since_version for s in got] == [v["since"] for v in want], op
        assert [s.name for s in got] == [v["name"] for v in want], op
    assert len(rows) == len({(s.domain, s.name) for s in defs.schemas()})
    assert defs.get_schema("NoSuchOp") is None and defs.get_schema("Relu\t") is None


def _gen_schemas():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "gen_schemas.py"
    spec = importlib.util.spec_from_file_location("gen_schemas", path)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_the_table_is_the_data_files():
    """onyx/defs/schemas.bin is written with schemas.json (scripts/gen_schemas.py), and reads
    as the JSON does: every operator's versions, and the domains' opset ranges. (Its bytes
    are not compared with a table made here: marshal marks an object shared, or a string
    interned, as this process's objects are, so equal data may differ in a few bytes.)"""
    gen = _gen_schemas()
    raw = gen.OUT.read_bytes()
    assert defs._table_head() is not None, "rerun python scripts/gen_schemas.py --table"  # noqa: SLF001
    made = gen.render_table(raw)
    assert made.split(b"\n", 1)[0].split()[:2] == defs._table_head().split()[:2]  # noqa: SLF001
    assert defs._max_opsets() == json.loads(raw.split(b"\n", 1)[0])["max_opsets"]  # noqa: SLF001
    for row in raw.split(b"\n")[1:]:
        domain, op, versions = (part.decode() for part in row.split(b"\t", 2))
        want = sorted(json.loads(versions), key=lambda s: s["since"])
        entries = defs._table_entries(op, domain)  # noqa: SLF001
        assert [defs._table_version(*e[1:]) for e in entries] == want, op  # noqa: SLF001
    for op, domain in (("Relu\t", ""), ("Relu", "\t"), ("Re", ""), ("Relu\n", ""), ("\ud800", "")):
        assert defs._table_entries(op, domain) == []  # noqa: SLF001


def test_a_cold_session_reads_its_operators_lines_alone():
    """A session's checker asks for a few operators: their lines are read, not the whole
    416 KB file (and scanned for its lines)."""
    import subprocess
    import sys
    from pathlib import Path

    import onyx

    tiny = Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx"
    code = (
        "import onyx\n"
        "from onyx import defs\n"
        f"onyx.InferenceSession({str(tiny)!r})\n"
        "print(defs._data.cache_info().currsize, defs._index.cache_info().currsize,\n"
        "    defs.get_schema('Conv', 17).since_version)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "0", "11"]


def test_a_table_made_for_another_file_is_not_read(monkeypatch, tmp_path):
    """A schemas.bin not made for schemas.json as it is (its size), of another format, or
    missing sends the reader to the JSON's own lines, with the same schemas."""
    want = defs.get_schema("Conv", 11)
    with open(defs._TABLE, "rb") as f:  # noqa: SLF001
        good = f.read()
    first, rest = good.split(b"\n", 1)
    magic, size, head = first.split()
    for name, data in (
        ("stale.bin", b" ".join((magic, str(int(size) + 1).encode(), head)) + b"\n" + rest),
        ("format.bin", b" ".join((b"onyxdefs0", size, head)) + b"\n" + rest),
        ("short.bin", good[: int(head) - 5]),
        ("missing.bin", None),
    ):
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        monkeypatch.setattr(defs, "_TABLE", str(path))
        for cached in (defs._table_head, defs._raw_versions, defs._lookup, defs._max_opsets):  # noqa: SLF001
            cached.cache_clear()
        assert defs._table_head() is None, name  # noqa: SLF001
        got = defs.get_schema("Conv", 11)
        assert got is not want and got == want, name
        header = json.loads(defs._data().split(b"\n", 1)[0])  # noqa: SLF001
        assert defs.domains() == {d: tuple(r) for d, r in header["max_opsets"].items()}, name
    monkeypatch.undo()
    for cached in (defs._table_head, defs._raw_versions, defs._lookup, defs._max_opsets):  # noqa: SLF001
        cached.cache_clear()
    assert defs._table_head() is not None  # noqa: SLF001


def test_a_cold_session_reads_the_table_not_the_json():
    """A session's checker reads its operators' versions from schemas.bin: the JSON's scanner
    (the _json extension) is not imported, nor the JSON read."""
    import subprocess
    import sys
    from pathlib import Path

    import onyx

    tiny = Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx"
    code = (
        "import sys, onyx\n"
        "from onyx import defs\n"
        f"onyx.InferenceSession({str(tiny)!r})\n"
        "print('_json' in sys.modules, defs._data.cache_info().currsize,\n"
        "    defs.get_schema('Conv', 17).since_version)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "0", "11"]
