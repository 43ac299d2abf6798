"""Run onnx's backend node suite directly against onyx kernels, reading the test models with onnx.

This is a test-side harness (tests may import onnx): it lets kernels be proven before the
runtime proper exists, and gives a quick per-op loop while writing kernels:

    python tests/node_harness.py softmax          # cases whose name contains 'softmax'
    python tests/node_harness.py -v test_add$     # regex, verbose failures
"""

from __future__ import annotations

import re
import sys
import traceback
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from onyx.runtime.registry import lookup  # noqa: E402


class HarnessError(Exception):
    pass


def to_value(x):
    """onnx test data -> what onyx kernels take: ndarray, list (sequence), dict, None."""
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    if isinstance(x, onnx.SparseTensorProto):
        return numpy_helper.to_array(onnx.numpy_helper.to_array(x))
    if isinstance(x, (list, tuple)):
        return [to_value(v) for v in x]
    if isinstance(x, dict):
        return {k: to_value(v) for k, v in x.items()}
    if x is None:
        return None
    if isinstance(x, np.ndarray):
        return x
    return np.asarray(x)


def attr_value(a: onnx.AttributeProto):
    v = helper.get_attribute_value(a)
    T = onnx.AttributeProto
    if a.type == T.STRING:
        return v.decode("utf-8")
    if a.type == T.STRINGS:
        return [s.decode("utf-8") for s in v]
    if a.type == T.TENSOR:
        return numpy_helper.to_array(v)
    if a.type == T.TENSORS:
        return [numpy_helper.to_array(t) for t in v]
    if a.type == T.SPARSE_TENSOR:
        return _sparse_to_dense(v)
    if a.type == T.GRAPH:
        return v  # opaque to kernels: they hand it to ctx.run_graph
    if a.type == T.GRAPHS:
        return list(v)
    if a.type in (T.INTS, T.FLOATS):
        return list(v)
    return v


def _sparse_to_dense(sp):
    values = numpy_helper.to_array(sp.values)
    indices = numpy_helper.to_array(sp.indices)
    dense = np.zeros(int(np.prod(sp.dims)), dtype=values.dtype)
    if indices.ndim == 2:
        indices = np.ravel_multi_index(indices.T, tuple(sp.dims))
    dense[indices] = values
    return dense.reshape(tuple(sp.dims))


class Ctx:
    def __init__(self, runner, node, env, opset):
        self.runner = runner
        self.env = env
        self.node_name = node.name
        self.op_type = node.op_type
        outs = list(node.output)
        while outs and not outs[-1]:
            outs.pop()
        self.n_outputs = len(outs)
        self.outputs_wanted = tuple(bool(o) for o in outs)
        self.opset = opset

    def run_graph(self, graph, inputs):
        return self.runner.run_graph(graph, list(inputs), outer=self.env)

    def graph_input_count(self, graph):
        return len(graph.input)

    def graph_output_count(self, graph):
        return len(graph.output)

    def graph_output_types(self, graph):
        return [None] * len(graph.output)  # the harness does not convert types


class Runner:
    def __init__(self, model: onnx.ModelProto):
        self.opsets = {
            ("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import
        }
        self.model = model

    def run_graph(self, graph, inputs, outer=None):
        env = dict(outer or {})
        for init in graph.initializer:
            env[init.name] = numpy_helper.to_array(init)
        for vi, x in zip(graph.input, inputs):
            env[vi.name] = x
        for node in graph.node:
            self.run_node(node, env)
        return [env[o.name] for o in graph.output]

    def run_node(self, node, env):
        domain = "" if node.domain == "ai.onnx" else node.domain
        opset = self.opsets.get(domain, 1)
        kernel = lookup(node.op_type, domain, opset)
        if kernel is None:
            raise HarnessError(f"no kernel for {domain or 'ai.onnx'}::{node.op_type} v{opset}")
        args = [env[n] if n else None for n in node.input]
        if not kernel.variadic:
            if len(args) > kernel.n_positional:
                raise HarnessError(
                    f"{node.op_type}: {len(args)} inputs, kernel takes {kernel.n_positional}"
                )
            args += [None] * (kernel.n_positional - len(args))
        kwargs = {}
        for a in node.attribute:
            if a.name not in kernel.attributes and not kernel.accepts_any_attr:
                raise HarnessError(f"{node.op_type}: kernel does not declare attribute {a.name!r}")
            kwargs[a.name] = attr_value(a)
        if kernel.takes_ctx:
            result = kernel.fn(Ctx(self, node, env, opset), *args, **kwargs)
        else:
            result = kernel.fn(*args, **kwargs)
        if not isinstance(result, tuple):
            result = (result,)
        for name, value in zip(node.output, result):
            if name:
                env[name] = value


def compare(expected, actual, rtol, atol, where="output"):
    if expected is None:
        if actual is not None:
            raise AssertionError(f"{where}: expected None (empty optional), got {type(actual)}")
        return
    if isinstance(expected, list):
        if not isinstance(actual, list):
            raise AssertionError(
                f"{where}: expected a sequence (list), got {type(actual).__name__}"
            )
        if len(actual) != len(expected):
            raise AssertionError(f"{where}: sequence length {len(actual)} != {len(expected)}")
        for i, (e, a) in enumerate(zip(expected, actual)):
            compare(e, a, rtol, atol, f"{where}[{i}]")
        return
    if not isinstance(actual, np.ndarray):
        raise AssertionError(f"{where}: expected ndarray, got {type(actual).__name__}")
    np.testing.assert_array_equal(actual.shape, expected.shape, err_msg=f"{where}: shape")
    if expected.dtype == object:
        np.testing.assert_array_equal(actual, expected, err_msg=where)
        return
    np.testing.assert_equal(actual.dtype, expected.dtype, err_msg=f"{where}: dtype")
    if expected.dtype.name == "bfloat16":
        rtol = max(rtol, 2**-6)
    if expected.dtype.kind not in "biufc" or expected.dtype.name == "bfloat16":
        actual, expected = actual.astype(np.float32), expected.astype(np.float32)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=where)


def run_case(case):
    runner = Runner(case.model)
    for inputs, outputs in case.data_sets:
        feeds = [to_value(x) for x in inputs]
        results = runner.run_graph(case.model.graph, feeds)
        expected = [to_value(x) for x in outputs]
        for i, (e, a) in enumerate(zip(expected, results)):
            compare(e, a, case.rtol, case.atol, f"output {i} ({case.model.graph.output[i].name})")


def node_cases(pattern: str = ""):
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    rx = re.compile(pattern)
    return [c for c in cases if rx.search(c.name)]


def main(argv):
    verbose = "-v" in argv
    args = [a for a in argv if a != "-v"]
    cases = node_cases(args[0] if args else "")
    passed, failures = 0, Counter()
    for case in cases:
        try:
            with np.errstate(all="ignore"):
                run_case(case)
            passed += 1
        except HarnessError as e:
            failures[str(e)] += 1
            if verbose:
                print(f"FAIL {case.name}: {e}")
        except Exception as e:  # report every failure kind, keep going
            failures["error"] += 1
            print(f"FAIL {case.name}: {type(e).__name__}: {str(e)[:300]}")
            if verbose:
                traceback.print_exc()
    print(f"{passed} passed, {len(cases) - passed} failed of {len(cases)}")
    for msg, n in failures.most_common(40 if verbose else 15):
        if msg != "error":
            print(f"  {n:4d}  {msg}")


if __name__ == "__main__":
    main(sys.argv[1:])
