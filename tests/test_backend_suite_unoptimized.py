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


# float16 attention built from primitive ops: 2 of 192 values are 1 float16 ulp beyond rtol 1e-3.
# The node that rounds differently is Softmax: the expected data round exp(x - max) and the row
# sum to float16 before dividing (Softmax-13's function body run op by op in float16), while onyx
# computes Softmax in float32 and rounds once. Optimized sessions pass: they compute the whole
# float16 graph in float32 as onnxruntime does (onyx/optimizer/float16.py), rounding at the end.
UNOPTIMIZED_FAILURES = ("test_attention_4d_causal_fp16_expanded",)

globals().update(backend_test_cases(UnoptimizedBackend, __name__, UNOPTIMIZED_FAILURES))
