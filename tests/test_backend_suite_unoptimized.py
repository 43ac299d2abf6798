"""The same official backend suite with graph optimizations off (ORT_DISABLE_ALL), so every
kernel is proven on the graph as written, not only on the optimizer's rewrite of it."""

from __future__ import annotations

from test_backend_suite import backend_test_cases

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


globals().update(backend_test_cases(UnoptimizedBackend, __name__))
