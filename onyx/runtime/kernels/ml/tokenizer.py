"""com.microsoft Tokenizer (onnxruntime's contrib op; scikit-learn text pipelines use it)."""

from __future__ import annotations

import re

import numpy as np

from ...registry import op

START, END = "\x02", "\x03"  # start-of-text / end-of-text markers added when mark=1


def _splitter(separators, tokenexp, tokenexpsplit):
    """A function str -> list of tokens, following the attribute that is set."""
    if tokenexp:
        pattern = re.compile(tokenexp)
        if tokenexpsplit:
            return pattern.split
        return lambda text: [m.group(0) for m in pattern.finditer(text)]
    separators = list(separators or [])
    if "" in separators:  # the empty separator splits into characters
        return list
    if not separators:
        return lambda text: [text]
    pattern = re.compile("|".join(f"(?:{s})" for s in separators))
    return pattern.split


@op("Tokenizer", since=1, domain="com.microsoft")
def tokenizer(x, *, mark, pad_value, separators=None, tokenexp=None, tokenexpsplit=0, mincharnum):
    """Strings [...] -> tokens [..., D], rows padded with pad_value to the longest one."""
    split = _splitter(separators, tokenexp, tokenexpsplit)
    rows = []
    for text in np.asarray(x, dtype=object).reshape(-1).tolist():  # regexes run per string
        tokens = [t for t in split(text) if len(t) >= max(mincharnum, 1)]
        rows.append([START, *tokens, END] if mark else tokens)
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), pad_value, dtype=object)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out.reshape(*np.shape(x), width)
