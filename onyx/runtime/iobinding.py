"""IOBinding: onnxruntime's bound inputs and outputs, for ``session.run_with_iobinding``.

On the CPU binding is bookkeeping: inputs are arrays (bound as arrays, OrtValues or raw
pointers), outputs are either allocated by the run or written into a bound buffer (an OrtValue
or a raw pointer), as onnxruntime writes into pre-allocated outputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidArgument
from .ortvalue import OrtValue, array_at, check_cpu, unwrap


class IOBinding:
    """``session.io_binding()``: bind inputs and outputs, run, read the outputs."""

    def __init__(self, session: Any):
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, OrtValue | None] = {}  # None: allocated by the run
        self._results: list[OrtValue] = []

    # -- inputs ---------------------------------------------------------------------------------
    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        self._inputs[name] = arr_on_cpu

    def bind_input(
        self,
        name: str,
        device_type: Any,
        device_id: int,
        element_type: Any,
        shape: Any,
        buffer_ptr: int,
    ) -> None:
        """Bind memory at ``buffer_ptr`` (the caller keeps it alive while bound)."""
        check_cpu(device_type, f"bind_input({name!r})")
        self._inputs[name] = array_at(buffer_ptr, element_type, [int(d) for d in shape])

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        self._inputs[name] = unwrap(ortvalue)

    def synchronize_inputs(self) -> None:
        """Nothing to wait for on the CPU."""

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    # -- outputs --------------------------------------------------------------------------------
    def bind_output(
        self,
        name: str,
        device_type: Any = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Any = None,
        buffer_ptr: int | None = None,
    ) -> None:
        """Bind an output: allocated by each run, or written into ``buffer_ptr``."""
        check_cpu(device_type, f"bind_output({name!r})")
        if buffer_ptr is None:
            self._outputs[name] = None
            return
        if element_type is None or shape is None:
            raise InvalidArgument(f"bind_output({name!r}): a buffer needs element_type and shape")
        self._outputs[name] = OrtValue(array_at(buffer_ptr, element_type, list(shape)))

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        self._outputs[name] = ortvalue

    def synchronize_outputs(self) -> None:
        """Nothing to wait for on the CPU."""

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    def get_outputs(self) -> list[OrtValue]:
        """The outputs of the last run, in binding order (bound OrtValues are these objects)."""
        return list(self._results)

    get_outputs_as_ortvaluevector = get_outputs

    def copy_outputs_to_cpu(self) -> list[Any]:
        return [_copy(unwrap(v)) for v in self._results]

    # -- running (session.run_with_iobinding) ---------------------------------------------------
    def run_bound(self, run_options: Any = None) -> None:
        """Run the session on the bound inputs, into the bound outputs."""
        if not self._outputs:
            raise InvalidArgument("run_with_iobinding: no output is bound (bind_output)")
        names = list(self._outputs)
        values = self._session.run(names, self._inputs, run_options)
        results = []
        for name, value in zip(names, values):
            bound = self._outputs[name]
            if bound is None:
                results.append(OrtValue(value))
                continue
            _write_into(name, bound, value)
            results.append(bound)
        self._results = results


def _write_into(name: str, bound: OrtValue, value: Any) -> None:
    target = unwrap(bound)
    value = np.asarray(value)
    if not isinstance(target, np.ndarray) or target.shape != value.shape:
        raise InvalidArgument(
            f"output {name!r}: the bound buffer is {bound!r}, the run produced "
            f"{value.dtype} {list(value.shape)}"
        )
    if target.dtype != value.dtype:
        raise InvalidArgument(
            f"output {name!r}: the bound buffer holds {target.dtype}, the output is {value.dtype}"
        )
    np.copyto(target, value)


def _copy(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


#: onnxruntime's name of the binding object its capi layer hands out.
SessionIOBinding = IOBinding
