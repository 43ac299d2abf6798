"""ImageDecoder against Pillow's own decoding, on small images written by Pillow: the native
decoders (PNG, BMP, PNM, TIFF, baseline JPEG) and the Pillow fallback (JPEG 2000, WebP,
progressive JPEG, compressed TIFF, ...), and the error without Pillow."""

from __future__ import annotations

import builtins
import io

import numpy as np
import pytest
from conftest import run_onnx
from onnx import TensorProto, helper

import onyx
from onyx.runtime.kernels import text

Image = pytest.importorskip("PIL.Image")
features = pytest.importorskip("PIL.features")


def _model(pixel_format: str = "RGB"):
    node = helper.make_node(
        "ImageDecoder", ["data"], ["image"], name="decode", pixel_format=pixel_format
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("data", TensorProto.UINT8, [None])],
        [helper.make_tensor_value_info("image", TensorProto.UINT8, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


def _decode(data: bytes, pixel_format: str = "RGB") -> np.ndarray:
    (image,) = run_onnx(_model(pixel_format), {"data": np.frombuffer(data, np.uint8)})
    return image


def _picture(mode: str, size=(21, 13), seed: int = 0):
    """A smooth gradient plus noise: exercises prediction, chroma upsampling and odd sizes."""
    w, h = size
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, (x + y) * 127 // (w + h)], axis=-1)
    rgb = np.clip(base + rng.integers(-40, 40, base.shape), 0, 255).astype(np.uint8)
    img = Image.fromarray(rgb, "RGB")
    if mode == "RGBA":
        img.putalpha(Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L"))
    return img if mode in ("RGB", "RGBA") else img.convert(mode)


def _encode(img, fmt: str, **options) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **options)
    return buf.getvalue()


def _pillow_rgb(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("RGB"))


CASES = {
    "png_rgb": ("RGB", "PNG", {}),
    "png_rgba": ("RGBA", "PNG", {}),
    "png_grey": ("L", "PNG", {}),
    "png_palette": ("P", "PNG", {}),
    "png_interlaced": ("RGB", "PNG", {"interlace": 1}),  # Pillow fallback
    "bmp_rgb": ("RGB", "BMP", {}),
    "bmp_palette": ("P", "BMP", {}),
    "ppm": ("RGB", "PPM", {}),
    "pgm": ("L", "PPM", {}),
    "tiff": ("RGB", "TIFF", {}),
    "tiff_lzw": ("RGB", "TIFF", {"compression": "tiff_lzw"}),  # Pillow fallback
    "jpeg_420": ("RGB", "JPEG", {"quality": 90}),
    "jpeg_444": ("RGB", "JPEG", {"quality": 75, "subsampling": 0}),
    "jpeg_422": ("RGB", "JPEG", {"quality": 75, "subsampling": 1}),
    "jpeg_grey": ("L", "JPEG", {}),
    "jpeg_progressive": ("RGB", "JPEG", {"progressive": True}),  # Pillow fallback
    "jpeg2000": ("RGB", "JPEG2000", {}),
    "jpeg2000_lossy": ("RGB", "JPEG2000", {"quality_mode": "rates", "quality_layers": [20]}),
    "webp_lossless": ("RGB", "WEBP", {"lossless": True}),
    "webp_lossy": ("RGB", "WEBP", {"quality": 80}),
}

CODECS = {"JPEG2000": "jpg_2000", "WEBP": "webp", "JPEG": "jpg"}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_pillow(case):
    mode, fmt, options = CASES[case]
    if fmt in CODECS and not features.check(CODECS[fmt]):
        pytest.skip(f"this Pillow has no {fmt} codec")
    data = _encode(_picture(mode), fmt, **options)
    expected = _pillow_rgb(data)
    actual = _decode(data)
    assert actual.dtype == np.uint8
    np.testing.assert_array_equal(actual, expected)
    np.testing.assert_array_equal(_decode(data, "BGR"), expected[..., ::-1])
    grey = np.asarray(Image.fromarray(expected, "RGB").convert("L"))[..., None]
    np.testing.assert_array_equal(_decode(data, "Grayscale"), grey)


@pytest.mark.parametrize(
    "data", [b"", b"not an image", b"\x89PNG\r\n\x1a\n\x00\x00", b"RIFFxxxxWEBPjunk"]
)
def test_undecodable_gives_empty_image(data):
    # the spec: a stream that cannot be decoded (corrupted, unknown format) gives an empty matrix
    assert _decode(data).shape == (0, 0, 3)
    assert _decode(data, "Grayscale").shape == (0, 0, 1)


def test_pillow_opens_only_the_spec_formats():
    gif = _encode(_picture("P"), "GIF")
    assert _decode(gif).shape == (0, 0, 3)


@pytest.fixture
def no_pillow(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)


@pytest.mark.parametrize(
    ("fmt", "options"),
    [("WEBP", {"lossless": True}), ("JPEG2000", {}), ("JPEG", {"progressive": True})],
)
def test_without_pillow_names_node_and_extra(fmt, options, no_pillow):
    data = _encode(_picture("RGB"), fmt, **options)
    with pytest.raises(text.MissingCodec, match=r"'decode'.*pip install onyx\[image\]") as err:
        _decode(data)
    assert isinstance(err.value, onyx.errors.OnyxError)
    assert isinstance(err.value, ImportError)


def test_without_pillow_native_formats_still_decode(no_pillow):
    for fmt in ("PNG", "BMP", "PPM", "TIFF", "JPEG"):
        data = _encode(_picture("RGB", seed=1), fmt)
        assert _decode(data).shape == (13, 21, 3)
