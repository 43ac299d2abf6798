"""The onnx backend interface (``prepare``, ``run_model``, ``run_node``, ``supports_device``),
so onnx's ``BackendTest`` runner can drive onyx.

It accepts onnx's protobuf messages without importing onnx: anything with
``SerializeToString()`` is serialized and read back with onyx's own schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .runtime.session import InferenceSession, SessionOptions

#: The opset a lone node runs at when the caller names none.
DEFAULT_NODE_OPSET = 28


def _as_bytes(message: Any) -> bytes:
    if isinstance(message, bytes | bytearray):
        return bytes(message)
    return message.SerializeToString()


class BackendRep:
    """A prepared model: ``run(inputs)`` returns the outputs as a tuple."""

    def __init__(self, session: InferenceSession):
        self.session = session
        self._names = [i.name for i in session.get_inputs()]

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            if not isinstance(inputs, list | tuple):
                inputs = [inputs]
            feed = dict(zip(self._names, inputs))
        return tuple(self.session.run(None, feed))


def prepare(model: Any, device: str = "CPU", **kwargs: Any) -> BackendRep:
    options = kwargs.pop("sess_options", None) or SessionOptions()
    return BackendRep(InferenceSession(_as_bytes(model), options))


def run_model(model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
    return prepare(model, device, **kwargs).run(inputs)


def run_node(
    node: Any,
    inputs: Sequence[Any],
    device: str = "CPU",
    outputs_info: Any = None,
    opset_version: int | None = None,
    **kwargs: Any,
) -> tuple:
    """Run one NodeProto on ``inputs`` (in the node's input order)."""
    from .proto import onyx_pb2 as pb

    proto = pb.NodeProto()
    proto.ParseFromString(_as_bytes(node))
    graph = pb.GraphProto(name="run_node", node=[proto])
    graph.input.extend(pb.ValueInfoProto(name=n) for n in proto.input if n)
    graph.output.extend(pb.ValueInfoProto(name=n) for n in proto.output if n)
    model = pb.ModelProto(ir_version=10, graph=graph, producer_name="onyx.backend")
    model.opset_import.add(domain=proto.domain, version=opset_version or DEFAULT_NODE_OPSET)
    if proto.domain not in ("", "ai.onnx"):
        model.opset_import.add(domain="", version=DEFAULT_NODE_OPSET)
    session = InferenceSession(model.SerializeToString())
    names = [n for n in proto.input if n]
    return tuple(session.run(None, dict(zip(names, inputs))))


def supports_device(device: str) -> bool:
    return str(device).upper().startswith("CPU")


def is_compatible(model: Any, device: str = "CPU", **kwargs: Any) -> bool:
    return supports_device(device)
