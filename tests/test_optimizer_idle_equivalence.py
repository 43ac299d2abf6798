"""A guard on the pass manager's shortcuts, whose rules are claims about what each pass reads
(pipeline.QUIET, QUIET_WITHOUT, SELF_QUIET, CONFINED, a local fusion's tag, the eligible
passes found again only after the node list changed): over a broad set of graphs (a fixed
sample of onnx's backend node cases, tests/models/, the serving zoo when generated), the
optimized graph and the change counts are those of running every pass every round (SKIP_IDLE
off) and of finding the op types and the eligible passes again after every run. A rule made
wrong shows here (the last test)."""

from __future__ import annotations

import functools
import random
import warnings
from pathlib import Path

import pytest
from tools_node_suite import node_cases

import onyx.optimizer as opt
from onyx import serde

_ROOT = Path(__file__).resolve().parent.parent
_FILES = sorted((_ROOT / "tests" / "models").glob("*.onnx")) + sorted(
    (_ROOT / "benchmarks" / "models" / "serving").glob("*.onnx")
)
#: How many of onnx's node cases (some 1,900) each run optimizes, drawn by a fixed seed: the
#: ways of optimizing them take a millisecond or two each.
SAMPLE = 400

#: The ways of optimizing compared: the optimizer's own options (the session's, a file's, with
#: the passes the quiet rules lean on most disabled).
OPTIONS = (
    {"for_session": True},
    {},
    {"for_session": True, "disabled": ["DeadCodeElimination"]},
    {"for_session": True, "disabled": ["CommonSubexpressionElimination", "ConstantFolding"]},
)
#: Those the model files (a few seconds each way: transformers and CNNs) are optimized with.
FILE_OPTIONS = OPTIONS[:1]


@functools.cache
def _sampled_node_cases() -> list[tuple[str, bytes]]:
    cases = sorted(node_cases(), key=lambda c: c.name)
    picked = random.Random(23).sample(cases, min(SAMPLE, len(cases)))
    return [(c.name, c.model.SerializeToString()) for c in picked]


def _optimized(data: bytes, options: dict) -> tuple:
    """The optimized model's bytes and change counts, or the kind of error optimizing it
    raised (the same either way is what counts)."""
    stats: dict[str, int] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = opt.optimize(serde.loads(data), "all", stats=stats, **options)
    except Exception as e:  # noqa: BLE001 (a model the optimizer refuses: refused alike)
        return (type(e).__name__,)
    return serde.dumps(out), stats


def _no_shortcuts(m) -> None:
    """Every pass run every round, and the op types (so the eligible passes) found again
    after every run, not only when the node list changed."""
    m.setattr(opt, "SKIP_IDLE", False)
    real = opt._run  # noqa: SLF001

    def run(ctx, p):
        changed = real(ctx, p)
        ctx._op_types = ([], frozenset())  # noqa: SLF001 (a list no graph holds: found again)
        return changed

    m.setattr(opt, "_run", run)


def _differing(models, options, monkeypatch) -> list[str]:
    """The names of ``models`` ((name, bytes)) optimized otherwise without the shortcuts."""
    fast = [_optimized(data, options) for _, data in models]
    with monkeypatch.context() as m:
        _no_shortcuts(m)
        full = [_optimized(data, options) for _, data in models]
    return [name for (name, _), a, b in zip(models, fast, full) if a != b]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(map(str, o.items())) or "file")
def test_node_cases_optimize_alike_without_the_shortcuts(options, monkeypatch):
    assert _differing(_sampled_node_cases(), options, monkeypatch) == []


@pytest.mark.parametrize("options", FILE_OPTIONS, ids=("session",))
def test_model_files_optimize_alike_without_the_shortcuts(options, monkeypatch):
    models = [(p.name, p.read_bytes()) for p in _FILES]
    # (the committed fixtures, 39 of them: the serving zoo's files join where it was made;
    # a fresh clone has none of them)
    assert sum(p.parent.name == "models" for p in _FILES) >= 30
    assert _differing(models, options, monkeypatch) == []


def test_a_wrong_quiet_rule_shows(monkeypatch):
    """ConstantFolding taken for quiet through ShapeFolding's changes (the shapes it folds are
    what ConstantFolding folds next): the expanded SpaceToDepth's graph then keeps what the
    rule skipped folding."""
    cases = [(c.name, c.model.SerializeToString()) for c in node_cases()]
    case = [c for c in cases if c[0] == "test_spacetodepth_example_expanded"]
    assert _differing(case, OPTIONS[0], monkeypatch) == []
    monkeypatch.setitem(
        opt.QUIET, "ConstantFolding", opt.QUIET["ConstantFolding"] | {"ShapeFolding"}
    )
    assert _differing(case, OPTIONS[0], monkeypatch) == [case[0][0]]
