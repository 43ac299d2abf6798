"""A fresh process's first answer from a MobileNet-like model (issue 23's cold start): what a
session's creation and first run leave out (the fast checker's module, the inference memo's
keys at the output check), and that the first run's answers and errors are the steady ones."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx

RNG = np.random.default_rng(3)


def _w(*shape) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def mobile_net(batch: int = 1) -> bytes:
    """A stem conv, a depthwise-separable block with a residual, clamps, pooling and a
    classifier: the serving zoo's cnn_mobilenet in small (channels-last chains where the
    native kernels run)."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "ws", "bs"], ["s"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Clip", ["s", "lo", "hi"], ["s1"]),
        n("Conv", ["s1", "wd", "bd"], ["d"], group=16, pads=[1, 1, 1, 1]),
        n("Clip", ["d", "lo", "hi"], ["d1"]),
        n("Conv", ["d1", "wp", "bp"], ["p"]),
        n("Add", ["p", "s1"], ["r"]),
        n("Conv", ["r", "we", "be"], ["e"]),
        n("Clip", ["e", "lo", "hi"], ["e1"]),
        n("GlobalAveragePool", ["e1"], ["g"]),
        n("Flatten", ["g"], ["f"]),
        n("Gemm", ["f", "wc", "bc"], ["y"], transB=1),
    ]
    inits = {
        "ws": _w(16, 3, 3, 3), "bs": _w(16), "wd": _w(16, 1, 3, 3), "bd": _w(16),
        "wp": _w(16, 16, 1, 1), "bp": _w(16), "we": _w(32, 16, 1, 1), "be": _w(32),
        "wc": _w(5, 32), "bc": _w(5), "lo": np.float32(0.0), "hi": np.float32(6.0),
    }  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "mobile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 24, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 5])],
        [numpy_helper.from_array(np.asarray(a), k) for k, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("mobile") / "mobile.onnx"
    path.write_bytes(mobile_net())
    return str(path)


def _fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_session_never_imports_the_fast_checker(model_path):
    # (the session checks the model it built; checker_fast proves serialized models valid,
    # which onyx.check of a path or bytes still does)
    code = (
        "import sys, numpy as np, onyx\n"
        f"s = onyx.InferenceSession({model_path!r})\n"
        "s.run(None, {'x': np.zeros((1, 3, 24, 24), np.float32)})\n"
        "print('onyx.checker_fast' in sys.modules, end=' ')\n"
        f"onyx.check({model_path!r})\n"
        "print('onyx.checker_fast' in sys.modules)\n"
    )
    assert _fresh(code) == "False True"


def test_the_first_runs_output_check_leaves_the_inference_memo_alone(model_path):
    # (the check infers the optimized graph, whose nodes creation's inference never saw: the
    # memo's keys cost that run more than the rules; a creation's entries stay as they were)
    code = (
        "import numpy as np, onyx\n"
        "from onyx.inference import memo\n"
        f"s = onyx.InferenceSession({model_path!r})\n"
        "before = dict(memo.MEMO)\n"
        "s.run(None, {'x': np.zeros((1, 3, 24, 24), np.float32)})\n"
        "print(bool(before), s._output_check.expected != {}, memo.MEMO == before)\n"
    )
    assert _fresh(code) == "True True True"


def test_the_first_answer_is_the_steady_one_and_bad_input_still_raises(model_path):
    x = RNG.standard_normal((1, 3, 24, 24)).astype(np.float32)
    first = onyx.InferenceSession(model_path).run(None, {"x": x})[0]
    s = onyx.InferenceSession(model_path)
    for _ in range(2):
        s.run(None, {"x": RNG.standard_normal(x.shape).astype(np.float32)})
    steady = s.run(None, {"x": x})[0]
    assert first.tobytes() == steady.tobytes()
    fresh = onyx.InferenceSession(model_path)
    with pytest.raises(onyx.OnyxError, match="x"):
        fresh.run(None, {"x": np.zeros((1, 3, 24), np.float32)})
    with pytest.raises(onyx.OnyxError):
        fresh.run(None, {"x": np.zeros((1, 3, 24, 24), np.float64)})
    assert fresh.run(None, {"x": x})[0].tobytes() == first.tobytes()


def test_a_creation_that_imported_settles_its_objects_in_the_oldest_generation(model_path):
    # (a first creation imports kernels, passes and native families: the collector's first
    # pass after the pause scanned those and the session's graph and plan to find nothing;
    # a creation that imports nothing leaves its objects young, as before)
    code = (
        "import gc, numpy as np, onyx\n"
        f"s = onyx.InferenceSession({model_path!r})\n"
        "young = lambda o: any(y is o for g in (0, 1) for y in gc.get_objects(g))\n"
        "node = next(iter(s._plan.graph))\n"
        "print(young(s._plan), young(node), end=' ')\n"
        f"t = onyx.InferenceSession({model_path!r})\n"
        "print(young(t._plan))\n"
    )
    assert _fresh(code) == "False False True"
