"""Graph optimizer: ``onyx.optimize(model, level='basic' | 'extended' | 'all', disabled=())``.

    optimized = onyx.optimize(model, level="extended", disabled=["GeluFusion"])

The caller's model is never changed: the optimizer edits a clone. Levels follow onnxruntime's
``graph_optimization_level``: basic passes keep the standard ops (constant folding, shape
folding, no-op/identity/dropout elimination, common subexpressions, dead code and unused
initializers); extended passes fuse patterns (first QDQ node units into QLinearConv /
QLinearMatMul / com.microsoft QLinear* and QGemm, as onnxruntime's QDQSelectorActionTransformer;
then Conv+BatchNormalization/Add/Mul, MatMul+Add -> Gemm, activations into com.microsoft
FusedConv/FusedGemm, GELU, LayerNormalization, transpose pairs, and last elementwise chains on
8-bit tensors into ai.onyx TableLookup); 'all' is extended plus nothing more for now. Every pass has a name (see ``passes()``); names in ``disabled`` are skipped, as
onnxruntime's ``disabled_optimizers``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from .. import ir
from ..utils import gc_paused
from .core import ALL, BASIC, LEVELS, PassContext, PassResult, clone_model
from .pipeline import CONFINED, PIPELINE, QUIET, QUIET_WITHOUT, SELF_QUIET

__all__ = ["PassResult", "optimize", "optimize_for_session", "passes"]

#: The passes optimize runs (pipeline.py's list; a test may swap it).
PASSES = list(PIPELINE)

#: Basic passes repeat until nothing changes, at most this many rounds.
MAX_ROUNDS = 4


def passes(level: str | int = "all") -> list[str]:
    """Names of the passes a level runs, in order."""
    lvl = _level(level)
    return [p.name for p in PASSES if p.level <= lvl]


def _level(level) -> int:
    if isinstance(level, str):
        try:
            return LEVELS[level.lower()]
        except KeyError:
            raise ValueError(
                f"unknown optimization level {level!r} (basic, extended, all)"
            ) from None
    return int(level)


def optimize(
    model: ir.Model,
    level: str | int = "all",
    disabled: Iterable[str] = (),
    *,
    stats=None,
    in_place: bool = False,
    for_session: bool = False,
    results: list | None = None,
    ordered: bool | None = None,
) -> ir.Model:
    """An optimized copy of ``model``. ``stats`` (a dict) receives per-pass change counts;
    ``results`` (a list) one :class:`PassResult` per pass run, in order.
    ``in_place``: optimize ``model`` itself, for a caller that owns it (the copy is not free).
    ``for_session``: the model is to run, not to be written: constants are folded whatever
    their size (a generated weight is otherwise made again on every run); it is a session's
    model, validated (not again here). ``ordered``: the caller knows the main graph's nodes are
    in topological order (a session sorts its model first), or not (None: found here)."""
    warned: list = []
    if not for_session:  # a session validated the model it optimizes
        from ..validation import validate

        validate(model, "the model to optimize", warned=warned)
    if ordered is None:
        ordered = _ordered(model, warned, for_session)
    with gc_paused():  # (a clone's and the rewrites' objects live on)
        return _optimize(
            model, _level(level), disabled, stats, in_place, for_session, results, ordered
        )


def _ordered(model: ir.Model, warned: list, for_session: bool) -> bool:
    """Whether the main graph's nodes are in topological order (pipeline.SELF_QUIET's rules
    need it): a model validated here is unless validation warned it is not; a session's model
    is not validated here, and a caller of optimize_for_session other than a session (which
    sorts a model out of order first) may give one out of order: its nodes are walked (a
    tenth to a third of a millisecond for the zoo's, under 1% of optimizing them)."""
    if for_session:
        return model.graph.in_topological_order()
    return not any(p.rule == "topological-order" for p in warned)


def _optimize(
    model, lvl: int, disabled, stats, in_place, for_session, results, ordered=False
) -> ir.Model:
    m = model if in_place else clone_model(model)
    if lvl <= 0:
        return m
    names, basic, fusions, layout, _ = _schedule(lvl, frozenset(disabled))
    ctx = PassContext(m, enabled=names, unbounded_folding=for_session, for_session=for_session)
    ctx.ordered = ordered
    ctx.record_results = results is not None  # (a session's thirty-odd runs each made one)
    # (the op types, found once here, are what the passes' triggers read too)
    if "Gradient" in ctx.op_types() and _names_values_in_attributes(m):
        return m
    m.graph.removed = []  # (the nodes the passes take out, unlinked at the end)
    try:
        _passes(ctx, basic, fusions, layout)
    finally:
        removed, m.graph.removed = m.graph.removed, None
        _unlink_removed(removed)
    if stats is not None:
        stats.update(ctx.stats)
    if results is not None:
        results.extend(ctx.results)
    if not for_session:  # (a session's graph is not written: see optimize_for_session)
        m.graph.inputs.extend(unlisted_initializers(m))
    return m


def unlisted_initializers(model: ir.Model) -> list[ir.Value]:
    """The main graph's initializers it does not list as inputs, where its IR version (below
    4) requires every initializer to be an input too: the ones the passes made (folded
    constants, fused weights), which a written model must list, or onnx's checker and onyx's
    refuse the file. (onnxruntime's optimized_model_filepath of an IR 3 model leaves them out,
    a file onnx's checker rejects.) Before IR 4 such inputs are constants all the same."""
    if not model.ir_version or model.ir_version >= 4:
        return []
    g = model.graph
    listed = {v.name for v in g.inputs}
    return [v for name, v in g.initializers.items() if name not in listed]


def _passes(ctx: PassContext, basic, fusions, layout) -> None:
    """The rounds of the basic passes, the fusions and the layout passes (see the module's
    docs), then the declared types back."""
    _rounds(ctx, basic)
    if fusions or layout:
        if not ctx.inferred:
            ctx.infer()  # the fusions read shapes
        for _ in range(MAX_ROUNDS * bool(fusions)):  # one fusion can enable another
            if not _run_all(ctx, fusions):
                break
            _rounds(ctx, basic)
        if _run_all(ctx, layout):
            _rounds(ctx, basic)
    ctx.finish()


def _unlink_removed(nodes: list[ir.Node]) -> None:
    """Let reference counting free the nodes the passes took out of the graph: a removed node
    and the outputs it still produces refer to each other, a cycle only the collector frees,
    after traversing it (a transformer's session left some 1,200 such objects, and collecting
    them cost its creation about 2%). Nothing reads a removed node's outputs any more."""
    for node in nodes:
        if node.graph is None:
            for v in node._outputs:  # noqa: SLF001
                if v.producer is node:
                    v.producer = None


#: (level, disabled, PASSES as they were) -> what _schedule made of them.
_SCHEDULES: dict[tuple, tuple] = {}


def _schedule(lvl: int, disabled: frozenset[str]) -> tuple:
    """(enabled pass names, basic passes, fusions, layout passes (once, on the fused
    graph), PASSES) of PASSES for a level and disabled names: the same for every session of a process
    with the same options (a test may swap PASSES: they are part of the key)."""
    # (by identity: a pass's hash would read its fields, importing its module; each entry
    # holds the passes it was made of, so their ids are not reused while it lives)
    key = (lvl, disabled, tuple(map(id, PASSES)))
    known = _SCHEDULES.get(key)
    if known is None:
        enabled = [p for p in PASSES if p.level <= lvl and p.name not in disabled]
        known = (
            frozenset(p.name for p in enabled),
            tuple(p for p in enabled if p.level == BASIC),
            tuple(p for p in enabled if BASIC < p.level < ALL),
            tuple(p for p in enabled if p.level >= ALL),
            tuple(PASSES),
        )
        if len(_SCHEDULES) >= 64:
            _SCHEDULES.clear()
        _SCHEDULES[key] = known
    return known


def _names_values_in_attributes(model: ir.Model) -> bool:
    """Gradient refers to values by name in its attributes, out of sight of the use relations
    every pass relies on: such graphs are left as written."""
    return any(
        n.op_type == "Gradient" and n.domain == "ai.onnx.preview.training"
        for n in model.graph.all_nodes()
    )


def _rounds(ctx: PassContext, passes) -> None:
    for _ in range(MAX_ROUNDS):
        if not _run_all(ctx, passes):
            break


def _run_all(ctx: PassContext, passes) -> bool:
    """Run each of ``passes`` in turn (see :func:`_run`); whether one changed the graph. A
    pass is skipped when it last found nothing to do on the graph as it still is (a pass is a
    function of the graph, so it would find nothing again: each round of the basic passes
    would otherwise rerun every pass after the last change once more), when the graph
    lacks its trigger op types, or when its gate (pipeline.GATES) finds nothing it could take.
    (The checks are made here, not in _run: most passes of a round are skipped; those whose
    triggers are missing are not even visited.)"""
    changed = False
    idle = ctx.idle
    order = _eligible(ctx, passes)
    k = 0
    while k < len(order):
        i = order[k]
        k += 1
        p = passes[i]
        if SKIP_IDLE and p.name in idle and _still_idle(ctx, p.name, idle[p.name]):
            continue
        if p.gate is not None and not p.gate(ctx):
            idle[p.name] = ctx.version  # (as a run that found nothing: the graph must change)
            continue
        changed |= _run(ctx, p)
        if ctx.graph._order is ctx._op_types[0]:  # noqa: SLF001
            continue  # (the node list as it was, the op types with it: most runs)
        now = _eligible(ctx, passes)  # (the pass may have changed the op types)
        if now is not order:
            order, k = now, _after(now, i)
    return changed


def _after(order: tuple[int, ...], i: int) -> int:
    """Where in the ascending ``order`` the positions after ``i`` start (bisect_right; bisect
    itself is an extension module to load, a quarter of a millisecond of a cold start, for a
    tuple of a few dozen)."""
    k = 0
    while k < len(order) and order[k] <= i:
        k += 1
    return k


def _eligible(ctx: PassContext, passes) -> tuple[int, ...]:
    """The positions in ``passes`` of those whose trigger op types the graph holds now
    (passes without triggers included), kept in the op types' verdict table: a round visits
    these alone (a small model meets few of the sixty-odd passes' triggers, and asking each
    of the others in every round cost it more than the passes it ran)."""
    verdicts = ctx.trigger_verdicts()
    key = ("eligible", id(passes))
    known = verdicts.get(key)
    if known is not None and known[0] is passes:  # (the entry holds passes: its id stays)
        return known[1]
    eligible = []
    for i, p in enumerate(passes):
        if p.triggers:
            verdict = verdicts.get(p.name)  # (its triggers kept: a test may swap a pass)
            if verdict is None or verdict[0] is not p.triggers:
                verdict = verdicts[p.name] = (p.triggers, ctx.may_change(p))
            if not verdict[1]:
                continue
        eligible.append(i)
    found = tuple(eligible)
    verdicts[key] = (passes, found)
    return found


#: Whether a pass that found nothing to change is skipped until the graph changes (in a way
#: that may give it something to do: pipeline.QUIET).
SKIP_IDLE = True


def _still_idle(ctx: PassContext, name: str, since: int) -> bool:
    """Whether pass ``name``, which left nothing it would do at version ``since``, still has
    nothing to do: the graph has not changed since, or each change since is one that gives
    this pass nothing new (pipeline.QUIET), or the pass's own, once it is done (SELF_QUIET;
    with the nodes in order, a pass's one walk sees each node's inputs as they stay)."""
    if since == ctx.version:
        return True
    quiet = QUIET.get(name)
    if quiet is None:
        return False
    own = SELF_QUIET.get(name) if ctx.ordered else None  # (None: its own changes count)
    for k, tag in enumerate(ctx.changes_since(since), since):
        if tag in quiet:
            continue
        absent = QUIET_WITHOUT.get(name)
        if absent is not None and tag in absent and absent[tag] not in ctx.op_types():
            continue
        if tag != name or own is None or (own and ctx.swept <= k):
            return False  # (own: the dead nodes it left, which it would take again, swept)
    return True


def _run(ctx: PassContext, p) -> bool:
    """Run pass ``p`` (that _run_all did not skip) and note its result."""
    log = ctx.counted
    log.clear()
    start = time.perf_counter() if ctx.record_results else 0.0
    before = ctx.version
    ctx.change_tag = None
    changed = bool(p.fn(ctx))
    if ctx.record_results:
        seconds = time.perf_counter() - start
        ctx.results.append(PassResult(p.name, changed, _tally(log), seconds))
    ctx.ran.add(p.name)
    if changed and SKIP_IDLE and p.name in CONFINED:
        ctx.idle[p.name] = ctx.version  # (it did all there was: the others' marks stand)
        return False
    if changed:
        ctx.changed(ctx.change_tag or p.name)
        ctx.idle[p.name] = before  # (what it found then is done: _still_idle asks the rest)
    else:
        ctx.idle[p.name] = ctx.version
    return changed


def _tally(log: list[tuple[str, int]]) -> dict[str, int]:
    """The net count by name of a pass run's ``PassContext.count`` calls (names whose counts
    came to 0 left out)."""
    if not log:
        return {}
    counted: dict[str, int] = {}
    for name, n in log:
        counted[name] = counted.get(name, 0) + n
    return {name: n for name, n in counted.items() if n}


def optimize_for_session(
    model: ir.Model, sess_options, in_place: bool = False, ordered: bool | None = None
) -> ir.Model:
    """What InferenceSession runs: ``model`` optimized per the session options
    (graph_optimization_level, disabled_optimizers), saved to optimized_model_filepath if set.
    ``in_place`` and ``ordered`` as for :func:`optimize`."""
    level = int(getattr(sess_options, "graph_optimization_level", ALL))
    disabled = getattr(sess_options, "disabled_optimizers", None) or ()
    optimized = optimize(
        model, level, disabled, in_place=in_place, for_session=True, ordered=ordered
    )
    path = getattr(sess_options, "optimized_model_filepath", "")
    if path:
        _save_listed(optimized, path)
    return optimized


def _save_listed(model: ir.Model, path: str) -> None:
    """Write a session's optimized ``model`` to ``path``, its initializers listed as inputs
    where its IR version requires (:func:`unlisted_initializers`); the session's own graph
    keeps its inputs (those are what get_overridable_initializers reports)."""
    from ..serde import save

    g = model.graph
    listed = len(g.inputs)
    g.inputs.extend(unlisted_initializers(model))
    try:
        save(model, path)
    finally:
        del g.inputs[listed:]
