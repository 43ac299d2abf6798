"""onyx.generate on encoder-decoder folders whose encoder takes other feeds than token ids
(Whisper's log-mel input_features: ``encoder_inputs``); onnxruntime running the same loop is
the oracle for greedy tokens."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import onyx
from onyx.runtime import native

ZOO = Path(__file__).resolve().parent / "models" / "transformers"
START, EOS = 1, 2


@pytest.fixture(scope="module")
def whisper_folder(tmp_path_factory) -> Path:
    """The zoo's Whisper in optimum's layout (its config's start and eos tokens)."""
    folder = tmp_path_factory.mktemp("whisper")
    shutil.copy(ZOO / "whisper_encoder_optimum.onnx", folder / "encoder_model.onnx")
    shutil.copy(ZOO / "whisper_decoder_merged_optimum.onnx", folder / "decoder_model_merged.onnx")
    config = {"model_type": "whisper", "decoder_start_token_id": START, "eos_token_id": EOS,
              "pad_token_id": 3}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _features(kind: str = "ramp") -> dict:
    """Log-mel stand-ins: a ramp over time (tokens that vary along the 16 steps), noise, zeros."""
    if kind == "ramp":
        mel = np.broadcast_to(np.linspace(-3, 3, 3000, dtype=np.float32), (1, 16, 3000))
    elif kind == "noise":
        mel = np.random.default_rng(0).standard_normal((1, 16, 3000))
    else:
        mel = np.zeros((1, 16, 3000))
    return {"input_features": np.ascontiguousarray(mel, np.float32)}


def _ort_pair(folder: Path):
    return tuple(
        ort.InferenceSession(str(folder / name), providers=["CPUExecutionProvider"])
        for name in ("encoder_model.onnx", "decoder_model_merged.onnx")
    )


@pytest.mark.parametrize("prompt", [None, [START, 7, 9]])
def test_whisper_greedy_matches_onnxruntime(whisper_folder, prompt):
    feeds = _features()
    ours = onyx.generate(whisper_folder, prompt, 16, encoder_inputs=feeds, stop_token_ids=[])
    theirs = onyx.generate(whisper_folder, prompt, 16, encoder_inputs=feeds, stop_token_ids=[],
                           session=_ort_pair(whisper_folder))  # fmt: skip
    assert len(ours.tokens) == 16 and ours.tokens == theirs.tokens
    assert len(set(ours.tokens)) > 3  # (not one token repeated)
    assert ours.sequence == (prompt or [START]) + ours.tokens
    with native.disabled():
        plain = onyx.generate(whisper_folder, prompt, 16, encoder_inputs=feeds, stop_token_ids=[])
    assert plain.tokens == ours.tokens


def test_whisper_audio_decides_the_tokens(whisper_folder):
    """The features reach the decoder: other audio, other tokens (random weights, 16 steps)."""
    a = onyx.generate(
        whisper_folder, None, 16, encoder_inputs=_features("zeros"), stop_token_ids=[]
    )
    b = onyx.generate(
        whisper_folder, None, 16, encoder_inputs=_features("noise"), stop_token_ids=[]
    )
    assert a.tokens != b.tokens


def test_whisper_stops_at_eos(whisper_folder):
    feeds = _features()
    tokens = onyx.generate(whisper_folder, None, 16, encoder_inputs=feeds, stop_token_ids=[]).tokens
    stop = tokens[3]
    result = onyx.generate(whisper_folder, None, 16, encoder_inputs=feeds, stop_token_ids=[stop])
    assert result.tokens == tokens[: tokens.index(stop) + 1] and result.finish_reason == "stop"


@pytest.mark.parametrize("feeds, message", [
    ({"input_ids": np.ones((1, 4), np.int64)}, "unknown"),
    ({}, "missing"),
    ({"input_features": np.zeros((2, 16, 3000), np.float32)}, "batch of one"),
])  # fmt: skip
def test_whisper_bad_encoder_inputs(whisper_folder, feeds, message):
    with pytest.raises(onyx.OnyxError, match=message):
        onyx.generate(whisper_folder, None, 4, encoder_inputs=feeds)


def test_text_encoder_takes_encoder_inputs_too(tmp_path):
    """T5 with its ids as encoder_inputs (the mask made when absent): the prompt form's tokens."""
    shutil.copy(ZOO / "t5_encoder_optimum.onnx", tmp_path / "encoder_model.onnx")
    shutil.copy(ZOO / "t5_decoder_merged_optimum.onnx", tmp_path / "decoder_model_merged.onnx")
    config = {"model_type": "t5", "decoder_start_token_id": 0, "eos_token_id": 1}
    (tmp_path / "config.json").write_text(json.dumps(config))
    ids = [5, 17, 42, 9]
    plain = onyx.generate(tmp_path, ids, 8, stop_token_ids=[])
    fed = onyx.generate(tmp_path, None, 8, stop_token_ids=[],
                        encoder_inputs={"input_ids": np.array([ids])})  # fmt: skip
    assert fed.tokens == plain.tokens
