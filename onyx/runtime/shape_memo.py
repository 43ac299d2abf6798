"""A generated runner's shape memo (plan.py's ``_generate``): the steps of a schedule that
compute from graph inputs' shapes and constants only (Shape/Size of a graph input, then
deterministic ops on those and constants: an RNN export's initial state, a transformer's
dynamic axes), hoisted to the runner's front and run once per input-shape signature. Apart
from plan.py: a schedule without a Shape or Size step (a CNN's) has no memo, and its
session's creation no longer unmarshals this code with the plan's."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import ir
from .bind import Step
from .plan import Plan, _last_reads
from .registry import traits

#: Ops whose result is a function of their input's shape alone: the roots of a shape memo.
SHAPE_OPS = frozenset({("", "Shape"), ("", "Size")})
#: Input signatures a runner's shape memo keeps (a new one past this starts it afresh).
MEMO_SIGNATURES = 16
#: Bytes of values a shape memo keeps per signature at most (a large ConstantOfShape output
#: is computed at every run rather than held).
MEMO_BYTES = 1 << 16


class ShapeMemo:
    """The steps of a schedule that compute from graph inputs' shapes and constants only
    (Shape/Size of a graph input, then deterministic ops on those and constants: the shape
    arithmetic of models exported with dynamic axes), run once per input-shape signature.
    The runner keeps their values that later steps or the outputs read, read-only (a caller
    gets copies: as_array_result), keyed by the shapes of the inputs the Shape/Size steps
    read."""

    def __init__(self, steps: list[Step], key_slots: list[int], exports: list[int]):
        self.steps, self.ids = steps, {id(s) for s in steps}
        self.key_slots, self.exports = key_slots, exports
        self.values: dict = {}

    def head_lines(self) -> list[str]:
        is_array = " and ".join(f"v{i}.__class__ is _nd" for i in self.key_slots)
        key = "".join(f"v{i}.shape, " for i in self.key_slots)
        return [
            f"        _k = ({key}) if {is_array} else None",
            "        _s = _memo.get(_k)",
            "        if _s is None:",
        ]

    def tail_lines(self) -> list[str]:
        names = "".join(f"v{i}, " for i in self.exports)
        return [
            f"            if _k is not None: _keep(_k, ({names}))",
            "        else:",
            f"            ({names}) = _s",
        ]

    def keep(self, key: tuple, values: tuple) -> None:
        if not all(v.__class__ is np.ndarray for v in values):
            return
        if sum(v.nbytes for v in values) > MEMO_BYTES:
            return
        for v in values:
            v.flags.writeable = False  # (later runs and their callers share them)
        if len(self.values) >= MEMO_SIGNATURES:
            self.values.clear()
        self.values[key] = values

    def frees(self, steps: list[Step], keep: set[int]) -> list[tuple[int, ...]]:
        """Each step's slots to delete after it, in the memo-first order: as Plan.schedule's,
        except that the memo's steps free only what they made and nothing later reads (the
        inputs they read stay: in the memo's other branch nothing deletes them)."""
        mine = {o for s in self.steps for o in s.outs if o >= 0}
        frees: list[list[int]] = [[] for _ in steps]
        n = len(self.steps)
        for slot, i in _last_reads(steps).items():
            if slot in keep or (i < n and slot not in mine) or (slot in mine and i >= n):
                continue
            frees[i].append(slot)
        return [tuple(f) for f in frees]


def shape_memo(plan: Plan, steps: list[Step], const_slots: set[int], out_slots) -> Any:
    """The schedule's shape memo (ShapeMemo), or None where it has no shape steps."""
    inputs = set(plan.input_slots)
    shaped: set[int] = set()  # slots the memo's steps make
    chosen: list[Step] = []
    key_slots: list[int] = []
    for s in steps:
        node = s.node
        if s.takes_ctx or not s.reads or not all(o >= 0 for o in s.outs):
            continue
        op = (ir.canonical_domain(node.domain), node.op_type)
        if op in SHAPE_OPS and len(s.reads) == 1 and s.reads[0] in inputs:
            key_slots += [r for r in s.reads if r not in key_slots]
        elif not (
            all(r in shaped or r in const_slots for r in s.reads)
            and any(r in shaped for r in s.reads)
            and traits(node.op_type, op[0]).deterministic
        ):
            continue
        chosen.append(s)
        shaped.update(s.outs)
    if not chosen:
        return None
    later = {r for s in steps if all(s is not c for c in chosen) for r in s.reads}
    exports = sorted(o for o in shaped if o in later or o in out_slots)
    return ShapeMemo(chosen, key_slots, exports)
