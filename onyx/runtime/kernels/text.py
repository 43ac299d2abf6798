"""Strings (StringNormalizer, RegexFullMatch, StringSplit, StringConcat) and ImageDecoder.

Strings are numpy object arrays of Python ``str``; per-string work goes through ``np.frompyfunc``
since numpy has no vectorized kernels for object arrays.

ImageDecoder decodes natively what needs no codec library: PNG (zlib), BMP, binary PNM,
uncompressed TIFF and baseline JPEG (bit-exact with libjpeg-turbo's defaults). The rest (JPEG 2000,
WebP, progressive JPEG, compressed TIFF, ASCII PNM, interlaced PNG, ...) goes to Pillow, an
optional dependency (``pip install onyx[image]``) imported only when such an image comes.
"""

from __future__ import annotations

import io
import re
import struct
import zlib

import numpy as np

from ...errors import OnyxError
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


# --- baseline JPEG, bit-exact with libjpeg(-turbo)'s defaults: integer "islow" IDCT, "fancy"
# (triangle) chroma upsampling and fixed-point YCbCr -> RGB ----------------------------------------

_ZIGZAG = np.array(
    [0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27,
     20, 13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58,
     59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63]
)  # fmt: skip


def _fix(x: float, bits: int = 13) -> int:
    return int(x * (1 << bits) + 0.5)


def _idct_1d(v: np.ndarray, shift: int, pre: int = 0) -> np.ndarray:
    """The LL&M 8-point IDCT with 13-bit fixed-point constants, along the last axis."""
    c = lambda i: v[..., i]  # noqa: E731
    z1 = (c(2) + c(6)) * _fix(0.541196100)
    tmp2, tmp3 = z1 - c(6) * _fix(1.847759065), z1 + c(2) * _fix(0.765366865)
    tmp0, tmp1 = (c(0) + c(4)) << 13, (c(0) - c(4)) << 13
    t10, t13, t11, t12 = tmp0 + tmp3, tmp0 - tmp3, tmp1 + tmp2, tmp1 - tmp2
    o0, o1, o2, o3 = c(7), c(5), c(3), c(1)
    z1, z2, z3, z4 = o0 + o3, o1 + o2, o0 + o2, o1 + o3
    z5 = (z3 + z4) * _fix(1.175875602)
    z1, z2 = z1 * -_fix(0.899976223), z2 * -_fix(2.562915447)
    z3, z4 = z3 * -_fix(1.961570560) + z5, z4 * -_fix(0.390180644) + z5
    o0 = o0 * _fix(0.298631336) + z1 + z3
    o1 = o1 * _fix(2.053119869) + z2 + z4
    o2 = o2 * _fix(3.072711026) + z2 + z3
    o3 = o3 * _fix(1.501321110) + z1 + z4
    out = [t10 + o3, t11 + o2, t12 + o1, t13 + o0, t13 - o0, t12 - o1, t11 - o2, t10 - o3]
    return (np.stack(out, axis=-1) + (1 << (shift - 1))) >> shift


def _idct(blocks: np.ndarray) -> np.ndarray:
    """Dequantized (n, 8, 8) coefficient blocks -> samples 0..255 (columns first, then rows)."""
    cols = _idct_1d(blocks.astype(np.int64).swapaxes(1, 2), 13 - 2).swapaxes(1, 2)
    return np.clip(_idct_1d(cols, 13 + 2 + 3) + 128, 0, 255)


class _Bits:
    """Entropy-coded data, byte stuffing removed, read MSB first."""

    def __init__(self, data: bytes):
        self.bits = "".join(f"{b:08b}" for b in data.replace(b"\xff\x00", b"\xff"))
        self.pos = 0

    def get(self, n: int) -> int:
        value = int(self.bits[self.pos : self.pos + n] or "0", 2) if n else 0
        self.pos += n
        return value

    def symbol(self, table: dict) -> int:
        for n in range(1, 17):
            hit = table.get(self.bits[self.pos : self.pos + n])
            if hit is not None:
                self.pos += n
                return hit
        raise ValueError("ImageDecoder: bad Huffman code")

    def signed(self, n: int) -> int:
        v = self.get(n)
        return v - (1 << n) + 1 if n and v < 1 << (n - 1) else v


def _huffman_table(counts: bytes, symbols: bytes) -> dict:
    table, code, k = {}, 0, 0
    for length, n in enumerate(counts, start=1):
        for _ in range(n):
            table[format(code, f"0{length}b")] = symbols[k]
            code, k = code + 1, k + 1
        code <<= 1
    return table


def _upsample(plane: np.ndarray, h: int, v: int) -> np.ndarray:
    """libjpeg's fancy upsampling by 2: 3/4 of the nearer sample plus 1/4 of the next one, with
    the rounding bias alternating between pixels (edges replicate)."""
    p = plane.astype(np.int32)
    if v == 2:  # vertical sums 3 * nearer + farther row (4x scale); rows: above, then below
        above = np.vstack([p[:1], p[:-1]])
        below = np.vstack([p[1:], p[-1:]])
        if h == 1:
            return np.stack([(3 * p + above + 1) >> 2, (3 * p + below + 2) >> 2], 1).reshape(
                -1, p.shape[1]
            )
        p = np.stack([3 * p + above, 3 * p + below], axis=1).reshape(-1, p.shape[1])
    if h == 2:
        left = np.hstack([p[:, :1], p[:, :-1]])
        right = np.hstack([p[:, 1:], p[:, -1:]])
        if v == 2:
            even, odd = (3 * p + left + 8) >> 4, (3 * p + right + 7) >> 4
        else:
            even, odd = (3 * p + left + 1) >> 2, (3 * p + right + 2) >> 2
        p = np.stack([even, odd], axis=2).reshape(p.shape[0], -1)
    return p


def _ycc_to_rgb(y, cb, cr) -> np.ndarray:
    cb, cr = cb - 128, cr - 128
    half = 1 << 15
    r = y + ((_fix(1.40200, 16) * cr + half) >> 16)
    g = y + ((-_fix(0.34414, 16) * cb + half - _fix(0.71414, 16) * cr) >> 16)
    b = y + ((_fix(1.77200, 16) * cb + half) >> 16)
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255)


def _jpeg(data: bytes) -> np.ndarray:
    quant, dc_tables, ac_tables, comps, restart, pos = {}, {}, {}, [], 0, 2
    while pos < len(data):
        marker, length = data[pos + 1], struct.unpack(">H", data[pos + 2 : pos + 4])[0]
        body = data[pos + 4 : pos + 2 + length]
        if marker in (0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
            raise _Unsupported("ImageDecoder: only baseline/sequential Huffman JPEG is supported")
        if marker == 0xDB:  # quantization tables
            i = 0
            while i < len(body):
                wide, tid = body[i] >> 4, body[i] & 15
                n = 128 if wide else 64
                q = np.frombuffer(body[i + 1 : i + 1 + n], ">u2" if wide else np.uint8)
                quant[tid] = np.zeros(64, np.int64)
                quant[tid][_ZIGZAG] = q
                i += 1 + n
        elif marker == 0xC4:  # Huffman tables
            i = 0
            while i < len(body):
                counts = body[i + 1 : i + 17]
                table = _huffman_table(counts, body[i + 17 : i + 17 + sum(counts)])
                (ac_tables if body[i] >> 4 else dc_tables)[body[i] & 15] = table
                i += 17 + sum(counts)
        elif marker in (0xC0, 0xC1):  # frame header
            height, width = struct.unpack(">HH", body[1:5])
            comps = [
                {
                    "id": body[6 + 3 * k],
                    "h": body[7 + 3 * k] >> 4,
                    "v": body[7 + 3 * k] & 15,
                    "q": body[8 + 3 * k],
                }
                for k in range(body[5])
            ]
        elif marker == 0xDD:
            restart = struct.unpack(">H", body[:2])[0]
        elif marker == 0xDA:  # start of scan: the entropy-coded data follows the header
            for k in range(body[0]):
                comp = next(c for c in comps if c["id"] == body[1 + 2 * k])
                comp["dc"], comp["ac"] = body[2 + 2 * k] >> 4, body[2 + 2 * k] & 15
            if body[0] != len(comps):
                raise _Unsupported("ImageDecoder: non-interleaved JPEG scans are not supported")
            end = pos + 2 + length
            scan = data[end:]
            return _jpeg_scan(scan, comps, quant, dc_tables, ac_tables, restart, height, width)
        pos += 2 + length
    raise ValueError("ImageDecoder: JPEG without image data")


def _jpeg_scan(scan, comps, quant, dc_tables, ac_tables, restart, height, width) -> np.ndarray:
    hmax, vmax = max(c["h"] for c in comps), max(c["v"] for c in comps)
    mcus_x, mcus_y = -(-width // (8 * hmax)), -(-height // (8 * vmax))
    # split the entropy-coded data at restart markers; it ends at the first other marker
    segments = re.split(rb"\xff[\xd0-\xd7]", re.split(rb"\xff(?![\x00\xd0-\xd7])", scan)[0])
    coefs = {c["id"]: np.zeros((mcus_y * c["v"], mcus_x * c["h"], 64), np.int64) for c in comps}
    per_segment = restart or mcus_x * mcus_y
    # Huffman decoding is inherently sequential: one step per coded coefficient
    for mcu in range(mcus_x * mcus_y):
        if mcu % per_segment == 0:
            bits = _Bits(segments[mcu // per_segment])
            pred = {c["id"]: 0 for c in comps}
        my, mx = divmod(mcu, mcus_x)
        for c in comps:
            dc, ac = dc_tables[c["dc"]], ac_tables[c["ac"]]
            for by in range(c["v"]):
                for bx in range(c["h"]):
                    block = coefs[c["id"]][my * c["v"] + by, mx * c["h"] + bx]
                    pred[c["id"]] += bits.signed(bits.symbol(dc))
                    block[0] = pred[c["id"]]
                    k = 1
                    while k < 64:
                        rs = bits.symbol(ac)
                        if rs == 0:
                            break
                        k += rs >> 4
                        if k > 63:
                            break
                        block[_ZIGZAG[k]] = bits.signed(rs & 15)
                        k += 1
    planes = []
    for c in comps:
        blocks = coefs[c["id"]]
        rows, cols = blocks.shape[:2]
        pixels = _idct((blocks * quant[c["q"]]).reshape(-1, 8, 8)).reshape(rows, cols, 8, 8)
        plane = pixels.transpose(0, 2, 1, 3).reshape(rows * 8, cols * 8)
        # crop to the component's own size before upsampling, as libjpeg does
        ch, cw = -(-height * c["v"] // vmax), -(-width * c["h"] // hmax)
        h, v = hmax // c["h"], vmax // c["v"]
        if (h, v) not in ((1, 1), (2, 1), (1, 2), (2, 2)):
            raise _Unsupported(f"ImageDecoder: JPEG sampling {h}x{v} is not supported")
        planes.append(_upsample(plane[:ch, :cw], h, v)[:height, :width])
    if len(planes) == 1:
        return planes[0][..., None].astype(np.uint8)
    return _ycc_to_rgb(*planes).astype(np.uint8)


_SIGNATURES = [
    (b"\x89PNG\r\n\x1a\n", _png),
    (b"BM", _bmp),
    (b"P5", _pnm),
    (b"P6", _pnm),
    (b"II*\x00", _tiff),
    (b"MM\x00*", _tiff),
    (b"\xff\xd8", _jpeg),
]
# Formats of the spec's list that only Pillow decodes: (signature test, name)
_PILLOW_ONLY = [
    (lambda d: d.startswith(b"\x00\x00\x00\x0cjP  \r\n\x87\n"), "JPEG 2000"),
    (lambda d: d.startswith(b"\xff\x4f\xff\x51"), "JPEG 2000 codestream"),
    (lambda d: d[:4] == b"RIFF" and d[8:12] == b"WEBP", "WebP"),
    (lambda d: d[:2] in (b"P1", b"P2", b"P3", b"P4"), "ASCII/bitmap PNM"),
]
# Pillow may open only the formats the spec lists (never e.g. EPS, which runs Ghostscript)
_PILLOW_FORMATS = ["BMP", "JPEG", "JPEG2000", "PNG", "PPM", "TIFF", "WEBP"]


class MissingCodec(OnyxError, ImportError):
    """An image format needs Pillow, which is not installed."""


def _pillow_decode(ctx, data: bytes, what: str) -> np.ndarray | None:
    """Decode with Pillow to RGB; None when Pillow cannot decode the stream."""
    try:
        from PIL import Image
    except ImportError as e:
        raise MissingCodec(
            f"{ctx.op_type} node {ctx.node_name!r}: decoding {what} needs Pillow, "
            "an optional dependency: pip install onyx[image]"
        ) from e
    try:
        with Image.open(io.BytesIO(data), formats=_PILLOW_FORMATS) as img:
            return np.array(img.convert("RGB"))  # a writable copy
    except Exception:  # any decoding failure means "cannot decode"
        return None


def _decode(ctx, data: bytes) -> np.ndarray | None:
    """The image as (H, W, C) uint8 with C in 1..4, or None when it cannot be decoded."""
    native = next((fn for sig, fn in _SIGNATURES if data.startswith(sig)), None)
    if native is not None:
        try:
            return native(data)
        except _Unsupported as e:  # a valid image using a feature we do not decode natively
            reason = str(e).removeprefix("ImageDecoder: ")
            return _pillow_decode(ctx, data, f"an image onyx does not decode natively ({reason})")
        except Exception:  # a corrupted stream
            return None
    what = next((name for test, name in _PILLOW_ONLY if test(data)), None)
    return None if what is None else _pillow_decode(ctx, data, what)


def _to_rgb(img: np.ndarray) -> np.ndarray:
    channels = img.shape[-1]
    if channels in (1, 2):  # grey (+ alpha)
        return np.repeat(img[..., :1], 3, axis=-1)
    return img[..., :3]  # alpha is dropped


@op("ImageDecoder", since=20)
def image_decoder(ctx, encoded_stream, *, pixel_format="RGB"):
    if pixel_format not in ("RGB", "BGR", "Grayscale"):
        raise ValueError(f"ImageDecoder: unknown pixel_format {pixel_format!r}")
    img = _decode(ctx, np.asarray(encoded_stream, dtype=np.uint8).tobytes())
    if img is None:  # the spec: a stream that cannot be decoded gives an empty image
        return np.zeros((0, 0, 1 if pixel_format == "Grayscale" else 3), np.uint8)
    rgb = _to_rgb(img)
    if pixel_format == "RGB":
        return np.ascontiguousarray(rgb, dtype=np.uint8)
    if pixel_format == "BGR":
        return np.ascontiguousarray(rgb[..., ::-1], dtype=np.uint8)
    # ITU-R 601-2 luma in 16-bit fixed point, rounded (as Pillow's "L" conversion)
    weights = np.array([19595, 38470, 7471])
    return ((rgb.astype(np.int64) @ weights + 0x8000) >> 16).astype(np.uint8)[..., None]
