"""Tensors: an ONNX element type, a shape, and data that is read only when asked for.

Data comes from one of three sources, and stays in that form until someone calls ``numpy()``:
- a numpy array (``Tensor(array)``);
- little-endian wire bytes (``Tensor.from_raw``), viewed zero-copy (sub-byte types are unpacked);
- a loader (``Tensor.from_loader``), e.g. a memory-mapped external-data file read on first use.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .dtypes import SUB_BYTE, DataType, bit_width, from_numpy, to_numpy

_SIGNED_SUB_BYTE = {DataType.INT4, DataType.INT2}


def unpack_sub_byte(buf, dtype: DataType, count: int) -> np.ndarray:
    """Unpack ``count`` elements of a sub-byte type, first element in the lowest bits."""
    bits = bit_width(dtype)
    packed = np.frombuffer(buf, dtype=np.uint8)
    if 8 % bits == 0:
        shifts = np.arange(0, 8, bits, dtype=np.uint8)
        codes = ((packed[:, None] >> shifts) & ((1 << bits) - 1)).reshape(-1)[:count]
    else:  # e.g. 6-bit types: a little-endian bit stream
        stream = np.unpackbits(packed, bitorder="little")[: count * bits].reshape(count, bits)
        codes = (stream.astype(np.uint8) << np.arange(bits, dtype=np.uint8)).sum(1).astype(np.uint8)
    if len(codes) < count:
        raise ValueError(f"{len(packed)} bytes hold fewer than {count} {dtype.name} elements")
    np_dtype = to_numpy(dtype)
    if dtype in _SIGNED_SUB_BYTE:
        signed = codes.astype(np.int8)
        signed = np.where(signed >= (1 << (bits - 1)), signed - (1 << bits), signed).astype(np.int8)
        return signed.astype(np_dtype)
    if dtype in (DataType.UINT4, DataType.UINT2):
        return codes.astype(np_dtype)
    return codes.view(np_dtype)


def pack_sub_byte(array: np.ndarray, dtype: DataType) -> bytes:
    """Pack an array of a sub-byte type into wire bytes (first element in the lowest bits)."""
    bits = bit_width(dtype)
    flat = np.ascontiguousarray(array).reshape(-1)
    if dtype in _SIGNED_SUB_BYTE or dtype in (DataType.UINT4, DataType.UINT2):
        codes = flat.astype(np.int8).view(np.uint8) & ((1 << bits) - 1)
    else:
        codes = flat.view(np.uint8) & ((1 << bits) - 1)
    if 8 % bits == 0:
        per = 8 // bits
        padded = np.zeros(-(-len(codes) // per) * per, dtype=np.uint8)
        padded[: len(codes)] = codes
        shifts = np.arange(0, 8, bits, dtype=np.uint8)
        return (
            (padded.reshape(-1, per) << shifts).sum(1, dtype=np.uint16).astype(np.uint8).tobytes()
        )
    stream = ((codes[:, None] >> np.arange(bits, dtype=np.uint8)) & 1).reshape(-1)
    return np.packbits(stream, bitorder="little").tobytes()


def wire_size(dtype: DataType, shape: tuple[int, ...]) -> int:
    """Bytes the raw (wire) form of a tensor of this type and shape takes."""
    count = int(math.prod(shape))
    return -(-count * bit_width(dtype) // 8)


class Tensor:
    """A named constant tensor (initializer, attribute value, Constant) with lazily read data."""

    __slots__ = (
        "dtype",
        "shape",
        "name",
        "doc_string",
        "metadata_props",
        "external",
        "_array",
        "_raw",
        "_loader",
        "extras",
    )

    def __init__(
        self,
        array: Any = None,
        *,
        name: str = "",
        dtype: int | None = None,
        doc_string: str = "",
    ):
        self.name = name
        self.doc_string = doc_string
        self.metadata_props: dict[str, str] = {}
        #: Where the data lives on disk if it was (or will be) stored outside the model file.
        self.external = None
        #: Round-trip store for protobuf fields the IR does not model (set by serde).
        self.extras: Any = None
        self._raw = None
        self._loader: Callable[[], np.ndarray] | None = None
        if array is None:
            self._array = None
            self.dtype = DataType(dtype) if dtype is not None else DataType.UNDEFINED
            self.shape: tuple[int, ...] = ()
            return
        arr = np.asarray(array)
        if arr.dtype.kind in "US":
            arr = arr.astype(object)
        self.dtype = DataType(dtype) if dtype is not None else from_numpy(arr.dtype)
        if arr.dtype != to_numpy(self.dtype):
            arr = arr.astype(to_numpy(self.dtype))
        self._array = arr
        self.shape = tuple(int(d) for d in arr.shape)

    def __getstate__(self) -> tuple[dict | None, dict]:
        """copy's and pickle's state (a subclass's instance dict, the slots), a memoryview's
        bytes (a weight read into its aligned buffer, a view of a memory-mapped file), which
        neither takes, as bytes."""
        state = {name: getattr(self, name) for name in Tensor.__slots__}
        if type(state["_raw"]) is memoryview:
            state["_raw"] = state["_raw"].tobytes()
        return getattr(self, "__dict__", None), state

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def from_raw(cls, raw, dtype: int, shape, name: str = "") -> Tensor:
        """A tensor over little-endian wire bytes; no copy is made until data is needed."""
        # (not through __init__: a model's initializers are made by the ten thousand at load)
        t = cls.__new__(cls)
        t.name = name
        t.doc_string = ""
        t.metadata_props = {}
        t.external = t.extras = t._array = t._loader = None
        t._raw = raw
        t.dtype = dtype if type(dtype) is DataType else DataType(dtype)
        t.shape = tuple(map(int, shape))
        return t

    @classmethod
    def from_loader(cls, loader: Callable[[], np.ndarray], dtype: int, shape, name: str = ""):
        """A tensor whose data ``loader()`` produces on first use (e.g. external data)."""
        t = cls(name=name, dtype=dtype)
        t.shape = tuple(int(d) for d in shape)
        t._loader = loader
        return t

    # -- data ---------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the wire form (strings: sum of their lengths)."""
        if self.dtype == DataType.STRING:
            return sum(len(s) for s in _as_bytes_list(self.numpy()))
        return wire_size(self.dtype, self.shape)

    def is_loaded(self) -> bool:
        return self._array is not None

    def has_raw_bytes(self) -> bool:
        """Whether the tensor holds wire bytes (read from a file, not decoded or replaced)."""
        return self._raw is not None

    def loaded_array(self) -> np.ndarray | None:
        """The data if it is in memory as an array already (nothing is read or decoded)."""
        return self._array

    def numpy(self) -> np.ndarray:
        """The data as a numpy array of the element type's dtype (a read-only view when possible)."""
        if self._array is None:
            if self._loader is not None:
                arr = np.asarray(self._loader())
            elif self._raw is not None:
                arr = self._decode_raw(self._raw)
            else:
                arr = np.zeros(self.shape, dtype=to_numpy(self.dtype))
            self._array = arr
        return self._array

    def raw_bytes(self):
        """Little-endian wire bytes (packed for sub-byte types); zero-copy when read from raw."""
        if self._raw is not None:
            return self._raw
        if self.dtype == DataType.STRING:
            raise TypeError("string tensors have no raw byte form")
        arr = self.numpy()
        if self.dtype in SUB_BYTE:
            return pack_sub_byte(arr, self.dtype)
        return np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("<"), copy=False)).tobytes()

    def _decode_raw(self, raw) -> np.ndarray:
        count = self.size
        if self.dtype in SUB_BYTE:
            return unpack_sub_byte(raw, self.dtype, count).reshape(self.shape)
        np_dtype = to_numpy(self.dtype)
        le = np_dtype.newbyteorder("<") if np_dtype.byteorder not in "|" else np_dtype
        expected = count * np_dtype.itemsize
        if len(memoryview(raw).cast("B")) != expected:
            raise ValueError(
                f"tensor {self.name!r}: raw data has {len(memoryview(raw).cast('B'))} bytes, "
                f"{self.dtype.name}{list(self.shape)} needs {expected}"
            )
        if le == np_dtype:  # a little-endian host: the canonical dtype, not an equal copy of
            # it, or np.asarray(arr, np.float32) makes a new view each call (a kernel's
            # derived() cache, keyed by the array object, then misses every run)
            return np.frombuffer(raw, dtype=np_dtype, count=count).reshape(self.shape)
        return np.frombuffer(raw, dtype=le, count=count).reshape(self.shape).astype(np_dtype)

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.dtype.name}, {list(self.shape)})"


def _as_bytes_list(arr: np.ndarray) -> list[bytes]:
    return [s if isinstance(s, bytes) else str(s).encode("utf-8") for s in arr.reshape(-1)]


class ExternalData:
    """Where a tensor's bytes sit outside the model file (TensorProto.external_data).

    ``entries`` keeps every key/value pair in file order (location, offset, length, checksum
    and any other key); the properties read the well-known ones. ``base_dir`` is the folder
    ``location`` is relative to, when known.
    """

    __slots__ = ("entries", "base_dir")

    def __init__(self, entries, base_dir: str | None = None):
        self.entries: list[tuple[str, str]] = [(str(k), str(v)) for k, v in entries]
        self.base_dir = base_dir

    @classmethod
    def make(cls, location: str, offset: int | None = None, length: int | None = None):
        entries = [("location", location)]
        if offset is not None:
            entries.append(("offset", str(offset)))
        if length is not None:
            entries.append(("length", str(length)))
        return cls(entries)

    def get(self, key: str, default=None):
        for k, v in self.entries:
            if k == key:
                return v
        return default

    @property
    def location(self) -> str:
        return self.get("location", "")

    @property
    def offset(self) -> int:
        return int(self.get("offset", 0) or 0)

    @property
    def length(self) -> int | None:
        v = self.get("length")
        return None if v in (None, "") else int(v)

    def __repr__(self) -> str:
        return f"ExternalData({self.location!r}, offset={self.offset}, length={self.length})"


class SparseTensor:
    """A sparse constant: ``values`` (1-D) at ``indices`` (flat [NNZ] or coordinates [NNZ, rank])
    of a dense tensor of shape ``dims``."""

    __slots__ = ("values", "indices", "dims", "extras")

    def __init__(self, values: Tensor, indices: Tensor, dims):
        self.values = values
        self.indices = indices
        self.dims = tuple(int(d) for d in dims)
        self.extras: Any = None

    @property
    def name(self) -> str:
        return self.values.name if self.values is not None else ""

    @property
    def dtype(self) -> DataType:
        return self.values.dtype

    def to_dense(self) -> np.ndarray:
        values = self.values.numpy()
        indices = self.indices.numpy().astype(np.int64)
        dense = np.zeros(int(np.prod(self.dims, dtype=np.int64)), dtype=values.dtype)
        if indices.ndim == 2:
            indices = np.ravel_multi_index(tuple(indices.T), self.dims) if indices.size else []
        dense[np.asarray(indices, dtype=np.int64).reshape(-1)] = values.reshape(-1)
        return dense.reshape(self.dims)

    def __repr__(self) -> str:
        return f"SparseTensor({self.name!r}, {self.dtype.name}, {list(self.dims)})"
