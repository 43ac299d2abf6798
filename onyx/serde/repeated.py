"""Long repeated floats of a message read from its wire bytes with numpy.

Why: a generated (upb) message converts a repeated float field to Python one element at a
time, about twice what numpy's ``tolist`` takes, and scikit-learn models hold attributes of
10**4 floats (an SVM's support vectors, a tree ensemble's thresholds). Serializing the one
attribute message is a copy in C; numpy then decodes the run of elements at once, making the
same Python floats. (Repeated int64 varints decoded with numpy were slower than the message's
own conversion: they stay with it.)

Only the layouts writers produce are decoded: the elements written one after the other, packed
or not, starting at the field's first occurrence. Anything else (elements interleaved with other
fields, a malformed run) answers None and the caller converts element by element, as before.
"""

from __future__ import annotations

import numpy as np

from .wire import I32, LEN, WireError, iter_fields, read_varint

#: Fields with fewer elements are converted element by element (below this the decoding's
#: fixed cost outweighs what it saves).
MIN_ELEMENTS = 512

_UNPACKED_FLOAT = np.dtype([("tag", "u1"), ("value", "<f4")])


def floats(message, number: int, count: int) -> list[float] | None:
    """The ``count`` elements of repeated float field ``number`` of ``message``, or None."""
    array = float_array(message, number, count)
    return None if array is None else array.tolist()


def float_array(message, number: int, count: int) -> np.ndarray | None:
    """The ``count`` elements of repeated float field ``number`` of ``message`` as a read-only
    float32 array (a view of the message's serialized bytes: nothing is decoded), or None."""
    located = _first(message, number)
    if located is None:
        return None
    buf, wire_type, start, payload, end = located
    if wire_type == LEN:  # packed: one run of little-endian float32
        if end - payload != 4 * count:
            return None
        return np.frombuffer(buf, "<f4", count, payload)
    if wire_type != I32 or start + 5 * count > len(buf) or buf[start] != (number << 3 | I32):
        return None
    run = np.frombuffer(buf, _UNPACKED_FLOAT, count, start)
    # each record a one-byte tag of this field and its 4 bytes: every record then starts at a
    # field boundary, so the run is the field's elements in order
    if not (run["tag"] == buf[start]).all():
        return None
    values = np.ascontiguousarray(run["value"])
    values.flags.writeable = False
    return values


def _first(message, number: int):
    """(wire bytes, wire type, start, payload start, end) of the field's first occurrence."""
    buf = message.SerializeToString()
    try:
        for field, start, payload, end in iter_fields(buf):
            if field == number:
                return buf, read_varint(buf, start, end)[0] & 7, start, payload, end
    except WireError:
        return None
    return None
