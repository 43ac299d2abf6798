"""The kernel index (onyx/runtime/kernels/_index.py): the registry imports only the kernel
modules of the ops a model uses, so the index must name every module that registers an op."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

from onyx.runtime import registry
from onyx.runtime.kernels import _index

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_kernel_index", ROOT / "scripts" / "gen_kernel_index.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_index_names_every_module_that_registers_each_op():
    assert _index.MODULES == registry.kernel_index(), "rerun python scripts/gen_kernel_index.py"


def test_index_file_is_what_the_generator_writes():
    gen = _generator()
    assert gen.OUT.read_text() == gen.render(registry.kernel_index())


def _fresh(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return out.stdout.strip()


def test_a_session_imports_only_its_ops_kernel_modules():
    loaded = _fresh(
        "import sys, numpy as np, onyx\n"
        "s = onyx.InferenceSession('onyx/examples/tiny_cnn.onnx')\n"
        "s.run(None, {'image': np.ones((1, 1, 28, 28), np.float32)})\n"
        "print(' '.join(m for m in sys.modules if m.startswith('onyx.runtime.kernels.')))"
    ).split()
    assert "onyx.runtime.kernels.conv" in loaded
    for family in ("ml.tree", "contrib_attention", "rnn", "signal", "text"):
        assert f"onyx.runtime.kernels.{family}" not in loaded


def test_an_op_the_index_does_not_know_loads_every_module():
    loaded = _fresh(
        "import sys\n"
        "from onyx.runtime import registry\n"
        "assert registry.lookup('NoSuchOp', 'no.such.domain') is None\n"
        "print(' '.join(m for m in sys.modules if m.startswith('onyx.runtime.kernels.')))"
    ).split()
    assert {f"onyx.runtime.kernels.{m}" for ms in _index.MODULES.values() for m in ms} <= set(
        loaded
    )


def test_lookup_and_traits_load_the_op_on_demand():
    code = (
        "import sys\n"
        "from onyx.runtime import registry\n"
        "k = registry.lookup('TreeEnsembleClassifier', 'ai.onnx.ml', 3)\n"
        "t = registry.traits('Conv', 'ai.onnx')\n"
        "print(k.fn.__module__, t.threads, 'onyx.runtime.kernels.rnn' in sys.modules)"
    )
    assert _fresh(code) == "onyx.runtime.kernels.ml.tree pool False"
