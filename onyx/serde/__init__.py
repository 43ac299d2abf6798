"""Reading and writing ONNX files: models, external data and the .pb tensor files of test data.

model = onyx.load("model.onnx")          # path, file object or bytes -> ir.Model
onyx.save(model, "out.onnx", external_data=True)
arr = onyx.load_tensor("input_0.pb")     # TensorProto/SequenceProto/MapProto/OptionalProto
"""

import importlib
from typing import TYPE_CHECKING

from .model_io import as_model, load, loads

#: Names of saving.py (a model to a file or bytes, with writer.py and external.py) and of
#: values.py (the .pb files of test data, arrays to and from tensors), imported on first use:
#: a session loads a model without them, and each module a cold start imports costs it a tenth
#: of a millisecond before its code even runs, and more for its size.
_LAZY = {
    "dumps": "saving",
    "save": "saving",
    "from_array": "values",
    "load_tensor": "values",
    "save_tensor": "values",
    "to_array": "values",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    from .saving import dumps, save  # noqa: F401
    from .values import from_array, load_tensor, save_tensor, to_array  # noqa: F401

__all__ = [
    "as_model",
    "dumps",
    "from_array",
    "load",
    "load_tensor",
    "loads",
    "save",
    "save_tensor",
    "to_array",
]
