"""The same official backend suite with graph optimizations off (ORT_DISABLE_ALL), so every
kernel is proven on the graph as written, not only on the optimizer's rewrite of it."""

from __future__ import annotations

import re
import warnings

import onnx.backend.test
from test_backend_suite import REAL_MODELS, known_failures

import onyx.backend
from onyx.runtime.session import SessionOptions


class UnoptimizedBackend:
    @staticmethod
    def prepare(model, device="CPU", **kwargs):
        options = SessionOptions()
        options.graph_optimization_level = 0
        return onyx.backend.prepare(model, device, sess_options=options)

    run_node = staticmethod(onyx.backend.run_node)
    supports_device = staticmethod(onyx.backend.supports_device)
    is_compatible = staticmethod(onyx.backend.is_compatible)

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device).run(inputs)


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    backend_test = onnx.backend.test.BackendTest(UnoptimizedBackend, __name__)
for name in REAL_MODELS:
    backend_test.exclude(f"^{name}_(cpu|cuda)$")
backend_test.exclude("_cuda$")
for name in known_failures():
    backend_test.xfail(f"^{re.escape(name)}_cpu$")

globals().update(backend_test.test_cases)
