"""String fields written as they were read.

ONNX's strings are UTF-8, yet a file may break that rule in a name or a doc string. protobuf
then hands the reader the field's bytes, and refuses those bytes when they are assigned back.
These setters write such a value through the wire format instead, so that saving a model that
was loaded gives back its bytes unchanged (lossless) rather than failing.
"""

from __future__ import annotations

from collections.abc import Iterable

_ERRORS = (UnicodeError, ValueError, TypeError)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _raw(msg, field: str, value) -> None:
    data = value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogateescape")
    number = msg.DESCRIPTOR.fields_by_name[field].number
    msg.MergeFromString(_varint(number << 3 | 2) + _varint(len(data)) + data)


def set_text(msg, field: str, value) -> None:
    """``msg.<field> = value`` for a string field, bytes that are not UTF-8 included."""
    try:
        setattr(msg, field, value)
    except _ERRORS:
        _raw(msg, field, value)


def extend_text(msg, field: str, values: Iterable) -> None:
    """``msg.<field>.extend(values)`` for a repeated string field, in order."""
    values = list(values)
    repeated = getattr(msg, field)
    start = len(repeated)
    try:
        repeated.extend(values)
    except _ERRORS:
        del repeated[start:]
        for v in values:
            try:
                repeated.append(v)
            except _ERRORS:
                _raw(msg, field, v)
