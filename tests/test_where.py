"""`onyx where OP`: an op's facts, read from the registries."""

from __future__ import annotations

from onyx.tools.cli import main
from onyx.tools.cmd_where import describe


def test_where_names_each_fact_and_its_file():
    text = "\n".join(describe("Conv"))
    assert "since opset 11" in text  # a schema version
    assert "onyx/inference/nn.py" in text  # its rule
    assert "onyx/runtime/kernels/conv.py" in text  # its kernel
    assert "threads=pool" in text  # a trait
    assert "ConvBNFusion" in text  # a fusion taking it
    assert "native.FloatConv" in text  # a native path


def test_where_knows_contrib_ops_and_fails_for_unknown_ones(capsys):
    assert main(["where", "Gelu", "--domain", "com.microsoft"]) == 0
    assert "contrib_gelu" in capsys.readouterr().out
    assert main(["where", "NoSuchOp"]) == 1
