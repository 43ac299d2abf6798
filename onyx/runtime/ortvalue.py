"""OrtValue: onnxruntime's value handle, on the CPU (onyx's only device). It wraps a numpy array
(or a sequence / map / None) without copying, so ``data_ptr()`` is the array's memory and
``np.asarray(value)`` shares it, as with onnxruntime's CPU values."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from ..ir.dtypes import from_numpy, to_numpy, type_name


def check_cpu(device_type: Any, what: str) -> None:
    name = getattr(device_type, "device_type_name", lambda: device_type)()
    if str(name).lower() not in ("cpu", "0"):
        raise InvalidArgument(f"{what}: onyx runs on the CPU only, not on {device_type!r}")


def as_dtype(element_type: Any) -> np.dtype:
    """A numpy dtype from a numpy type or an ONNX element type number."""
    if isinstance(element_type, int) and not isinstance(element_type, bool):
        return np.dtype(to_numpy(element_type))
    return np.dtype(element_type)


def array_at(address: int, dtype: Any, shape: list[int]) -> np.ndarray:
    """The memory at ``address`` as an array (``bind_input`` / ``bind_output`` with a raw
    pointer: the caller owns it and keeps it alive, as onnxruntime requires)."""
    dtype = as_dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    buffer = (ctypes.c_byte * (count * dtype.itemsize)).from_address(int(address))
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape)


def _type_string(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"tensor({type_name(from_numpy(value.dtype))})"
    if isinstance(value, list):
        inner = _type_string(value[0]) if value else "tensor(float)"
        return f"seq({inner})"
    if isinstance(value, dict):
        key = next(iter(value), "")
        k = "string" if isinstance(key, str) else "int64"
        v = _type_string(np.asarray(next(iter(value.values()), 0.0)))
        return f"map({k},{v[len('tensor(') : -1]})"
    return "optional"


class OrtValue:
    """A value on the CPU: ``OrtValue.ortvalue_from_numpy(arr)``, ``.numpy()``, ``.shape()``."""

    __slots__ = ("_value",)

    def __init__(self, value: Any = None):
        self._value = value

    # -- creation -------------------------------------------------------------------------------
    @staticmethod
    def ortvalue_from_numpy(
        numpy_obj: Any, device_type: str = "cpu", device_id: int = 0, vendor_id: int = -1
    ) -> OrtValue:
        check_cpu(device_type, "OrtValue.ortvalue_from_numpy")
        arr = numpy_obj if isinstance(numpy_obj, np.ndarray) else np.asarray(numpy_obj)
        if arr.dtype.kind in "US":
            arr = arr.astype(object)
        return OrtValue(np.ascontiguousarray(arr) if arr.dtype != object else arr)

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(data: np.ndarray, onnx_element_type: int) -> OrtValue:
        dtype = np.dtype(to_numpy(onnx_element_type))
        arr = np.ascontiguousarray(data)
        if arr.dtype != dtype:
            if arr.dtype.itemsize != dtype.itemsize:
                raise InvalidArgument(
                    f"OrtValue: data of {arr.dtype} cannot hold "
                    f"tensor({type_name(onnx_element_type)}) elements"
                )
            arr = arr.view(dtype)
        return OrtValue(arr)

    @staticmethod
    def ortvalue_from_shape_and_type(
        shape: Any,
        element_type: Any,
        device_type: str = "cpu",
        device_id: int = 0,
        vendor_id: int = -1,
    ) -> OrtValue:
        check_cpu(device_type, "OrtValue.ortvalue_from_shape_and_type")
        return OrtValue(np.zeros([int(d) for d in shape], dtype=as_dtype(element_type)))

    # -- queries --------------------------------------------------------------------------------
    def numpy(self) -> Any:
        if not isinstance(self._value, np.ndarray | list | dict):
            raise InvalidArgument("OrtValue.numpy(): the value holds no tensor")
        return self._value

    def __array__(self, dtype=None, copy=None):
        arr = np.asarray(self._value)
        if dtype is not None and arr.dtype != dtype:
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def data_ptr(self) -> int:
        return int(self._tensor("data_ptr").ctypes.data)

    def device_name(self) -> str:
        return "cpu"

    def shape(self) -> list[int]:
        return list(self._tensor("shape").shape)

    def data_type(self) -> str:
        return _type_string(self._value)

    def element_type(self) -> int:
        return int(from_numpy(self._tensor("element_type").dtype))

    def has_value(self) -> bool:
        return self._value is not None

    def is_tensor(self) -> bool:
        return isinstance(self._value, np.ndarray)

    def is_tensor_sequence(self) -> bool:
        return isinstance(self._value, list)

    def is_sparse_tensor(self) -> bool:
        return False

    def tensor_size_in_bytes(self) -> int:
        return int(self._tensor("tensor_size_in_bytes").nbytes)

    def update_inplace(self, np_arr: np.ndarray) -> None:
        """Copy ``np_arr`` into this value's memory (same element count and type)."""
        mine = self._tensor("update_inplace")
        src = np.asarray(np_arr)
        if src.size != mine.size or src.dtype != mine.dtype:
            raise InvalidArgument(
                f"OrtValue.update_inplace: got {src.dtype} {list(src.shape)}, "
                f"the value holds {mine.dtype} {list(mine.shape)}"
            )
        np.copyto(mine, src.reshape(mine.shape))

    def _tensor(self, what: str) -> np.ndarray:
        if not isinstance(self._value, np.ndarray):
            raise InvalidArgument(f"OrtValue.{what}(): the value is not a tensor")
        return self._value

    def __repr__(self) -> str:
        if isinstance(self._value, np.ndarray):
            return f"OrtValue({self.data_type()}, shape={self.shape()}, device=cpu)"
        return f"OrtValue({self.data_type()})"


def unwrap(value: Any) -> Any:
    """A feed as the session takes it: OrtValues become what they hold."""
    return value._value if isinstance(value, OrtValue) else value  # noqa: SLF001 (its class)


class OrtDevice:
    """onnxruntime's device descriptor; onyx has the CPU only."""

    def __init__(self, device_type: int = 0, memory_type: int = 0, device_id: int = 0):
        self._type, self._memory, self._id = device_type, memory_type, device_id

    @staticmethod
    def cpu() -> int:
        return 0

    @staticmethod
    def default_memory() -> int:
        return 0

    def device_id(self) -> int:
        return self._id

    def device_type(self) -> int:
        return self._type

    def device_type_name(self) -> str:
        return "cpu" if self._type == 0 else f"device {self._type}"
