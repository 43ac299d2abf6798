"""A message's set fields, read in one call.

Each accessor of a generated (upb) message costs about as much as listing every set field at
once, and a model has hundreds of nodes, attributes and tensors: the reader lists them once per
message and looks the rest up in a dict.
"""

from __future__ import annotations


def set_fields(msg) -> dict:
    """Field name -> value for exactly the fields HasField (singular) or a length (repeated)
    would report."""
    return {fd.name: value for fd, value in msg.ListFields()}


def written_empty(fields: dict, names) -> tuple[str, ...]:
    """The optional scalar ``names`` written with their default value (a proto2 field can be
    present and empty; writing it back keeps it)."""
    return tuple(f for f in names if f in fields and not fields[f])
