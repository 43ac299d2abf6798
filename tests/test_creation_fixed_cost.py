"""What a session's creation does per node and per attribute must stay cheap: the reader, the
checker, inference, the passes and the plan's binding walk every attribute of every node, so a
small model's creation is mostly their per-item costs (issue 23)."""

from __future__ import annotations

import enum
import linecache
import re
import sys

import numpy as np
from onnx import TensorProto, helper

import onyx
from onyx import ir

F = TensorProto.FLOAT
#: A read of a member off a class (``AttrType.GRAPH``), as source text.
_MEMBER_READ = re.compile(r"\b([A-Z]\w*)\.([A-Z][A-Z0-9_]*)\b")


def _conv_chain(n: int) -> bytes:
    """``n`` 1-D convolutions in a row, each with its weight and four attributes."""
    nodes, inits = [], []
    for i in range(n):
        w = f"w{i}"
        inits.append(helper.make_tensor(w, F, [1, 1, 3], np.ones(3, np.float32)))
        nodes.append(
            helper.make_node(
                "Conv",
                [f"x{i}", w],
                [f"x{i + 1}"],
                kernel_shape=[3],
                pads=[1, 1],
                strides=[1],
                dilations=[1],
            )
        )
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x0", F, [1, 1, 16])],
        [helper.make_tensor_value_info(f"x{n}", F, [1, 1, 16])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _enum_member_reads(fn) -> int:
    """How many reads of an enum member off its class onyx's code makes while ``fn`` runs
    (counted on the source lines it executes). Each goes through the enum class's
    ``__getattr__`` hook where Python's EnumType defines one (3.11): some 0.25 us a read."""
    per_line: dict[tuple[str, int], int] = {}
    count = 0

    def tracer(frame, event, arg):  # noqa: ANN001, ARG001  (sys.settrace's signature)
        nonlocal count
        if event == "line":
            key = (frame.f_code.co_filename, frame.f_lineno)
            reads = per_line.get(key)
            if reads is None:
                reads = 0
                if "onyx" in key[0] and "tests" not in key[0]:
                    for cls, _ in _MEMBER_READ.findall(linecache.getline(*key)):
                        if isinstance(frame.f_globals.get(cls), enum.EnumMeta):
                            reads += 1
                per_line[key] = reads
            count += reads
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def test_creation_reads_no_enum_member_per_node():
    # (on the creation path the members are module constants: a creation of conv1d_signal,
    # fourteen nodes, read some 1,900 of them, a fifth of its instructions)
    n = 20
    data = _conv_chain(n)
    onyx.InferenceSession(data)  # (first-use work: imports, memos)
    reads = _enum_member_reads(lambda: onyx.InferenceSession(data))
    assert reads < n, f"{reads} enum member reads for {n} nodes"


def _node_with(attributes: dict) -> ir.Node:
    node = ir.Node("If", [], 1)
    for name, (kind, value) in attributes.items():
        node.attributes[name] = ir.Attr(name, kind, value)
    return node


def test_has_subgraphs_agrees_with_subgraphs():
    g = ir.Graph(name="body")
    cases = [
        {},
        {"alpha": (ir.AttrType.FLOAT, 1.0)},
        {"then_branch": (ir.AttrType.GRAPH, None)},
        {"then_branch": (ir.AttrType.GRAPH, g)},
        {"bodies": (ir.AttrType.GRAPHS, [])},
        {"bodies": (ir.AttrType.GRAPHS, None)},
        {"bodies": (ir.AttrType.GRAPHS, [g])},
        {"alpha": (ir.AttrType.INT, 5), "then_branch": (ir.AttrType.GRAPH, g)},
    ]
    for attributes in cases:
        node = _node_with(attributes)
        assert node.has_subgraphs() == any(True for _ in node.subgraphs()), attributes
