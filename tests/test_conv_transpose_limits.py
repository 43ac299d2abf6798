"""A ConvTranspose asked for an output no process could hold (the fuzzer's reshape_input and
window mutations: strides, dilations, output_shape or pads in the tens of thousands) is an
OnyxError naming the node and saying how many bytes the output would be, before anything is
allocated: not a MemoryError, and not a kill for memory where overcommit grants the pages.
Run in a subprocess under an address-space limit (as the fuzzing harness runs its cases)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

#: (x shape, W shape, attributes): outputs of 15 GiB to 300 GiB.
CASES = {
    "output_shape": ([1, 1, 4, 4], [1, 8, 3, 3], dict(output_shape=[100000, 100000])),
    "strides": ([1, 1, 4, 4], [1, 8, 3, 3], dict(strides=[30000, 30000])),
    "dilations": ([1, 1, 4, 4], [1, 8, 3, 3], dict(dilations=[30000, 30000])),
    "negative_pads": ([1, 1, 4, 4], [1, 8, 3, 3], dict(pads=[-50000] * 4)),
    "output_padding": (
        [1, 1, 4, 4],
        [1, 8, 3, 3],
        dict(output_padding=[20000, 20000], strides=[20001, 20001]),
    ),
    "batch": ([64, 64, 64, 64], [64, 64, 3, 3], dict(strides=[16, 16])),
    "columns": ([1, 1, 1000, 1000], [1, 4096, 3, 3], dict(strides=[4, 4])),
}

_SCRIPT = """
import json, sys
import numpy as np
import onyx
from onnx import TensorProto, helper, numpy_helper

x_shape, w_shape, attrs, dynamic = json.loads(sys.argv[1])
w = numpy_helper.from_array(np.ones(w_shape, np.float32), "w")
node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="the_ct", **attrs)
graph = helper.make_graph(
    [node], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C", "H", "W"] if dynamic
                                   else x_shape)],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
try:
    sess = onyx.InferenceSession(model.SerializeToString())
    sess.run(None, {"x": np.ones(x_shape, np.float32)})
    outcome = ["ran", ""]
except onyx.OnyxError as e:
    outcome = [type(e).__name__, str(e)]
except BaseException as e:
    outcome = ["raw " + type(e).__name__, str(e)]
print(json.dumps(outcome))
"""

LIMIT = 3 << 30  # (the fuzzing harness's 3072 MB)


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_an_output_past_memory_is_refused_naming_its_bytes(case, dynamic):
    x_shape, w_shape, attrs = CASES[case]
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps([x_shape, w_shape, attrs, dynamic])],
        capture_output=True, text=True, timeout=300, preexec_fn=_limited,
    )  # fmt: skip
    assert done.returncode == 0, f"the process died ({done.returncode}): {done.stderr[-2000:]}"
    kind, message = json.loads(done.stdout.splitlines()[-1])
    assert kind == "RuntimeFailure", (kind, message)
    assert "the_ct" in message and "bytes" in message and "more than the" in message, message
    assert "MemoryError" not in message, message
