"""Feeds for the tools: seeded random data of a model's input types, and .npz files of arrays.

One place for ``onyx run``, ``onyx compare`` / ``reduce``, ``onyx view`` and ``onyx quantize``,
so that each makes the same inputs from the same seed and reads the same files.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .. import ir
from ..errors import InvalidArgument, OnyxError


def random_array(dtype: Any, shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """Random data of one element type. Integers are 0 or 1: they are often indices, masks,
    token or segment ids, which must stay in range (BERT's token_type_ids index a table of two
    rows)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 2, size=shape).astype(dtype)
    if dtype.kind in "OUS":
        return np.array(rng.choice(["a", "b", "c"], size=shape), dtype=object)
    return rng.standard_normal(shape).astype(dtype)


def parse_shapes(items: Iterable[str]) -> dict[str, list]:
    """``--shape`` arguments: 'x=1,3,N,?' -> {'x': [1, 3, 'N', None]} (an input's dims, or with
    one value a symbolic dim's size: 'batch=8')."""
    out = {}
    for item in items:
        name, sep, dims = item.partition("=")
        if not sep or not name:
            raise InvalidArgument(f"--shape takes NAME=D1,D2,..., got {item!r}")
        parsed = []
        for d in dims.split(",") if dims else []:
            d = d.strip()
            parsed.append(None if d in ("?", "-1") else int(d) if d.lstrip("-").isdigit() else d)
        out[name] = parsed
    return out


def _concrete(name: str, dims: Sequence) -> list[int]:
    if not all(isinstance(d, int) and d >= 0 for d in dims):
        raise InvalidArgument(f"--shape {name}: random data needs sizes, got {list(dims)}")
    return [int(d) for d in dims]


def input_shape(name: str, dims: Iterable, shapes: dict[str, Sequence[int]] | None) -> list[int]:
    """An input's concrete shape: ``shapes[name]`` when given, else its declared dims with each
    symbolic or unknown dim set by ``shapes[symbol] == [size]`` or to 1."""
    shapes = shapes or {}
    if name in shapes:
        return _concrete(name, shapes[name])
    return [
        d
        if isinstance(d, int) and d >= 0
        else _concrete(d, shapes[d])[0]
        if isinstance(d, str) and len(shapes.get(d, ())) == 1
        else 1
        for d in dims or ()
    ]


def random_feeds(
    model: ir.Model,
    shapes: dict[str, Sequence[int]] | None = None,
    seed: int = 0,
    skip: Iterable[str] = (),
) -> dict[str, np.ndarray]:
    """Seeded random feeds for the model's inputs (initializers and ``skip`` left out)."""
    rng = np.random.default_rng(seed)
    leave = set(model.graph.initializers) | set(skip)
    feeds = {}
    for v in model.graph.inputs:
        if v.name in leave:
            continue
        if not isinstance(v.type, ir.TensorType):
            raise InvalidArgument(f"input {v.name!r} of type {v.type}: give its value explicitly")
        dims = v.type.shape.dims if v.type.shape is not None else ()
        dtype = ir.to_numpy(v.type.elem_type)
        feeds[v.name] = random_array(dtype, input_shape(v.name, dims, shapes), rng)
    return feeds


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of an .npz file, by name."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {k: archive[k] for k in archive.files}
    except (OSError, ValueError) as e:
        raise InvalidArgument(f"cannot read arrays from {os.fspath(path)!r}: {e}") from e


def as_arrays(values: dict[str, Any]) -> dict[str, np.ndarray]:
    """Run outputs as the arrays an .npz can hold: a tensor as it is; a sequence of maps with the
    same keys (scikit-learn's ZipMap probabilities) as a rows x keys array ``name`` beside its keys
    ``name.keys``; one map likewise as ``name.keys`` and ``name.values``; a sequence of tensors as
    ``name.0``, ``name.1``, ...; an absent optional value is left out."""
    out: dict[str, np.ndarray] = {}
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, np.ndarray):
            out[name] = value
        elif isinstance(value, dict):
            out[f"{name}.keys"] = np.array(list(value))
            out[f"{name}.values"] = np.array(list(value.values()))
        elif _same_key_maps(value):
            keys = list(value[0])
            out[f"{name}.keys"] = np.array(keys)
            out[name] = np.array([[row[k] for k in keys] for row in value]).reshape(len(value), -1)
        elif isinstance(value, list) and all(isinstance(v, np.ndarray) for v in value):
            out.update({f"{name}.{i}": v for i, v in enumerate(value)})
        else:
            raise InvalidArgument(f"output {name!r} ({type(value).__name__}) has no .npz form")
    return out


def _same_key_maps(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(row, dict) and row.keys() == value[0].keys() for row in value)
    )


def save_npz(path: str | os.PathLike, arrays: dict[str, Any]) -> None:
    """An .npz written atomically (a temporary file beside it, then renamed); tensors only."""
    bad = [k for k, v in arrays.items() if not isinstance(v, np.ndarray)]
    if bad:
        raise InvalidArgument(f"{os.fspath(path)}: values {bad} are not tensors")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".onyx-", suffix=".npz")
    except OSError as e:
        raise OnyxError(f"cannot write {os.fspath(path)!r}: {e}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise OnyxError(f"cannot write {os.fspath(path)!r}: {e}") from e
    except BaseException:
        os.unlink(tmp)
        raise
