"""Symbolic shape inference: onyx against onnxruntime's tool, dim by dim.

For every model of the corpus, both ``onyx.infer_shapes`` and onnxruntime's
``SymbolicShapeInference.infer_shapes(model, auto_merge=True)`` (it needs sympy) infer every
value's shape from the graph inputs and initializers alone (value_info is dropped first). Each
dim of each value both type is then evaluated under a few random bindings of the input dims'
symbols, so naming does not matter (``past + seq`` and ``seq + past_seq`` ... agree when their
values do). A dim is *known* when it evaluates under every binding: a number or an expression
of the input dims; a fresh name (``unk__3``, onnxruntime's ``NonZero_o0__d1``) is not.

    python scripts/symbolic_shape_parity.py                    # the table on stdout
    python scripts/symbolic_shape_parity.py --write-docs       # also docs/shape_inference.md
    python scripts/symbolic_shape_parity.py --details bert     # the disagreeing dims of a model
    python scripts/symbolic_shape_parity.py --run              # also both against real runs

``--run`` runs each model in onnxruntime (optimizations off, every value an output) on its
fixture's feeds (``<model>.npz``) or simple ones, binds the input symbols to the feed's dims
and counts, for each tool, the known dims that match the run's shapes and those that do not.

Corpus: the exporter and real-model fixtures (tests/models), the transformer zoo
(tests/models/transformers, made by scripts/make_transformer_zoo.py), the precision zoo
(tests/models/zoo) and the serving zoo (benchmarks/models/serving, copied from a checkout that
has it). Dev-time only: needs onnx, onnxruntime and sympy (the test extra).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import re
import sys
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CORPUS = [
    ("exporters", ROOT / "tests" / "models"),
    ("transformers", ROOT / "tests" / "models" / "transformers"),
    ("zoo", ROOT / "tests" / "models" / "zoo"),
    ("serving", ROOT / "benchmarks" / "models" / "serving"),
]
DOC = ROOT / "docs" / "shape_inference.md"
BINDINGS = 4


def corpus_models() -> list[tuple[str, Path]]:
    out = []
    for group, folder in CORPUS:
        if not folder.is_dir():
            continue
        for p in sorted(folder.glob("*.onnx")):
            out.append((group, p))
        for p in sorted(folder.glob("*/model.onnx")):
            out.append((group, p))
    return out


@dataclass
class Tally:
    values: int = 0
    dims: int = 0
    agree: int = 0
    onyx_only: int = 0
    ort_only: int = 0
    disagree: int = 0
    unknown: int = 0
    details: list = field(default_factory=list)

    def add(self, other: Tally) -> None:
        for k in ("values", "dims", "agree", "onyx_only", "ort_only", "disagree", "unknown"):
            setattr(self, k, getattr(self, k) + getattr(other, k))


# -- the two sides --------------------------------------------------------------------------------


def _strip_value_info(model):
    del model.graph.value_info[:]
    return model


def ort_shapes(path: Path) -> dict[str, list]:
    """value name -> dims (int or str) from onnxruntime's symbolic shape inference.

    Its driver (``infer_shapes``) raises on the first op it cannot handle and keeps nothing, so
    it is run here the same way but with each op's handler made tolerant: a node it fails on
    keeps what onnx's own inference gave it, and the values it did infer count."""
    import onnx
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    model = _strip_value_info(onnx.load(str(path), load_external_data=False))
    tool = SymbolicShapeInference(2**31 - 1, True, False, 0)
    for op, handler in list(tool.dispatcher_.items()):
        tool.dispatcher_[op] = _tolerant(handler)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tool._preprocess(model)  # noqa: SLF001  (its driver, minus the raise)
        rounds = 0
        while tool.run_ and rounds < 32:
            rounds += 1
            try:
                tool._infer_impl()  # noqa: SLF001
            except Exception:  # noqa: BLE001  (keep what it inferred so far)
                break
    shapes = {}
    for name, vi in tool.known_vi_.items():
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not t.HasField("shape"):
            continue
        shapes[name] = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim
        ]
    return shapes


def _tolerant(handler):
    def run(node):
        try:
            handler(node)
        except Exception:  # noqa: BLE001,S110  (the node keeps onnx's inference)
            pass

    return run


def onyx_shapes(path: Path) -> dict[str, list]:
    """value name -> dims from onyx.infer_shapes (symbolic)."""
    from onyx.inference import infer_shapes
    from onyx.serde import load

    model = load(str(path), load_external_data=False)
    g = model.graph
    for v in list(g.value_info):
        g.value_info.remove(v)
    for n in g:  # (declared types of node outputs go too, graph outputs' included, as
        # onnxruntime's tool ignores them: only what follows from the inputs counts)
        for v in n.outputs:
            v.type = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        infer_shapes(model)
    shapes = {}
    for n in g:
        for v in n.outputs:
            if v.name and v.type is not None and getattr(v.type, "shape", None) is not None:
                shapes[v.name] = list(v.type.shape.dims)
    return shapes


def input_symbols(path: Path) -> list[str]:
    from onyx.inference import symbolic
    from onyx.serde import load

    model = load(str(path), load_external_data=False)
    names = []
    for v in model.graph.inputs:
        shape = getattr(v.type, "shape", None)
        for d in getattr(shape, "dims", ()) or ():
            # (an input dim may itself be an expression: "past_sequence_length + sequence_length")
            for name in sorted(symbolic.symbols_of(d)):
                if name not in names:
                    names.append(name)
    return names


# -- evaluating dims ------------------------------------------------------------------------------

_SYMPY_NAME = re.compile(r"[A-Za-z_][\w.:\-]*")


def eval_ort(dim, binding: dict[str, int]):
    """onnxruntime's dim (a sympy expression's string) under a binding; None when it names
    something unbound or is no integer there."""
    if dim is None:
        return None
    if isinstance(dim, int):
        return dim
    import sympy

    if dim in binding:
        return binding[dim]
    local = {name: sympy.Symbol(name, integer=True, nonnegative=True) for name in binding}
    local.update({"floor": sympy.floor, "ceiling": sympy.ceiling, "Mod": sympy.Mod})
    local.update({"Max": sympy.Max, "Min": sympy.Min})
    try:
        expr = sympy.sympify(dim, locals=local)
        value = expr.subs({local[k]: v for k, v in binding.items()})
        if not value.is_number or not value.is_integer:
            return None
        return int(value)
    except (sympy.SympifyError, TypeError, SyntaxError, AttributeError, ValueError):
        return None


def eval_onyx(dim, binding: dict[str, int]):
    from onyx.inference import symbolic

    return symbolic.evaluate(dim, binding)


def compare(name: str, path: Path, group: str) -> Tally:
    ort = ort_shapes(path)
    ours = onyx_shapes(path)
    symbols = input_symbols(path)
    rng = random.Random(zlib.crc32(name.encode()))  # (str hashes change per process)
    bindings = [{s: rng.randint(2, 31) for s in symbols} for _ in range(BINDINGS)]
    t = Tally()
    for value, dims in ours.items():
        theirs = ort.get(value)
        if theirs is None:
            continue
        t.values += 1
        if len(theirs) != len(dims):
            t.disagree += 1
            t.details.append((value, dims, theirs, "rank"))
            continue
        for a, b in zip(dims, theirs):
            t.dims += 1
            va = [eval_onyx(a, bd) for bd in bindings]
            vb = [eval_ort(b, bd) for bd in bindings]
            ka, kb = None not in va, None not in vb
            if ka and kb:
                if va == vb:
                    t.agree += 1
                else:
                    t.disagree += 1
                    t.details.append((value, dims, theirs, f"{a} != {b}"))
            elif ka:
                t.onyx_only += 1
            elif kb:
                t.ort_only += 1
                t.details.append((value, dims, theirs, f"ort knows {b}"))
            else:
                t.unknown += 1
    return t


# -- checking both against a run ------------------------------------------------------------------


@dataclass
class RunTally:
    models: int = 0
    dims: int = 0
    onyx_right: int = 0
    onyx_wrong: int = 0
    ort_right: int = 0
    ort_wrong: int = 0
    wrong: list = field(default_factory=list)

    def add(self, other: RunTally) -> None:
        for k in ("models", "dims", "onyx_right", "onyx_wrong", "ort_right", "ort_wrong"):
            setattr(self, k, getattr(self, k) + getattr(other, k))


def _feeds(path: Path, inputs) -> dict:
    """The fixture's own feeds (``<model>.npz``: ``in.name`` or ``in:name``), else ones and
    small random floats with every symbolic dim 3 (batch) or 5."""
    npz = path.with_suffix(".npz") if path.name != "model.onnx" else path.parent.with_suffix(".npz")
    feeds = {}
    if npz.exists():
        import numpy as np

        z = np.load(npz)
        for k in z.files:
            if k[:3] in ("in.", "in:"):
                feeds[k[3:]] = z[k]
    if all(i.name in feeds for i in inputs):
        return feeds
    return synthetic_feeds(inputs)


def synthetic_feeds(inputs) -> dict:
    import numpy as np
    from onnx import helper

    feeds = {}
    for i in inputs:
        t = i.type.tensor_type
        dims = [
            d.dim_value if d.HasField("dim_value") else (3 if "batch" in d.dim_param else 5)
            for d in t.shape.dim
        ]
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[i.name] = (
            np.random.default_rng(0).random(dims).astype(dtype)
            if dtype.kind == "f"
            else np.zeros(dims, dtype)
        )
    return feeds


def run_shapes(path: Path):
    """(binding of the input symbols, value name -> shape) from an onnxruntime run that
    returns every value (optimizations off, so none is fused away)."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path), load_external_data=False)
    inputs = [
        i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}
    ]
    feeds = _feeds(path, inputs)
    binding: dict[str, int] = {}
    for i in inputs:
        for d, n in zip(i.type.tensor_type.shape.dim, feeds[i.name].shape):
            if d.dim_param and d.dim_param not in binding:
                binding[d.dim_param] = int(n)
    full = onnx.load(str(path))
    names = [o for n in full.graph.node for o in n.output if o]
    have = {o.name for o in full.graph.output}
    full.graph.output.extend(onnx.ValueInfoProto(name=o) for o in names if o not in have)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(full.SerializeToString(), options)
    outs = session.run(None, feeds)
    shapes = {
        o.name: list(v.shape) for o, v in zip(session.get_outputs(), outs) if hasattr(v, "shape")
    }
    return binding, shapes


def run_check(path: Path) -> RunTally:
    """Each tool's known dims, evaluated with the feed's dims, against the run's shapes."""
    binding, actual = run_shapes(path)
    ours, theirs = onyx_shapes(path), ort_shapes(path)
    t = RunTally(models=1)
    for value, shape in actual.items():
        for tool, dims in (("onyx", ours.get(value)), ("ort", theirs.get(value))):
            if dims is None:
                continue
            if len(dims) != len(shape):
                setattr(t, f"{tool}_wrong", getattr(t, f"{tool}_wrong") + 1)
                t.wrong.append((tool, value, dims, shape))
                continue
            for d, n in zip(dims, shape):
                v = eval_onyx(d, binding) if tool == "onyx" else eval_ort(d, binding)
                if v is None:
                    continue
                ok = v == n
                key = f"{tool}_{'right' if ok else 'wrong'}"
                setattr(t, key, getattr(t, key) + 1)
                if not ok:
                    t.wrong.append((tool, value, dims, shape))
        t.dims += len(shape)
    return t


# -- the report -----------------------------------------------------------------------------------

HEADER = "| model | values | dims | agree | onyx-only known | ort-only known | disagree |"


def row(label: str, t: Tally) -> str:
    return (
        f"| {label} | {t.values} | {t.dims} | {t.agree} | {t.onyx_only} | {t.ort_only} "
        f"| {t.disagree} |"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="models whose name contains this")
    ap.add_argument("--details", help="print the ort-only and disagreeing dims of these models")
    ap.add_argument("--write-docs", action="store_true", help=f"write {DOC.relative_to(ROOT)}")
    ap.add_argument(
        "--run", action="store_true", help="also check both tools' dims against onnxruntime runs"
    )
    args = ap.parse_args(argv)
    lines = [HEADER, "|---|---:|---:|---:|---:|---:|---:|"]
    total, failed = Tally(), []
    for group, path in corpus_models():
        name = path.stem if path.name != "model.onnx" else path.parent.name
        if args.only and args.only not in name:
            continue
        try:
            t = compare(name, path, group)
        except Exception as e:  # noqa: BLE001  (a model one tool cannot take is listed, not fatal)
            failed.append(f"{name}: {type(e).__name__}: {(str(e) or '').split(chr(10))[0][:100]}")
            continue
        total.add(t)
        lines.append(row(f"{group}/{name}", t))
        print(lines[-1], flush=True)
        if args.details and args.details in name:
            for d in t.details:
                print("   ", d)
    lines.append(row("**total**", total))
    print(lines[-1])
    for f in failed:
        print("not compared:", f)
    if args.run:
        lines += ["", *run_table(args)]
    if args.write_docs:
        write_docs(lines, failed)
    return 0


RUN_HEADER = (
    "| checked against a run | models | dims | onyx known, right | onyx wrong "
    "| ort known, right | ort wrong |"
)


def run_table(args) -> list[str]:
    """Both tools' dims against onnxruntime runs of every model that runs on its feeds."""
    out = [RUN_HEADER, "|---|---:|---:|---:|---:|---:|---:|"]
    groups: dict[str, RunTally] = {}
    skipped = []
    for group, path in corpus_models():
        name = path.stem if path.name != "model.onnx" else path.parent.name
        if args.only and args.only not in name:
            continue
        try:
            t = run_check(path)
        except Exception as e:  # noqa: BLE001  (a model that does not run on simple feeds)
            skipped.append(f"{name}: {type(e).__name__}")
            continue
        groups.setdefault(group, RunTally()).add(t)
        for tool, value, dims, shape in t.wrong:
            print(f"  {name}: {tool} says {dims} for {value}, the run gives {shape}")
    total = RunTally()
    for group, t in groups.items():
        total.add(t)
        out.append(_run_row(group, t))
    out.append(_run_row("**total**", total))
    print("\n".join(out))
    print(f"{len(skipped)} models did not run on their feeds: {', '.join(skipped)}")
    if skipped:
        out += ["", f"Not run ({len(skipped)}: no feeds they accept): {', '.join(skipped)}."]
    return out


def _run_row(label: str, t: RunTally) -> str:
    return (
        f"| {label} | {t.models} | {t.dims} | {t.onyx_right} | {t.onyx_wrong} "
        f"| {t.ort_right} | {t.ort_wrong} |"
    )


def write_docs(lines: list[str], failed: list[str]) -> None:
    text = DOC.read_text() if DOC.exists() else ""
    start = "<!-- parity table: scripts/symbolic_shape_parity.py --write-docs -->"
    end = "<!-- end of parity table -->"
    table = "\n".join([start, *lines, ""])
    if failed:
        table += "\nNot compared (one of the tools failed on the model):\n\n"
        table += "\n".join(f"- {f}" for f in failed) + "\n"
    table += end
    if start in text and end in text:
        text = text[: text.index(start)] + table + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + table + "\n"
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
