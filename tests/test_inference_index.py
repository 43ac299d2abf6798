"""The shape-rule index (onyx/inference/_index.py): inference imports a rule module at the
first lookup of one of its ops, so the index must name, for every op with a rule, the module
whose import registers it."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import onyx
from onyx import helper
from onyx.inference import _index
from onyx.proto import TensorProto

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_inference_index", ROOT / "scripts" / "gen_inference_index.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fresh(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return out.stdout.strip()


def test_index_file_is_what_the_generator_writes():
    gen = _generator()
    index = gen.rule_index()
    assert _index.MODULES == index, "rerun python scripts/gen_inference_index.py"
    assert gen.OUT.read_text() == gen.render(index)


def test_each_module_registers_the_ops_the_index_gives_it():
    """In a fresh process: the rules present once onyx.inference is imported, then the ones
    each lazily imported module adds, are the index's for that module."""
    code = """
import importlib, json
import onyx.inference
from onyx.inference.engine import RULES
from onyx.inference._index import MODULES
seen = {"": sorted(map(list, dict.keys(RULES)))}
for name in sorted(set(MODULES.values())):
    before = set(dict.keys(RULES))
    importlib.import_module("onyx.inference." + name)
    seen[name] = sorted(map(list, set(dict.keys(RULES)) - before))
print(json.dumps(seen))
"""
    seen = json.loads(_fresh(code))
    eager = {tuple(k) for k in seen.pop("")}
    for name, keys in seen.items():
        want = {k for k, m in _index.MODULES.items() if m == name} - eager
        assert {tuple(k) for k in keys} == want, name
    assert eager <= set(_index.MODULES)


def test_a_models_inference_imports_only_its_ops_rule_modules():
    code = """
import sys
import onyx
from onyx import helper
from onyx.proto import TensorProto
from onyx.proto import TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
m = onyx.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
print(list(m.graph.outputs[0].type.shape.dims), sorted(n for n in sys.modules if n.startswith("onyx.inference.")))
"""
    out = _fresh(code)
    assert out.startswith("[2, 3] "), out
    assert "onyx.inference.contrib" not in out and "onyx.inference.control" not in out


def test_the_rule_table_lists_every_rule_when_read_whole():
    from onyx.inference import RULES

    assert set(RULES) == set(_index.MODULES) | {k for k in dict.keys(RULES)}
    assert ("com.microsoft", "Attention") in RULES or not any(
        k == ("com.microsoft", "Attention") for k in _index.MODULES
    )
    assert RULES.get(("", "Conv")) is not None and RULES[("", "If")] is not None


def test_a_lazily_loaded_rule_is_used():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3])
    g = helper.make_graph([node], "g", [x], [y])
    m = onyx.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert list(m.graph.outputs[0].type.shape.dims) == [1, 2, 3]
