"""Reading and writing ONNX files: models, external data and the .pb tensor files of test data.

model = onyx.load("model.onnx")          # path, file object or bytes -> ir.Model
onyx.save(model, "out.onnx", external_data=True)
arr = onyx.load_tensor("input_0.pb")     # TensorProto/SequenceProto/MapProto/OptionalProto
"""

from .model_io import as_model, dumps, load, loads, save
from .values import from_array, load_tensor, save_tensor, to_array

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
