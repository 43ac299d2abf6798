"""onnx's backend node-suite cases, loaded once per test process (the tools' tests share them)."""

from __future__ import annotations

import functools
import warnings


@functools.cache
def node_cases() -> tuple:
    import onnx.backend.test.loader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(onnx.backend.test.loader.load_node_model_tests())
