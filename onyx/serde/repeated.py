"""Long repeated floats and int64s of a message read from its wire bytes with numpy.

Why: a generated (upb) message converts a repeated float field to Python one element at a
time, about twice what numpy's ``tolist`` takes, and scikit-learn models hold attributes of
10**4 floats (an SVM's support vectors, a tree ensemble's thresholds). Serializing the one
attribute message is a copy in C; numpy then decodes the run of elements at once, making the
same Python floats. Repeated int64 varints are decoded with numpy into an array, which the IR
keeps (ir.Attr.of_array): as a list, the message's own conversion was faster than numpy's, but
a kernel that reads the array (a tree ensemble's ids) then needs no list at all.

Only the layouts writers produce are decoded: the elements written one after the other, packed
or not, starting at the field's first occurrence. Anything else (elements interleaved with other
fields, a malformed run) answers None and the caller converts element by element, as before.
"""

from __future__ import annotations

import numpy as np

from .wire import I32, LEN, VARINT, WireError, iter_fields, read_varint

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


def int_array(message, number: int, count: int) -> np.ndarray | None:
    """The ``count`` elements of repeated int64 field ``number`` (< 16: one-byte tags) of
    ``message`` as a read-only int64 array, or None. Its varints are decoded a byte position
    at a time over all elements (a tree ensemble's ids take one or two bytes), after checking
    that the run is the field's records: unpacked (onnx.proto's proto2 layout), each a tag
    byte right after the previous element's last byte; packed, one run of ``count``."""
    located = _first(message, number)
    if located is None or number >= 16:
        return None
    buf, wire_type, start, payload, end = located
    b = np.frombuffer(buf, np.uint8)
    if wire_type == LEN:
        last = np.flatnonzero(b[payload:end] < 0x80) + payload  # (each varint's last byte)
        if len(last) != count or last[-1] != end - 1:
            return None
        first = np.concatenate([[payload], last[:-1] + 1])
    elif wire_type == VARINT:
        pairs = b[start : start + 2 * count]
        if len(pairs) == 2 * count:  # every element one byte (ids under 128): tag, value pairs
            pairs = pairs.reshape(count, 2)
            values = pairs[:, 1]
            if (pairs[:, 0] == number << 3).all() and (values < 0x80).all():
                out = values.astype(np.int64)
                out.flags.writeable = False
                return out
        ends = np.flatnonzero(b[start:] < 0x80)[: 2 * count] + start  # (tags end at once)
        if len(ends) != 2 * count:
            return None
        tags, last = ends[0::2], ends[1::2]
        if (
            tags[0] != start
            or not (b[tags] == number << 3).all()
            or not np.array_equal(tags[1:], last[:-1] + 1)
        ):
            return None
        first = tags + 1
    else:
        return None
    return _varints(b, first, last)


def _varints(b: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray | None:
    """The int64 values of the varints spanning bytes first[i]..last[i] of ``b``."""
    lengths = last - first + 1
    longest = int(lengths.max())
    if longest > 10:
        return None
    values = (b[first] & 0x7F).astype(np.uint64)
    for j in range(1, longest):  # (byte j of every element: its last byte again where shorter)
        part = (b[np.minimum(first + j, last)] & 0x7F).astype(np.uint64)
        part <<= np.uint64(7 * j)
        part[lengths <= j] = 0
        values |= part
    out = values.view(np.int64)  # (two's complement: a negative int64 is a 10-byte varint)
    out.flags.writeable = False
    return out


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
