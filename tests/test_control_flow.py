"""Control-flow cases whose outputs onnx's runner cannot compare itself (0-d tensors inside
sequences): checked here element by element against the suite's expected data."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import run_onnx
from onnx.backend.test.loader import load_model_tests


def node_case(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return next(c for c in load_model_tests(kind="node") if c.name == name)


@pytest.mark.parametrize("name", ["test_loop16_seq_none"])
def test_sequence_outputs_elementwise(name):
    case = node_case(name)
    feeds_names = [i.name for i in case.model.graph.input]
    for inputs, expected in case.data_sets:
        got = run_onnx(case.model, dict(zip(feeds_names, inputs)))
        assert len(got) == len(expected)
        for g_seq, e_seq in zip(got, expected):
            assert isinstance(g_seq, list) and len(g_seq) == len(e_seq)
            for g, e in zip(g_seq, e_seq):
                assert g.dtype == e.dtype and g.shape == e.shape
                np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol)
