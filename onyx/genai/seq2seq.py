"""Generation with encoder-decoder models in optimum's layout (T5, BART, Marian, Whisper...): the
encoder runs once over the prompt, then the merged decoder (decoder_model_merged.onnx: an If on
``use_cache_branch``) one token at a time, its self-attention cache growing step by step and
the cross-attention keys / values of the first step fed back unchanged.

An encoder whose input is not token ids (Whisper's log-mel ``input_features``) takes
``encoder_inputs`` (its feeds, as the encoder names them); the prompt is then the decoder's
first tokens (Whisper's forced ones, e.g. start of transcript, language, task), by default
``decoder_start_token_id``."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..errors import InvalidArgument
from .generator import GenerationResult, TokenCallback, TokenStream, prompt_tokens
from .sampling import SamplingOptions, next_token
from .text import load_tokenizer

_PAST = re.compile(r"^past_key_values\.(\d+)\.(decoder|encoder)\.(key|value)$")
ENCODER, DECODER = "encoder_model.onnx", "decoder_model_merged.onnx"


def is_seq2seq(folder: Path) -> bool:
    """Whether a folder holds optimum's encoder and merged decoder."""
    folder = Path(folder)
    return folder.is_dir() and (folder / ENCODER).exists() and (folder / DECODER).exists()


class Seq2SeqGenerator:
    """Runs an encoder-decoder folder. ``sessions``: (encoder, decoder) sessions already made
    (onyx's or onnxruntime's), by default onyx sessions of the two files."""

    def __init__(self, folder: str | Path, sessions=None, session_options=None):
        self.folder = Path(folder)
        if sessions is None:
            from ..runtime.session import InferenceSession

            sessions = tuple(
                InferenceSession(str(self.folder / name), session_options)
                for name in (ENCODER, DECODER)
            )
        self.encoder, self.decoder = sessions
        config = self.folder / "config.json"
        self.hf = json.loads(config.read_text()) if config.exists() else {}
        self.inputs = {a.name: a for a in self.decoder.get_inputs()}
        self.past = sorted((n for n in self.inputs if _PAST.match(n)), key=_layer_order)
        if "use_cache_branch" not in self.inputs or not self.past:
            raise InvalidArgument(
                f"{self.folder / DECODER}: not optimum's merged decoder "
                "(use_cache_branch and past_key_values.N.decoder.key inputs)"
            )
        self.presents = [n.replace("past_key_values", "present") for n in self.past]
        start = self.hf.get("decoder_start_token_id")
        self.start_token = int(start if start is not None else self.hf.get("pad_token_id") or 0)
        eos = self.hf.get("eos_token_id")
        self.eos = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
        self._tokenizer = None

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.folder)
        return self._tokenizer

    def _empty_past(self, name: str) -> np.ndarray:
        shape = self.inputs[name].shape
        heads, head = shape[1], shape[3]
        if not (isinstance(heads, int) and isinstance(head, int)):
            raise InvalidArgument(f"{name}: the cache's heads / head size are not known")
        return np.zeros((1, heads, 0, head), np.float32)

    def _encode(self, prompt, max_new_tokens: int, encoder_inputs):
        """(the encoder's hidden states, their attention mask, the decoder's prompt tokens,
        the sequence the result starts with)."""
        if encoder_inputs is None:
            ids = prompt_tokens(self, prompt, max_new_tokens)
            tokens = np.array([ids], np.int64)
            feeds = {"input_ids": tokens, "attention_mask": np.ones_like(tokens)}
            decoder_prompt = [self.start_token]
        else:
            feeds = self._encoder_feeds(encoder_inputs)
            ids = prompt_tokens(self, [self.start_token] if prompt is None else prompt,
                                max_new_tokens)  # fmt: skip
            decoder_prompt = ids
        names = {a.name for a in self.encoder.get_inputs()}
        hidden = self.encoder.run(None, {k: v for k, v in feeds.items() if k in names})[0]
        mask = feeds.get("attention_mask")
        if mask is None:
            mask = np.ones(np.shape(hidden)[:2], np.int64)
        return hidden, mask, decoder_prompt, ids

    def _encoder_feeds(self, encoder_inputs: Mapping) -> dict:
        """The caller's encoder feeds, checked against the encoder's inputs (one sequence)."""
        inputs = {a.name: a for a in self.encoder.get_inputs()}
        where = self.folder / ENCODER
        if not isinstance(encoder_inputs, Mapping):
            raise InvalidArgument(f"encoder_inputs: a dict of the feeds of {where}")
        feeds = {name: np.asarray(value) for name, value in encoder_inputs.items()}
        if "attention_mask" in inputs and "input_ids" in feeds and "attention_mask" not in feeds:
            feeds["attention_mask"] = np.ones_like(feeds["input_ids"], np.int64)
        unknown = sorted(set(feeds) - set(inputs))
        missing = sorted(set(inputs) - set(feeds))
        if unknown or missing:
            raise InvalidArgument(
                f"encoder_inputs {sorted(feeds)} do not match the inputs of {where} "
                f"({sorted(inputs)}): "
                + (f"unknown {unknown}" if unknown else f"missing {missing}")
            )
        for name, value in feeds.items():
            if value.ndim < 1 or value.shape[0] != 1:
                raise InvalidArgument(
                    f"encoder_inputs[{name!r}]: shape {value.shape}, expected a batch of one "
                    "(one sequence at a time)"
                )
        return feeds

    def generate(
        self,
        prompt: str | Sequence[int] | None,
        max_new_tokens: int = 32,
        *,
        encoder_inputs: Mapping | None = None,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        seed: int | None = None,
        stop_token_ids: Sequence[int] | None = None,
        callback: TokenCallback | None = None,
    ) -> GenerationResult:
        """Up to ``max_new_tokens`` tokens; ``encoder_inputs`` as in the module docstring."""
        stream = TokenStream(self, callback, isinstance(prompt, str))
        options = SamplingOptions(do_sample, temperature, top_k, top_p, repetition_penalty)
        stops = set(self.eos if stop_token_ids is None else stop_token_ids)
        rng = np.random.default_rng(seed)
        start = time.perf_counter()
        hidden, mask, sequence, ids = self._encode(prompt, max_new_tokens, encoder_inputs)
        past = {n: self._empty_past(n) for n in self.past}
        timings = {"prefill_s": time.perf_counter() - start, "decode_s": 0.0}
        sequence, new, finish = list(sequence), [], "length"
        for step in range(max_new_tokens):
            begin = time.perf_counter()
            step_ids = sequence if step == 0 else sequence[-1:]  # (the decoder's prompt first)
            feeds = {
                "encoder_attention_mask": mask,
                "encoder_hidden_states": hidden,
                "input_ids": np.array([step_ids], np.int64),
                "use_cache_branch": np.array([step > 0]),
                **past,
            }
            feeds = {k: v for k, v in feeds.items() if k in self.inputs}
            outs = self.decoder.run(["logits", *self.presents], feeds)
            token = next_token(np.asarray(outs[0])[0, -1], np.asarray(sequence), options, rng)
            timings["decode_s" if step else "prefill_s"] += time.perf_counter() - begin
            for name, present, value in zip(self.past, self.presents, outs[1:]):
                if step == 0 or ".decoder." in present:  # (cross-attention's stay the first's)
                    past[name] = np.asarray(value)
            sequence.append(token)
            new.append(token)
            stream(new)
            if token in stops:
                finish = "stop"
                break
        return stream.result(new, list(ids) + new, finish, timings)


def _layer_order(name: str) -> tuple:
    m = _PAST.match(name)
    return int(m.group(1)), m.group(2), m.group(3)
