"""Shape and type inference: ``onyx.infer_shapes(model, strict=False, data_prop=True)``.

Every node output gets a type: element type, rank and dims where they can be known. Symbolic
dims are kept ("N" stays "N") and computed with as exact expressions (``symbolic.py``: Concat
of N and M rows has "M + N", a stride-2 Conv "floor((h + 1)/2)"), unknown ones get fresh
symbols, and small shape tensors are propagated (Shape -> Gather -> Concat -> Reshape). Rules live
in one module per op family and are registered by op type; an op without a rule is inferred
through its standard function body when it has one, else its element types come from the
schema's type constraints. A rule module is imported at the first lookup of one of its ops
(``_index.py``, written by scripts/gen_inference_index.py).

Conflicts between declared and inferred types are errors in strict mode (``ValidationError``)
and warnings otherwise. The model is annotated in place (Value types and graph.value_info) and
returned.
"""

from __future__ import annotations

from ..errors import ValidationError
from ..ir import Model

# the modules with data folds (their order is the folds' order); the other rule modules are
# imported at the first lookup of one of their ops (engine.RULES, _index.py)
from . import elementwise, tensor  # noqa: F401
from .engine import RULES, rule, run

__all__ = ["RULES", "infer_shapes", "rule"]


def infer_shapes(
    model,
    strict: bool = False,
    data_prop: bool = True,
    symbolic: bool = True,
    name_unknown: bool = True,
) -> Model:
    """Infer the type of every value of ``model`` (an ir.Model, a path or bytes).

    ``symbolic``: dims computed from symbolic ones are written as expressions
    (``past_sequence_length + sequence_length``, ``floor((h + 1)/2)``, ``4*batch``: see
    :mod:`onyx.inference.symbolic`); False writes them as unknown, as onnx's inference does.
    ``name_unknown``: a dim that cannot be known gets a fresh name (``unk__0``, ``unk__1``,
    ... as onnxruntime's tool names them), so two unknown dims are not taken as equal; False
    leaves it unset."""
    if not isinstance(model, Model):
        from ..serde import as_model

        model = as_model(model, load_external_data=False, user="infer_shapes")
    if model.graph is None:
        raise ValidationError("the model has no graph")
    return run(
        model, strict=strict, data_prop=data_prop, symbolic=symbolic, name_unknown=name_unknown
    )
