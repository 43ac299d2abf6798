"""onyx where: everything onyx knows about an operator, and where each fact lives.

    onyx where Conv
    onyx where Gelu --domain com.microsoft

Read from the registries themselves: the schema versions (onyx/defs), the shape inference
rule (onyx/inference), the kernels with the opset each starts at and the op's traits
(onyx/runtime/registry.py), the optimizer passes that name the op, and the native library
entry points its kernels call.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import textwrap
from collections.abc import Callable

HELP = (
    "show an operator's schema versions, inference rule, kernels, traits, fusions and native paths"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("op", help="operator type, e.g. Conv")
    p.add_argument("--domain", default="", help="operator domain ('' or ai.onnx: the standard)")


def main(args) -> int:
    domain = "" if args.domain in ("", "ai.onnx") else args.domain
    lines = describe(args.op, domain)
    print("\n".join(lines))
    return 0 if len(lines) > 1 else 1


def describe(op: str, domain: str = "") -> list[str]:
    """The report's lines (just the header when onyx knows nothing of the op)."""
    from ..runtime.registry import registered

    kernels = registered().get((domain, op), [])
    sections = [
        ("schema (onyx/defs)", _schemas(op, domain)),
        ("shape inference (onyx/inference)", _rule(op, domain)),
        ("kernels (onyx/runtime/kernels)", [_kernel_line(k) for k in kernels]),
        ("traits (@op keywords)", _traits(op, domain) if kernels else []),
        ("optimizer passes naming it (onyx/optimizer/pipeline.py)", _passes(op)),
        ("native entry points its kernels call (onyx/runtime/native)", _native(kernels)),
    ]
    lines = [f"{domain or 'ai.onnx'}::{op}"]
    if not any(found for _, found in sections):
        return lines
    for title, found in sections:
        lines.append(f"{title}:")
        lines += [f"  {line}" for line in found] or ["  (none)"]
    return lines


def _where(fn: Callable) -> str:
    try:
        path = inspect.getsourcefile(fn) or "?"
        line = inspect.getsourcelines(fn)[1]
    except (TypeError, OSError):  # a numpy ufunc registered as it is
        return f"{getattr(fn, '__name__', fn)!s} (numpy)"
    short = path[path.rfind("onyx/") :] if "onyx/" in path else path
    return f"{fn.__module__}.{fn.__qualname__} ({short}:{line})"


def _schemas(op: str, domain: str) -> list[str]:
    from ..defs import schema_versions

    out = []
    for s in schema_versions(op, domain):
        notes = [
            n for n, on in (("function body", s.has_function), ("deprecated", s.deprecated)) if on
        ]
        out.append(f"since opset {s.since_version}" + (f" ({', '.join(notes)})" if notes else ""))
    return out


def _rule(op: str, domain: str) -> list[str]:
    from ..defs import get_schema
    from ..inference import RULES

    fn = RULES.get((domain, op))
    if fn is not None:
        return [f"rule {_where(fn)}"]
    schema = get_schema(op, None, domain)
    if schema is None:
        return []
    if schema.has_function:
        return ["no rule: inferred through the op's function body"]
    return ["no rule: element types from the schema's type constraints"]


def _kernel_line(k) -> str:
    return f"since opset {k.since}: {_where(k.fn)}"


def _traits(op: str, domain: str) -> list[str]:
    from ..runtime.registry import traits

    t = traits(op, domain)
    threads = t.threads
    if callable(threads):
        threads = f"decided per node by {_where(threads)}"
    return [
        f"elementwise={t.elementwise}",
        f"deterministic={t.deterministic}",
        f"threads={threads}",
    ]


def _trees(fn: Callable, depth: int = 2) -> list[ast.AST]:
    """The syntax trees of ``fn`` and of the onyx functions it refers to, ``depth`` references
    deep (how the passes and kernels reach the ops they name and the native code they call)."""
    seen: dict[int, ast.AST] = {}
    todo = [(fn, 0)]
    while todo:
        f, level = todo.pop(0)  # (breadth first: each function at its shortest depth)
        if id(f) in seen:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(f)))
        except (TypeError, OSError, SyntaxError):  # a ufunc, a lambda inside an expression
            continue
        seen[id(f)] = tree
        if level == depth:
            continue
        for helper in _referenced(f):
            if inspect.isfunction(helper) and helper.__module__.startswith("onyx."):
                todo.append((helper, level + 1))
    return list(seen.values())


def _referenced(f: Callable) -> list:
    """The module-level and closed-over objects ``f`` names (its nested lambdas included)."""
    names, codes = set(), [f.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes += [c for c in code.co_consts if inspect.iscode(c)]
    found = [f.__globals__[n] for n in names if n in f.__globals__]
    for cell in f.__closure__ or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    return found


def _strings(fn: Callable) -> set[str]:
    return {
        node.value
        for tree in _trees(fn, depth=1)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def _passes(op: str) -> list[str]:
    from ..optimizer.pipeline import PIPELINE

    level = {1: "basic", 2: "extended"}
    return [
        f"{p.name} ({level.get(p.level, p.level)}): {_where(p.fn)}"
        for p in PIPELINE
        if op in _strings(p.fn)
    ]


def _native(kernels) -> list[str]:
    found: dict[str, None] = {}
    for k in kernels:
        for tree in _trees(k.fn, depth=3):
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "native"
                ):
                    found.setdefault(_native_name(node.attr))
    return list(found)


def _native_name(name: str) -> str:
    """native.X with the family module that defines it."""
    from ..runtime import native

    module = getattr(getattr(native, name, None), "__module__", None) or ""
    if module.startswith("onyx.runtime.native."):
        return f"native.{name} ({module.replace('.', '/')}.py)"
    return f"native.{name}"
