"""Strings (StringNormalizer, RegexFullMatch, StringSplit, StringConcat) and ImageDecoder.

Strings are numpy object arrays of Python ``str``; per-string work goes through ``np.frompyfunc``
since numpy has no vectorized kernels for object arrays.

ImageDecoder decodes what the standard library allows without new dependencies: PNG (zlib), BMP,
PNM and uncompressed TIFF. JPEG, JPEG 2000, WebP and compressed TIFF raise NotImplementedError.
"""

from __future__ import annotations

import re
import struct
import zlib

import numpy as np

from ..registry import op

# --- strings -------------------------------------------------------------------------------------


def _map_str(fn, x: np.ndarray, otype=object) -> np.ndarray:
    return np.asarray(np.frompyfunc(fn, 1, 1)(x), dtype=otype).reshape(x.shape)


_CASE_CHANGES = {"LOWER": str.lower, "UPPER": str.upper, "NONE": None}


@op("StringNormalizer", since=10)
def string_normalizer(
    X, *, case_change_action="NONE", is_case_sensitive=0, locale=None, stopwords=None
):
    # locale-independent: case changes and case-insensitive matching use Python's str methods
    if X.ndim not in (1, 2) or (X.ndim == 2 and X.shape[0] != 1):
        raise ValueError(f"StringNormalizer: input must be [C] or [1, C], got {X.shape}")
    if case_change_action not in _CASE_CHANGES:
        raise ValueError(f"StringNormalizer: unknown case_change_action {case_change_action!r}")
    words = X.reshape(-1)
    if stopwords:
        if is_case_sensitive:
            stop = set(stopwords)
            keep = _map_str(lambda w: w not in stop, words, bool)
        else:
            stop = {s.lower() for s in stopwords}
            keep = _map_str(lambda w: w.lower() not in stop, words, bool)
        words = words[keep]
    change = _CASE_CHANGES[case_change_action]
    if change is not None:
        words = _map_str(change, words)
    if words.size == 0:  # all dropped: a single empty string
        words = np.array([""], dtype=object)
    return words.reshape(X.shape[:-1] + (-1,))


@op("RegexFullMatch", since=20)
def regex_full_match(X, *, pattern):
    # Python's re covers the RE2 syntax used in practice (RE2 is a subset, minus \C and \pN forms)
    rx = re.compile(pattern)
    return _map_str(lambda s: rx.fullmatch(s) is not None, X, bool)


@op("StringSplit", since=20)
def string_split(X, *, delimiter=None, maxsplit=None):
    limit = -1 if maxsplit is None else maxsplit
    if delimiter:
        # an empty string has no substrings (as onnxruntime; Python would give [""])
        parts = [s.split(delimiter, limit) if s else [] for s in X.reshape(-1)]
    else:
        # split on runs of whitespace; leading and trailing whitespace is dropped, also from the
        # unsplit remainder that maxsplit leaves
        parts = [s.strip().split(None, limit) for s in X.reshape(-1)]
    counts = np.array([len(p) for p in parts], dtype=np.int64)
    width = int(counts.max()) if counts.size else 0
    y = np.full((len(parts), width), "", dtype=object)
    rows = np.repeat(np.arange(len(parts)), counts)
    cols = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    y[rows, cols] = [s for p in parts for s in p]
    return y.reshape(X.shape + (width,)), counts.reshape(X.shape)


@op("StringConcat", since=20)
def string_concat(X, Y):
    out = np.empty(np.broadcast_shapes(X.shape, Y.shape), dtype=object)
    np.add(X, Y, out=out)  # Python str concatenation, with numpy broadcasting
    return out


# --- ImageDecoder --------------------------------------------------------------------------------


class _Unsupported(NotImplementedError):
    pass


def _png(data: bytes) -> np.ndarray:
    pos, chunks, idat = 8, {}, []
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IDAT":
            idat.append(body)
        else:
            chunks.setdefault(kind, body)
        pos += 12 + length
        if kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    if interlace:
        raise _Unsupported("ImageDecoder: interlaced PNG is not supported")
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
    bits = depth * channels
    stride, bpp = (width * bits + 7) // 8, max(bits // 8, 1)
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8).reshape(height, stride + 1)
    rows = _png_unfilter(raw[:, 0], raw[:, 1:].astype(np.int32), bpp)
    if depth == 16:
        pixels = rows.reshape(height, -1, 2)[..., 0]  # keep the high byte
    elif depth < 8:
        pixels = np.unpackbits(rows.astype(np.uint8), axis=1).reshape(height, -1, depth)
        pixels = (pixels * (1 << np.arange(depth - 1, -1, -1))).sum(-1)[:, :width]
        if color == 0:  # scale grey levels to 0..255
            pixels = pixels * (255 // ((1 << depth) - 1))
    else:
        pixels = rows
    img = pixels.reshape(height, width, channels).astype(np.uint8)
    if color == 3:
        palette = np.frombuffer(chunks[b"PLTE"], np.uint8).reshape(-1, 3)
        img = palette[img[..., 0]]
    return img


def _png_unfilter(filters: np.ndarray, rows: np.ndarray, bpp: int) -> np.ndarray:
    """Undo PNG's per-row filters. None, Sub and Up vectorize over the row; Average and Paeth need
    the pixel to their left, so they step over a row's pixels (vectorized over a pixel's bytes)."""
    height, n = rows.shape
    out = np.zeros((height + 1, n + bpp), np.int32)  # a zero row above, zero bytes on the left
    for y, kind in enumerate(filters, start=1):
        f, prev, cur = rows[y - 1], out[y - 1], out[y]
        if kind == 0:
            cur[bpp:] = f
        elif kind == 1:
            cur[bpp:] = np.cumsum(f.reshape(-1, bpp), axis=0).reshape(-1) % 256
        elif kind == 2:
            cur[bpp:] = (f + prev[bpp:]) % 256
        else:
            for x in range(bpp, n + bpp, bpp):
                a, b, c = cur[x - bpp : x], prev[x : x + bpp], prev[x - bpp : x]
                if kind == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))
                cur[x : x + bpp] = (f[x - bpp : x] + pred) % 256
    return out[1:, bpp:]


def _bmp(data: bytes) -> np.ndarray:
    offset = struct.unpack("<I", data[10:14])[0]
    header_size, width, height, _, bpp, compression = struct.unpack("<IiiHHI", data[14:34])
    if compression not in (0, 3) or bpp not in (8, 24, 32):
        raise _Unsupported(f"ImageDecoder: BMP with {bpp} bits, compression {compression}")
    stride = (width * bpp // 8 + 3) // 4 * 4
    rows = np.frombuffer(data, np.uint8, stride * abs(height), offset).reshape(abs(height), stride)
    if bpp == 8:
        palette = np.frombuffer(data, np.uint8, count=4 * 256, offset=14 + header_size)
        img = palette.reshape(-1, 4)[rows[:, :width], 2::-1]
    else:
        img = rows[:, : width * bpp // 8].reshape(abs(height), width, bpp // 8)[..., 2::-1]
    return img if height < 0 else img[::-1]  # positive height: rows stored bottom-up


def _pnm(data: bytes) -> np.ndarray:
    text = re.sub(rb"#[^\n]*", b"", data[:512])
    fields = re.match(rb"(P[56])\s+(\d+)\s+(\d+)\s+(\d+)\s", text)
    if fields is None:
        raise _Unsupported("ImageDecoder: only binary PGM/PPM (P5/P6) are supported")
    magic, width, height, maxval = fields.group(1), *map(int, fields.groups()[1:])
    start = len(data) - (width * height * (3 if magic == b"P6" else 1) * (2 if maxval > 255 else 1))
    pixels = np.frombuffer(data, ">u2" if maxval > 255 else np.uint8, offset=start)
    if maxval != 255:
        pixels = np.round(pixels.astype(np.float64) * 255 / maxval)
    return pixels.astype(np.uint8).reshape(height, width, -1)


_TIFF_TYPES = {3: "H", 4: "I"}


def _tiff(data: bytes) -> np.ndarray:
    end = "<" if data[:2] == b"II" else ">"
    (ifd,) = struct.unpack(end + "I", data[4:8])
    (count,) = struct.unpack(end + "H", data[ifd : ifd + 2])
    tags = {}
    for i in range(count):
        tag, kind, n, value = struct.unpack(
            end + "HHI4s", data[ifd + 2 + 12 * i : ifd + 14 + 12 * i]
        )
        fmt = _TIFF_TYPES.get(kind)
        if fmt is None:
            continue
        size = struct.calcsize(fmt) * n
        where = value if size <= 4 else data[struct.unpack(end + "I", value)[0] :][:size]
        tags[tag] = struct.unpack(end + fmt * n, where[:size])
    width, height = tags[256][0], tags[257][0]
    if tags.get(259, (1,))[0] != 1 or tags.get(284, (1,))[0] != 1 or tags.get(258, (8,))[0] != 8:
        raise _Unsupported("ImageDecoder: only uncompressed 8-bit chunky TIFF is supported")
    channels = tags.get(277, (1,))[0]
    strips = b"".join(data[o : o + c] for o, c in zip(tags[273], tags[279]))
    img = np.frombuffer(strips, np.uint8, width * height * channels).reshape(height, width, -1)
    return 255 - img if tags.get(262, (1,))[0] == 0 else img  # WhiteIsZero


_SIGNATURES = [
    (b"\x89PNG\r\n\x1a\n", _png),
    (b"BM", _bmp),
    (b"P5", _pnm),
    (b"P6", _pnm),
    (b"II*\x00", _tiff),
    (b"MM\x00*", _tiff),
]
_UNSUPPORTED = [(b"\xff\xd8", "JPEG"), (b"\x00\x00\x00\x0cjP  ", "JPEG 2000"), (b"RIFF", "WebP")]


def _to_rgb(img: np.ndarray) -> np.ndarray:
    channels = img.shape[-1]
    if channels in (1, 2):  # grey (+ alpha)
        return np.repeat(img[..., :1], 3, axis=-1)
    return img[..., :3]  # alpha is dropped


@op("ImageDecoder", since=20)
def image_decoder(encoded_stream, *, pixel_format="RGB"):
    data = np.asarray(encoded_stream, dtype=np.uint8).tobytes()
    decode = next((fn for sig, fn in _SIGNATURES if data.startswith(sig)), None)
    if decode is None:
        name = next((n for sig, n in _UNSUPPORTED if data.startswith(sig)), None)
        if name:
            raise NotImplementedError(f"ImageDecoder: {name} decoding is not supported")
        # the spec: a stream that cannot be decoded gives an empty image
        return np.zeros((0, 0, 1 if pixel_format == "Grayscale" else 3), np.uint8)
    rgb = _to_rgb(decode(data)).astype(np.int64)
    if pixel_format == "RGB":
        return rgb.astype(np.uint8)
    if pixel_format == "BGR":
        return rgb[..., ::-1].astype(np.uint8)
    if pixel_format == "Grayscale":
        # ITU-R 601-2 luma in 16-bit fixed point, rounded (as Pillow's "L" conversion)
        weights = np.array([19595, 38470, 7471])
        return ((rgb @ weights + 0x8000) >> 16).astype(np.uint8)[..., None]
    raise ValueError(f"ImageDecoder: unknown pixel_format {pixel_format!r}")
