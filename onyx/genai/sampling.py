"""Choosing the next token from a row of logits: greedy, or sampled with temperature, top-k and
top-p from a seeded generator; a repetition penalty first (as Hugging Face and onnxruntime-genai
apply it: a positive logit of a seen token divided by the penalty, a negative one multiplied)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgument
from ..utils import unique


@dataclass(frozen=True)
class SamplingOptions:
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0  # 0: every token
    top_p: float = 1.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise InvalidArgument(f"temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InvalidArgument(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise InvalidArgument(f"top_k must be >= 0, got {self.top_k}")
        if self.repetition_penalty <= 0:
            raise InvalidArgument(f"repetition_penalty must be > 0, got {self.repetition_penalty}")


def penalize_repeats(logits: np.ndarray, seen: np.ndarray, penalty: float) -> np.ndarray:
    """logits with each seen token's logit pushed down by ``penalty`` (a fresh array)."""
    logits = np.array(logits, dtype=np.float32)
    if penalty != 1.0 and seen.size:
        ids = unique(seen)
        vals = logits[ids]
        logits[ids] = np.where(vals > 0, vals / np.float32(penalty), vals * np.float32(penalty))
    return logits


def next_token(logits: np.ndarray, seen, options: SamplingOptions, rng: np.random.Generator) -> int:
    """The next token id from one row of logits [vocab]; ``seen``: the tokens so far (an
    array, or a list: made an array only where a repetition penalty reads it)."""
    if not options.do_sample and options.repetition_penalty == 1.0:
        return int(np.argmax(logits))  # (the first of equal maxima, as onnxruntime-genai)
    scores = penalize_repeats(logits, np.asarray(seen), options.repetition_penalty)
    if not options.do_sample:
        return int(np.argmax(scores))
    scores = scores.astype(np.float64) / options.temperature
    order = np.argsort(-scores, kind="stable")
    if options.top_k:
        order = order[: options.top_k]
    kept = scores[order]
    probs = np.exp(kept - kept[0])
    probs /= probs.sum()
    if options.top_p < 1.0:  # the fewest most likely tokens whose mass reaches top_p
        cut = int(np.searchsorted(np.cumsum(probs), options.top_p)) + 1
        order, probs = order[:cut], probs[:cut] / probs[:cut].sum()
    return int(order[rng.choice(len(order), p=probs)])
