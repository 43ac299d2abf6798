"""Validate before transforming: what a session and the optimizer require of a model.

``InferenceSession`` and ``onyx.optimize`` call :func:`validate` first, so that their passes
and the plan may assume a well-formed graph: every node's arity, attribute types and required
attributes match its schema, element types exist, names are defined once, the graph has no
cycle, local functions do not recurse, sparse indices are in range, and attributes that size
buffers (kernels, dilations, strides, pads, axes) are in a sane range. It is the checker's one
pass over the IR (``onyx.checker``), with its problems sorted in three:

* errors (``ERRORS``): raised together as one ``ValidationError``;
* onnxruntime's leniencies (``LENIENCIES``): a model that breaks only those still runs, as it
  does in onnxruntime; a ``ValidationWarning`` names them;
* the rest (a graph without a name, an IR version older than a feature...): rules of the
  standard that ``onyx.check`` reports but no runtime enforces.
"""

from __future__ import annotations

import warnings

from .checker import Problem, problems
from .errors import ValidationError
from .ir import Model

__all__ = ["ERRORS", "LENIENCIES", "ValidationWarning", "validate"]

#: Problems no transformation or kernel can work around.
ERRORS = frozenset(
    {
        "graph",  # the model has no graph
        "node",  # a node without op_type
        "input-count",
        "output-count",
        "missing-input",  # a required input omitted ('')
        "attribute-type",
        "attribute-required",
        "attribute-value",
        "elem-type",  # a graph input of element type 0
        "tensor-type",
        "tensor-dims",
        "dim-range",  # a declared dim over 2**62: shapes computed from it overflow
        "tensor-data-size",
        "sparse-tensor",
        "ssa",  # a name defined twice, e.g. a graph input declared twice
        "cycle",
        "function-recursion",
        "undefined-input",
        "graph-output",
        "empty-name",
        "external-data",
    }
)
#: Problems onnxruntime accepts (and onyx's runtime with it).
LENIENCIES = frozenset({"topological-order", "negative-dim", "removed-attribute-value"})


class ValidationWarning(UserWarning):
    """A model breaks a rule of the standard that onnxruntime (and so onyx) tolerates."""


def validate(
    model: Model, what: str = "the model", *, warned: list[Problem] | None = None
) -> list[Problem]:
    """Raise ``ValidationError`` listing the model's errors; warn about its leniencies (and
    add them to ``warned``, when given).

    Returns the problems that were neither (for a caller that wants to show them)."""
    found = problems(model)
    errors = [p for p in found if p.rule in ERRORS]
    if errors:
        raise ValidationError(errors)
    lenient = [p for p in found if p.rule in LENIENCIES]
    if warned is not None:
        warned.extend(lenient)
    if lenient:
        listed = "; ".join(str(p) for p in lenient[:5])
        more = f" (and {len(lenient) - 5} more)" if len(lenient) > 5 else ""
        warnings.warn(
            f"{what} breaks rules onnxruntime tolerates: {listed}{more}",
            ValidationWarning,
            stacklevel=3,
        )
    return [p for p in found if p.rule not in ERRORS and p.rule not in LENIENCIES]
