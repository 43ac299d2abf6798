"""The package's shape: which modules may import which (every import statement counts, those
inside functions too: a lazy import still ties the modules together)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "onyx"


def _modules() -> dict[str, Path]:
    mods = {}
    for p in ROOT.rglob("*.py"):
        name = ".".join(p.relative_to(ROOT.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


MODULES = _modules()


def _imports(name: str) -> set[str]:
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = base + ("." + node.module if node.module else "")
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name) for name in MODULES}


def _reaches(a: str, b: str) -> bool:
    seen, stack = set(), [a]
    while stack:
        m = stack.pop()
        if m == b:
            return True
        if m not in seen:
            seen.add(m)
            stack.extend(GRAPH.get(m, ()))
    return False


@pytest.mark.parametrize(
    "a, b",
    [
        ("onyx.checker", "onyx.inference"),
        ("onyx.ir.attr", "onyx.ir.graph"),
        ("onyx.inference.engine", "onyx.inference.elementwise"),
        ("onyx.serde.model_io", "onyx.runtime.session"),
    ],
)
def test_no_import_circle(a, b):
    assert not (_reaches(a, b) and _reaches(b, a)), f"{a} and {b} import each other"


def test_the_ir_imports_nothing_of_onyx_but_itself():
    outside = {(m, d) for m in GRAPH if m.startswith("onyx.ir") for d in GRAPH[m] if d != "onyx"}
    assert {(m, d) for m, d in outside if not d.startswith("onyx.ir")} == set()
