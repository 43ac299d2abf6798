"""What onnxruntime accepts beyond the spec, made runnable before a session plans the model.

Exporters users rely on write models the spec forbids but onnxruntime runs; onyx runs them the
same way (docs/compatibility.md lists each case; ``onyx.check`` still reports them):

- a negative ``dim_value`` (PaddlePaddle writes -1 for the batch dim) is a dynamic dim;
- nodes out of topological order (an fp16 converter appends its Casts at the end) are sorted,
  stably, as onnxruntime's graph resolution does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from .. import ir


def accept_lenient(model: ir.Model, owned: bool, ordered: bool = False) -> tuple[ir.Model, bool]:
    """``model`` (copied first unless ``owned``) with the onnxruntime leniencies above resolved,
    and whether the caller owns the result. A model that needs none is returned as it is.
    ``ordered``: the caller knows every graph is in order (the checker found no
    "topological-order" problem), so none is walked for it."""
    graphs = list(_graphs(model))
    unsorted = [] if ordered else [g for g in graphs if not g.in_topological_order()]
    negative = _any_negative_dim(graphs)
    if not unsorted and not negative:
        return model, owned
    if not owned:
        from ..optimizer.core import clone_model

        # (a clone shares the local functions with the caller's model: their bodies stay as
        # they are, and the plan runs them as written)
        model, owned = clone_model(model), True
        graphs = list(_nested(model.graph))
    for g in graphs:
        if not g.in_topological_order():
            g.topological_sort()
        if negative:
            for v in _typed_values(g):
                if _has_negative_dim(v.type):
                    v.type = _dynamic_negatives(v.type)
    return model, owned


def _graphs(model: ir.Model) -> Iterator[ir.Graph]:
    """The main graph, local functions' bodies, and every subgraph within them."""
    bodies = [model.graph, *(f.graph for f in model.functions.values())]
    for g in bodies:
        yield from _nested(g)


def _nested(graph: ir.Graph) -> Iterator[ir.Graph]:
    yield graph
    for node in graph.nodes:
        for sub in node.subgraphs():
            yield from _nested(sub)


def _typed_values(graph: ir.Graph) -> Iterator[ir.Value]:
    yield from graph.values()
    yield from graph.outputs
    yield from graph.value_info


def _any_negative_dim(graphs: list[ir.Graph]) -> bool:
    seen: set[int] = set()  # (values share their type objects)
    for g in graphs:
        for v in _typed_values(g):
            t = v.type
            if t is not None and id(t) not in seen:
                seen.add(id(t))
                if _has_negative_dim(t):
                    return True
    return False


def _has_negative_dim(t) -> bool:
    shape = getattr(t, "shape", None)
    return shape is not None and any(isinstance(d, int) and d < 0 for d in shape.dims)


def _dynamic_negatives(t):
    dims = tuple(None if isinstance(d, int) and d < 0 else d for d in t.shape.dims)
    return dataclasses.replace(t, shape=dataclasses.replace(t.shape, dims=dims))
