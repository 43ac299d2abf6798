"""Loading a model with protobuf's generated classes: every model wire_reader.py does not
follow (model_io.py tries that first).

It splits the model's top-level fields with the wire scanner, parses everything but the
graph with the generated classes, reads the main graph's initializers (big ones as zero-copy
views of the file, which is memory-mapped) and leaves the nodes as a parsed message until
someone asks for ``model.graph``; a big graph is split field by field (``_GraphSource._split``),
so that no message holds its big initializers and models over protobuf's 2 GiB limit load.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from ..errors import FormatError
from ..ir.graph import Model
from ..proto import GraphProto, ModelProto, TensorProto
from ..utils import gc_paused
from . import model_io, wire
from .model_io import _EXTERNAL_MARK, _GRAPH, _INITIALIZER, _RAW_DATA
from .reader import Reader
from .tensors import tensor_from_proto


def _parse(cls, data, where: str, part: str):
    msg = cls()
    try:
        msg.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise FormatError(f"{where}: {part} is not valid protobuf ({e})") from None
    return msg


def load_model(data, where: str, base_dir: str | None, load_external_data: bool) -> Model:
    mp, graph_bytes = split_model(data, where)
    externals = _Externals(base_dir, where) if load_external_data and base_dir else None
    reader = Reader(where, externals)
    model = reader.model_header(mp)
    model.base_dir = base_dir
    if graph_bytes is not None:
        model.set_graph_source(_GraphSource(reader, graph_bytes, data, where))
    return model


def split_model(data, where: str) -> tuple[ModelProto, memoryview | None]:
    """A model file's bytes as its parsed header (every field but the graph) and the bytes of
    its main graph (None when it has none); raises FormatError for what is not a model."""
    mv = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
    if len(mv) == 0:
        raise FormatError(f"{where}: empty file, not an ONNX model")
    header_parts, graph_spans = [], []
    try:
        for field, start, payload, end in wire.iter_fields(mv):
            if field == _GRAPH and payload != end and _is_len(mv, start):
                graph_spans.append((payload, end))
            elif field == _GRAPH and _is_len(mv, start):
                graph_spans.append((end, end))
            else:
                header_parts.append(mv[start:end])
    except wire.WireError as e:
        raise FormatError(f"{where}: not an ONNX model (truncated or corrupt bytes: {e})") from None
    mp = _parse(ModelProto, b"".join(header_parts), where, "the model")
    if not graph_spans and not mp.HasField("ir_version") and not mp.opset_import:
        raise FormatError(f"{where}: not an ONNX model (no graph, IR version or opset)")
    if not graph_spans:
        return mp, None
    if len(graph_spans) == 1:
        return mp, mv[graph_spans[0][0] : graph_spans[0][1]]
    # a repeated singular message field merges: same as its payloads concatenated
    return mp, memoryview(b"".join(mv[a:b] for a, b in graph_spans))


def _is_len(mv, start: int) -> bool:
    return mv[start] & 7 == wire.LEN


class _Externals:
    """The model's external.ExternalResolver, made when a tensor first names external data:
    external.py (mapping files, checking locations, and the writer's ExternalSink) is imported
    then, and the model of a session that has none never imports it."""

    __slots__ = ("base_dir", "where", "_resolver")

    def __init__(self, base_dir: str, where: str):
        self.base_dir, self.where, self._resolver = base_dir, where, None

    def tensor(self, *args):
        if self._resolver is None:
            from .external import ExternalResolver

            self._resolver = ExternalResolver(self.base_dir, self.where)
        return self._resolver.tensor(*args)


class _GraphSource:
    """The parsed main graph, converted to IR on first access.

    Parsing (and reading the initializers, which checks their sizes and external files) happens
    at load so errors surface there; only the node conversion waits.
    """

    def __init__(self, reader: Reader, graph_bytes: memoryview, data, where: str):
        self.reader = reader
        self.raw = graph_bytes
        self.data = data
        self._marker: bool | None = None
        if len(graph_bytes) < model_io.SPLIT_MIN:
            self.gp = _parse(GraphProto, graph_bytes, where, "the graph")
            self.initializers = reader.initializers(self.gp.initializer, "graph")
        else:
            self.gp, self.initializers = self._split(graph_bytes, where)
        self.has_external = any(t.external is not None for t in self.initializers)

    def _split(self, mv: memoryview, where: str):
        rest, order, big = [], [], []
        try:
            for field, start, payload, end in wire.iter_fields(mv):
                if (
                    field == _INITIALIZER
                    and end - payload >= model_io.BIG_TENSOR
                    and _is_len(mv, start)
                ):
                    order.append(len(big))
                    big.append(self._big_tensor(mv, payload, end, where))
                else:
                    if field == _INITIALIZER:
                        order.append(None)
                    rest.append(mv[start:end])
        except wire.WireError as e:
            raise FormatError(f"{where}: graph: truncated or corrupt bytes ({e})") from None
        rest_bytes = b"".join(rest)
        self._marker = _EXTERNAL_MARK in rest_bytes
        gp = _parse(GraphProto, rest_bytes, where, "the graph")
        small = iter(gp.initializer)
        tensors = []
        for i in order:
            if i is None:
                t = next(small)
                tensors.append(self.reader.tensor(t, f"graph initializer {t.name!r}"))
            else:
                tensors.append(big[i])
        del gp.initializer[:]
        return gp, tensors

    def _big_tensor(self, mv: memoryview, start: int, end: int, where: str):
        header, raw = [], None
        for field, fstart, payload, fend in wire.iter_fields(mv, start, end):
            if field == _RAW_DATA and _is_len(mv, fstart):
                raw = mv[payload:fend]
            else:
                header.append(mv[fstart:fend])
        tp = _parse(TensorProto, b"".join(header), where, "an initializer")
        what = f"graph initializer {tp.name!r}"
        try:
            return tensor_from_proto(tp, what, raw=raw, externals=self.reader.externals)
        except FormatError as e:
            raise FormatError(f"{where}: {e}") from None

    def might_have_external(self) -> bool:
        """Whether some tensor outside the initializers may sit in external data."""
        if self.has_external:
            return True
        if self._marker is None:  # the big initializers were not split out: search it all
            self._marker = _EXTERNAL_MARK in bytes(self.raw)
        return self._marker

    def __call__(self):
        with gc_paused():
            return self.reader.graph(self.gp, [], "graph", self.initializers)
