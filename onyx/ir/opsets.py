"""Which opset version a node's domain is at: the one lookup every layer shares."""

from __future__ import annotations

from collections.abc import Mapping

#: The names of the standard ONNX domain ('' is canonical).
STANDARD_DOMAINS = frozenset({"", "ai.onnx"})


def canonical_domain(domain: str) -> str:
    """``domain`` with the standard domain spelled '' (a model may write 'ai.onnx')."""
    return "" if domain in STANDARD_DOMAINS else domain


def opset_for(opsets: Mapping[str, int], domain: str) -> int | None:
    """The version of ``domain`` that ``opsets`` (a model's or function's imports) import, or
    None. The standard domain is found under either of its names."""
    if domain in STANDARD_DOMAINS:
        version = opsets.get("")
        return opsets.get("ai.onnx") if version is None else version
    return opsets.get(domain)
