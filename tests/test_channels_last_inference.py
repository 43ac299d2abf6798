"""Shape rules of the layout pass's channels-last ops (inference/channels_last.py): the types
a session's first run checks its outputs against. Every NHWC value of an optimized
MobileNet-style net gets the transposed type of the NCHW value it stands for, and the first
run's output check then holds them to it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from test_channels_last import RNG, _ops, mobile_net

import onyx
from onyx.errors import RuntimeFailure
from onyx.inference.engine import derived_types
from onyx.optimizer import layout
from onyx.runtime import plan


@pytest.fixture
def forced(monkeypatch):
    monkeypatch.setattr(layout, "_worthwhile", lambda: True)


def _dims(types: dict) -> dict:
    return {v.name: tuple(t.shape.dims) for v, t in types.values() if t.shape is not None}


@pytest.mark.parametrize("stride, opset", [(2, 18), (1, 17)])
def test_nhwc_types_are_the_nchw_ones_transposed(forced, stride, opset):
    m = mobile_net(20, 36, stride, opset)
    opt = onyx.optimize(onyx.loads(m))
    assert "NhwcScaledFusedConvAdd" in _ops(opt) and "NhwcGlobalAveragePool" in _ops(opt)
    nchw = _dims(derived_types(onyx.loads(m)))  # (the original graph: every value named)
    nhwc = _dims(derived_types(opt))
    checked = 0
    for node in opt.graph:
        if node.domain != "ai.onyx" or not node.op_type.startswith("Nhwc"):
            continue
        name = node.outputs[0].name
        assert name.endswith("_nhwc") and name in nhwc, node.op_type
        n, c, *spatial = nchw[name[: -len("_nhwc")]]
        assert nhwc[name] == (n, *spatial, c), node.op_type
        checked += 1
    assert checked >= 8
    assert nhwc["y"] == nchw["y"] == ("N", 7)


def test_first_run_checks_the_nhwc_outputs(forced, monkeypatch):
    """A channels-last kernel that returns a wrong shape fails the first run, naming it."""
    m = mobile_net(20, 36, 2, 18)
    x = RNG.uniform(-1, 1, (2, 3, 13, 11)).astype(np.float32)
    real_lookup = plan.lookup

    def lookup(op_type, domain="", version=None):
        kernel = real_lookup(op_type, domain, version)
        if op_type != "NhwcGlobalAveragePool":
            return kernel
        doubled = copy.copy(kernel)  # (a frozen record: its copy's kernel returns two means)
        object.__setattr__(doubled, "fn", lambda X: np.concatenate([kernel.fn(X)] * 2, axis=1))
        return doubled

    monkeypatch.setattr(plan, "lookup", lookup)
    sess = onyx.InferenceSession(m)
    with pytest.raises(RuntimeFailure, match=r"NhwcGlobalAveragePool.*proved tensor\(float\)"):
        sess.run(None, {"x": x})
