"""The generation loop of a decoder-only model with a KV cache (onnxruntime-genai's Generator, in
Python): the prompt in one step, then one token per step, each step's present key / values fed
back as the next step's past."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from ..runtime.kernels.contrib_attention import share_kv_buffers, unshare_kv_buffers
from .config import DecoderConfig, decoder_config, find_model
from .sampling import SamplingOptions, next_token
from .text import load_tokenizer

#: Prompt tokens per step of the prefill: a longer prompt runs in steps of this many (each one
#: attending the cache the earlier ones wrote), so that its activations, not the whole prompt's,
#: are alive at once (a 2048-token prompt's MLP activations alone are 46 MB on a d=512 model).
PREFILL_CHUNK = 512

#: streaming callback: (token id, the text it adds, or None without a tokenizer)
TokenCallback = Callable[[int, "str | None"], Any]


@dataclass
class GenerationResult:
    tokens: list[int]  # the generated tokens (a stop token included)
    sequence: list[int]  # prompt + generated
    text: str | None = None  # the generated tokens decoded, when the prompt was text
    finish_reason: str = "length"  # "stop" (a stop token), "length" (max_new_tokens or context)
    timings: dict = field(default_factory=dict)  # prefill_s, decode_s, decode_tokens_per_s


def prompt_tokens(model, prompt: str | Sequence[int], max_new_tokens: int) -> list[int]:
    """The prompt's token ids (a text is encoded by ``model.tokenizer``, loaded only then),
    checked with the number of new tokens."""
    ids = (
        list(model.tokenizer.encode(prompt).ids)
        if isinstance(prompt, str)
        else [int(t) for t in prompt]
    )
    if not ids:
        raise InvalidArgument("the prompt has no tokens")
    if max_new_tokens < 0:
        raise InvalidArgument(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    return ids


class TokenStream:
    """Calls a generation's callback with each new token and, for a text prompt, the text it
    added (decoding all the new tokens each time: a token may complete a character); makes
    the result. ``model.tokenizer`` is read for text prompts only (loaded on first use)."""

    def __init__(self, model, callback: TokenCallback | None, as_text: bool):
        self.model, self.callback, self.as_text = model, callback, as_text
        self.emitted = ""

    def __call__(self, new: list[int]) -> None:
        if self.callback is None:
            return
        piece = None
        if self.as_text:
            text = self.model.tokenizer.decode(new)
            piece, self.emitted = text[len(self.emitted) :], text
        self.callback(new[-1], piece)

    def result(self, new: list[int], sequence: list[int], finish: str, timings: dict):
        """The GenerationResult, with the decoding rate when more than one token was decoded."""
        if len(new) > 1 and timings["decode_s"] > 0:
            timings["decode_tokens_per_s"] = (len(new) - 1) / timings["decode_s"]
        text = self.model.tokenizer.decode(new) if self.as_text else None
        return GenerationResult(new, sequence, text, finish, timings)


class KVCache:
    """The past key / value tensors of every layer.

    With a shared buffer (genai's past_present_share_buffer) the tensors hold the context's
    full length from the start: the model writes each step's rows at their positions and the
    loop hands the result back as the next past, so no buffer is ever grown. Otherwise they
    start empty and the model returns them one step longer (optimum's layout)."""

    def __init__(self, cfg: DecoderConfig, capacity: int):
        rows = capacity if cfg.share_buffer else 0
        shape = (1, cfg.kv_heads, rows, cfg.head_size)
        self.names = [n for pair in cfg.past_names for n in pair]
        self.outputs = [n for pair in cfg.present_names for n in pair]
        self.tensors = [np.zeros(shape, cfg.cache_dtype) for _ in self.names]

    def feeds(self) -> dict[str, np.ndarray]:
        return dict(zip(self.names, self.tensors))

    def update(self, presents: Sequence[np.ndarray]) -> None:
        self.tensors = [np.asarray(p) for p in presents]


def _own_session(path: Path, genai: dict | None, options):
    """An onyx session of the model whose logits output holds the last position only (the
    loop reads no other row: last_token.py), where the LM head allows it, and whose gated
    MLPs run as one node each (fusions.py)."""
    from ..runtime.session import InferenceSession
    from ..serde import load
    from .fusions import fuse_gated_mlp
    from .last_token import last_token_logits

    model = load(str(path))
    outputs = (genai or {}).get("model", {}).get("decoder", {}).get("outputs", {})
    changed = last_token_logits(model, outputs.get("logits", "logits"))
    changed = fuse_gated_mlp(model) > 0 or changed
    return InferenceSession(model if changed else str(path), options)


def _is_onyx(session) -> bool:
    """Whether ``session`` is onyx's (whose GroupQueryAttention may share the cache buffers)."""
    from ..runtime.session import InferenceSession

    return isinstance(session, InferenceSession)


class Generator:
    """Runs a decoder folder (genai_config.json, or optimum's config.json + model.onnx).

    ``session``: an already-made session (onyx's or onnxruntime's: anything with ``run``,
    ``get_inputs`` and ``get_outputs``); by default an onyx.InferenceSession of the model."""

    def __init__(self, model_dir: str | Path, session=None, session_options=None):
        self.model_path, genai, hf = find_model(Path(model_dir))
        if session is None:
            session = _own_session(self.model_path, genai, session_options)
        self.session = session
        self.config = decoder_config(
            self.model_path, genai, hf, session.get_inputs(), session.get_outputs()
        )
        self.folder = self.model_path.parent
        self._tokenizer = None

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.folder)
        return self._tokenizer

    def _feeds(self, ids: np.ndarray, past: int, cache: KVCache) -> dict[str, np.ndarray]:
        cfg = self.config
        total = past + ids.shape[1]
        feeds = {cfg.input_ids: ids.astype(cfg.int_dtypes[cfg.input_ids])}
        if cfg.attention_mask:
            feeds[cfg.attention_mask] = np.ones((1, total), cfg.int_dtypes[cfg.attention_mask])
        if cfg.position_ids:
            pos = np.arange(past, total)[None, :]
            feeds[cfg.position_ids] = pos.astype(cfg.int_dtypes[cfg.position_ids])
        if cfg.use_cache_branch:
            feeds[cfg.use_cache_branch] = np.array([past > 0])
        feeds.update(cache.feeds())
        return feeds

    def generate(
        self,
        prompt: str | Sequence[int],
        max_new_tokens: int = 32,
        *,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        seed: int | None = None,
        stop_token_ids: Sequence[int] | None = None,
        callback: TokenCallback | None = None,
        prefill_chunk: int = PREFILL_CHUNK,
    ) -> GenerationResult:
        cfg = self.config
        as_text = isinstance(prompt, str)
        ids = prompt_tokens(self, prompt, max_new_tokens)
        if prefill_chunk < 1:
            raise InvalidArgument(f"prefill_chunk must be >= 1, got {prefill_chunk}")
        options = SamplingOptions(do_sample, temperature, top_k, top_p, repetition_penalty)
        stops = set(cfg.eos_token_ids if stop_token_ids is None else stop_token_ids)
        capacity = min(cfg.context_length, len(ids) + max_new_tokens)
        if len(ids) > cfg.context_length:
            raise InvalidArgument(
                f"the prompt's {len(ids)} tokens exceed the model's context of {cfg.context_length}"
            )
        cache = KVCache(cfg, capacity)  # (shared buffer: this generation's whole length)
        rng = np.random.default_rng(seed)
        shared = cfg.share_buffer and _is_onyx(self.session)
        buffers = list(cache.tensors)
        if shared:  # (GroupQueryAttention writes the new rows into the buffers themselves)
            share_kv_buffers(buffers)
        try:
            return self._loop(
                prompt,
                ids,
                max_new_tokens,
                as_text,
                options,
                stops,
                cache,
                callback,
                rng=rng,
                chunk=prefill_chunk,
            )
        finally:
            if shared:
                unshare_kv_buffers(buffers)

    def _prefill_head(self, ids: list[int], cache: KVCache, chunk: int, out_names) -> int:
        """All but the last chunk of the prompt into the cache (their logits unread): the
        number of tokens it took."""
        past = 0
        while len(ids) - past > chunk:
            step = np.array([ids[past : past + chunk]])
            cache.update(self.session.run(out_names, self._feeds(step, past, cache))[1:])
            past += chunk
        return past

    def _loop(
        self, prompt, ids, max_new_tokens, as_text, options, stops, cache, callback, *, rng, chunk
    ) -> GenerationResult:
        cfg = self.config
        out_names = [cfg.logits, *cache.outputs]
        sequence, new = list(ids), []
        stream = TokenStream(self, callback, as_text)
        timings = {"prefill_s": 0.0, "decode_s": 0.0}
        start = time.perf_counter()
        past = self._prefill_head(ids, cache, chunk, out_names) if max_new_tokens else 0
        timings["prefill_s"] = time.perf_counter() - start
        step_ids, finish = np.array([ids[past:]]), "length"
        for step in range(max_new_tokens):
            start = time.perf_counter()
            outs = self.session.run(out_names, self._feeds(step_ids, past, cache))
            token = next_token(np.asarray(outs[0])[0, -1], sequence, options, rng)
            timings["decode_s" if step else "prefill_s"] += time.perf_counter() - start
            cache.update(outs[1:])
            past += step_ids.shape[1]
            sequence.append(token)
            new.append(token)
            stream(new)
            if token in stops:
                finish = "stop"
                break
            if past + 1 > cfg.context_length:
                break
            step_ids = np.array([[token]])
        return stream.result(new, sequence, finish, timings)


def generate(
    model_dir: str | Path,
    prompt: str | Sequence[int],
    max_new_tokens: int = 32,
    *,
    session=None,
    session_options=None,
    **options,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` tokens after ``prompt`` (token ids, or text when the
    folder has a tokenizer.json and the ``tokenizers`` package is installed: ``onyx[llm]``).

    Options: do_sample (False: greedy), temperature, top_k, top_p, repetition_penalty, seed,
    stop_token_ids (default: the model's eos tokens), callback(token_id, text_piece) for
    streaming, prefill_chunk (prompt tokens per prefill step, PREFILL_CHUNK). A folder with
    optimum's encoder_model.onnx and decoder_model_merged.onnx (T5, BART) generates with the
    encoder once and the decoder per token (``session``: an (encoder, decoder) pair). ``session`` runs the model instead of an onyx session (e.g. onnxruntime's, to
    compare the two under the same loop)."""
    from .seq2seq import Seq2SeqGenerator, is_seq2seq

    if is_seq2seq(Path(model_dir)):  # (session: the (encoder, decoder) pair)
        seq2seq = Seq2SeqGenerator(model_dir, sessions=session, session_options=session_options)
        options.pop("prefill_chunk", None)
        return seq2seq.generate(prompt, max_new_tokens, **options)
    generator = Generator(model_dir, session=session, session_options=session_options)
    return generator.generate(prompt, max_new_tokens, **options)
