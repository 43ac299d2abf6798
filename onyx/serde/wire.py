"""The protobuf wire format at the level of top-level fields.

Used where the generated classes cannot go: messages over protobuf's 2 GiB limit, and big
tensors whose bytes should stay where they are (a memory-mapped file) instead of being copied
into a message. Only field boundaries are decoded here; field contents go to the generated
classes.
"""

from __future__ import annotations

from collections.abc import Iterator

VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def read_varint(buf, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise WireError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError(f"varint too long at byte {pos}")


def encode_varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(field: int, wire_type: int) -> bytes:
    return encode_varint((field << 3) | wire_type)


def len_prefix(field: int, length: int) -> bytes:
    """Tag and length of a length-delimited field."""
    return tag(field, LEN) + encode_varint(length)


def iter_fields(buf, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int, int]]:
    """Yield ``(field, start_of_field, start_of_payload, end_of_field)`` for each field.

    For LEN fields the payload is ``buf[start_of_payload:end_of_field]``; for the others the whole
    encoding ``buf[start_of_field:end_of_field]`` is what one keeps.
    """
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        field_start = pos
        key, pos = read_varint(buf, pos, end)
        field, wt = key >> 3, key & 7
        if field == 0:
            raise WireError(f"field number 0 at byte {field_start}")
        if wt == VARINT:
            _, pos = read_varint(buf, pos, end)
            payload = pos
        elif wt == LEN:
            length, payload = read_varint(buf, pos, end)
            pos = payload + length
        elif wt == I64:
            payload, pos = pos, pos + 8
        elif wt == I32:
            payload, pos = pos, pos + 4
        elif wt == SGROUP:
            payload = pos
            pos = _skip_group(buf, pos, end, field)
        else:
            raise WireError(f"bad wire type {wt} at byte {field_start}")
        if pos > end:
            raise WireError(f"field {field} at byte {field_start} runs past the end")
        yield field, field_start, payload, pos


def _skip_group(buf, pos: int, end: int, field: int) -> int:
    while True:
        key, pos = read_varint(buf, pos, end)
        if key & 7 == EGROUP:
            if key >> 3 != field:
                raise WireError(f"mismatched group end at byte {pos}")
            return pos
        wt = key & 7
        if wt == VARINT:
            _, pos = read_varint(buf, pos, end)
        elif wt == LEN:
            length, pos = read_varint(buf, pos, end)
            pos += length
        elif wt == I64:
            pos += 8
        elif wt == I32:
            pos += 4
        elif wt == SGROUP:
            pos = _skip_group(buf, pos, end, key >> 3)
        else:
            raise WireError(f"bad wire type {wt} at byte {pos}")
        if pos > end:
            raise WireError("group runs past the end")
