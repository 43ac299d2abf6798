"""The runtimes `compare` and `reduce` run a model on, behind one small interface.

Every runner can fetch any named value of the main graph, not only the graph outputs: onyx does
it natively (a session runs with any value name as an output); onnxruntime and onnx's reference
evaluator run a copy of the model with the wanted values added as graph outputs.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .. import ir
from ..errors import InvalidArgument, OnyxError

#: The names ``against=`` takes besides another model. "float32": the model itself with its
#: float16 / bfloat16 tensors made float32, run by onyx (did a reduced-precision conversion
#: break it?).
RUNTIMES = ("onnxruntime", "reference", "onyx", "onyx-unoptimized", "float32")


def as_model(source: Any) -> ir.Model:
    """An ir.Model from a path, bytes or a model (serde.as_model, the one loader)."""
    from .. import serde

    return serde.as_model(source, user="the debugger")


def _fit(value: Any, dtype: np.dtype | None) -> Any:
    """A feed converted to the element type the runner's model declares (fp32 vs fp16 models
    compared on the same data)."""
    if dtype is None or not isinstance(value, np.ndarray) or value.dtype == dtype:
        return value
    if value.dtype.kind in "fiub" and np.dtype(dtype).kind in "fiub":
        return value.astype(dtype)
    return value


def input_dtypes(model: ir.Model) -> dict[str, np.dtype | None]:
    inits = set(model.graph.initializers)
    out = {}
    for v in model.graph.inputs:
        if v.name in inits:
            continue
        t = v.type
        out[v.name] = ir.to_numpy(t.elem_type) if isinstance(t, ir.TensorType) else None
    return out


class Runner:
    """Runs one model; ``run(feed, names)`` returns {name: value} for the wanted value names
    (the graph outputs when None)."""

    label = "runtime"

    def __init__(self, model: ir.Model):
        self.model = model
        self._dtypes = input_dtypes(model)

    def output_names(self) -> list[str]:
        return [v.name for v in self.model.graph.outputs]

    def value_names(self) -> set[str]:
        """The names this runner can fetch."""
        return {v.name for node in self.model.graph for v in node.outputs if v.name}

    def feed(self, feed: dict[str, Any]) -> dict[str, Any]:
        return {k: _fit(v, self._dtypes.get(k)) for k, v in feed.items() if k in self._dtypes}

    def run(self, feed: dict[str, Any], names: list[str] | None = None) -> dict[str, Any]:
        raise NotImplementedError


class OnyxRunner(Runner):
    """``float16_in_float32=False``: a float16 model computes in float16, op by op, as the
    spec (and a GPU) does, where a session otherwise computes it in float32 as onnxruntime's
    CPU provider does: a precision check (against float32, another model, the reference
    evaluator) must see float16's rounding and overflow."""

    def __init__(self, model: ir.Model, optimize: bool = True, float16_in_float32: bool = True):
        from ..runtime.session import InferenceSession, SessionOptions

        super().__init__(model)
        options = SessionOptions()
        if not optimize:
            options.graph_optimization_level = 0
        if not float16_in_float32:
            options.disabled_optimizers = ["InsertCastTransformer"]
        self.label = "onyx" if optimize else "onyx-unoptimized"
        self.session = InferenceSession(model, options)

    def value_names(self) -> set[str]:
        # what survived the session's optimizations (a fused-away value is not observable)
        return self.session.value_names()

    def run(self, feed, names=None):
        names = names or self.output_names()
        return dict(zip(names, self.session.run(list(names), self.feed(feed))))


class WithOutputsRunner(Runner):
    """A runtime that only returns graph outputs: it runs a copy of the model whose outputs are
    the wanted values (serialized with onyx.dumps), one copy per set of names."""

    def __init__(self, model: ir.Model):
        super().__init__(model)
        self._typed = None
        self._cache: dict[tuple[str, ...], Any] = {}

    def run(self, feed, names=None):
        key = tuple(names or self.output_names())
        runner = self._cache.get(key)
        if runner is None:
            runner = self._cache[key] = self.load(self._with_outputs(key))
        return dict(zip(key, self.execute(runner, key, self.feed(feed))))

    def _with_outputs(self, names: tuple[str, ...]) -> bytes:
        from .. import serde
        from ..optimizer.core import clone_model

        if self._typed is None:
            self._typed = _typed_copy(self.model)
        m = clone_model(self._typed)
        by_name = {v.name: v for v in m.graph.values() if v.name}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise InvalidArgument(f"{self.label}: the model has no value(s) {missing[:5]}")
        m.graph.outputs = [by_name[n] for n in names]
        return serde.dumps(m)

    def load(self, data: bytes):
        raise NotImplementedError

    def execute(self, runner, names, feed) -> list:
        raise NotImplementedError


def _typed_copy(model: ir.Model) -> ir.Model:
    """A copy whose values carry inferred types (graph outputs need one in the file)."""
    from ..inference import infer_shapes
    from ..optimizer.core import clone_model

    m = clone_model(model)
    try:
        infer_shapes(m)
    except Exception:  # noqa: BLE001  (types are a help here, not a requirement)
        pass
    return m


class OnnxruntimeRunner(WithOutputsRunner):
    label = "onnxruntime"

    def __init__(self, model: ir.Model):
        try:
            import onnxruntime
        except ImportError:
            raise OnyxError(
                "comparing against onnxruntime needs it installed: pip install onnxruntime"
            ) from None
        self._ort = onnxruntime
        super().__init__(model)

    def load(self, data):
        options = self._ort.SessionOptions()
        options.log_severity_level = 3
        return self._ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])

    def execute(self, runner, names, feed):
        return runner.run(list(names), feed)


class ReferenceRunner(WithOutputsRunner):
    label = "reference"

    def __init__(self, model: ir.Model):
        try:
            import onnx
            from onnx.reference import ReferenceEvaluator
        except ImportError:
            raise OnyxError(
                "comparing against onnx's reference evaluator needs onnx: pip install onnx"
            ) from None
        self._onnx, self._evaluator = onnx, ReferenceEvaluator
        super().__init__(model)

    def load(self, data):
        return self._evaluator(self._onnx.load_from_string(data))

    def execute(self, runner, names, feed):
        return runner.run(list(names), feed)


def make_runner(against: Any, model: ir.Model, optimize: bool = True) -> Runner:
    """The runner ``against`` names: a runtime's name, or another model run by onyx."""
    if against == "onnxruntime":
        return OnnxruntimeRunner(model)
    if against == "reference":
        return ReferenceRunner(model)
    if against in ("onyx", "onyx-unoptimized"):
        return OnyxRunner(model, optimize=against == "onyx" and optimize)
    if against == "float32":
        return _labelled(OnyxRunner(float32_copy(model), optimize=optimize), "float32")
    label = os.fspath(against) if isinstance(against, str | os.PathLike) else "other model"
    return _labelled(OnyxRunner(as_model(against), optimize=optimize), label)


def _labelled(runner: Runner, label: str) -> Runner:
    runner.label = label
    return runner


_HALF = {ir.DataType.FLOAT16, ir.DataType.BFLOAT16}


def float32_copy(model: ir.Model) -> ir.Model:
    """A copy of ``model`` computing in float32 where it computes in float16 or bfloat16:
    value types, initializers, Cast targets and constant tensors (main graph)."""
    from ..optimizer.core import clone_model

    m = clone_model(model)
    g = m.graph
    for v in [*g.values(), *g.outputs, *g.value_info]:
        t = v.type
        if isinstance(t, ir.TensorType) and t.elem_type in _HALF:
            v.type = ir.TensorType(ir.DataType.FLOAT, t.shape)
        if v.const_value is not None and v.const_value.dtype in _HALF:
            v.const_value = _float32_tensor(v.const_value)
    for node in g:
        for a in node.attributes.values():
            if a.name == "to" and node.op_type == "Cast" and a.value in _HALF:
                node.set_attr("to", int(ir.DataType.FLOAT))
            elif isinstance(a.value, ir.Tensor) and a.value.dtype in _HALF:
                node.set_attr(a.name, _float32_tensor(a.value), a.type)
    return m


def _float32_tensor(t: ir.Tensor) -> ir.Tensor:
    return ir.Tensor(t.numpy().astype(np.float32), name=t.name)
