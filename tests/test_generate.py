"""onyx.generate / onyx generate on the zoo's decoders: the same loop run by onnxruntime is the
oracle (greedy tokens identical over 32 steps)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import onyx
from onyx.genai import Generator
from onyx.tools.cli import main as cli

ZOO = Path(__file__).resolve().parent / "models" / "transformers"
GENAI = sorted(p.name for p in ZOO.glob("*_genai_*") if (p / "genai_config.json").exists())
PROMPT = [1, 17, 42, 9, 77]


def _ort(folder: Path, model="model.onnx") -> ort.InferenceSession:
    return ort.InferenceSession(str(folder / model), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", GENAI)
def test_greedy_tokens_match_onnxruntime(name):
    folder = ZOO / name
    ours = onyx.generate(folder, PROMPT, 32, stop_token_ids=[])
    theirs = onyx.generate(folder, PROMPT, 32, stop_token_ids=[], session=_ort(folder))
    assert len(ours.tokens) == 32
    assert ours.tokens == theirs.tokens
    assert ours.sequence == PROMPT + ours.tokens


@pytest.fixture(scope="module")
def optimum_gpt2(tmp_path_factory) -> Path:
    """optimum's layout: config.json + model.onnx with past_key_values.N.* / present.N.*."""
    folder = tmp_path_factory.mktemp("gpt2")
    shutil.copy(ZOO / "gpt2_ort_opt99.onnx", folder / "model.onnx")
    config = {"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_layer": 2, "n_positions": 128,
              "eos_token_id": 2, "bos_token_id": 1, "vocab_size": 128}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_optimum_layout_matches_onnxruntime(optimum_gpt2):
    ours = onyx.generate(optimum_gpt2, PROMPT, 32, stop_token_ids=[])
    theirs = onyx.generate(optimum_gpt2, PROMPT, 32, stop_token_ids=[], session=_ort(optimum_gpt2))
    assert ours.tokens == theirs.tokens and len(ours.tokens) == 32
    gen = Generator(optimum_gpt2)
    assert gen.config.position_ids == "position_ids" and gen.config.kv_heads == 4
    assert not gen.config.share_buffer


def test_shared_buffer_keeps_its_size():
    """genai's past_present_share_buffer: the cache has its final length from the first step."""
    gen = Generator(ZOO / "llama_genai_int4")
    assert gen.config.share_buffer
    shapes = []
    real_run = gen.session.run

    def run(names, feeds):
        shapes.append(feeds[gen.config.past_names[0][0]].shape)
        return real_run(names, feeds)

    gen.session.run = run
    gen.generate(PROMPT, 5, stop_token_ids=[])
    assert len(set(shapes)) == 1 and shapes[0][2] == len(PROMPT) + 5


def test_shared_buffer_is_updated_in_place():
    """With an onyx session, GroupQueryAttention writes each step's rows into the shared
    buffer and hands it back as present: every step is fed the same memory (no per-step copy
    of the cached rows), the tokens stay onnxruntime's, and the buffers are released after."""
    from onyx.runtime.kernels import contrib_attention

    folder = ZOO / "llama_genai_int4"
    gen = Generator(folder)
    addresses = []
    real_run = gen.session.run

    def run(names, feeds):
        addresses.append(feeds[gen.config.past_names[0][0]].__array_interface__["data"][0])
        return real_run(names, feeds)

    gen.session.run = run
    ours = gen.generate(PROMPT, 8, stop_token_ids=[])
    assert len(set(addresses)) == 1 and len(addresses) == 8
    assert not contrib_attention._SHARED_KV  # noqa: SLF001 (released after the generation)
    theirs = onyx.generate(folder, PROMPT, 8, stop_token_ids=[], session=_ort(folder))
    assert ours.tokens == theirs.tokens


def test_sampling_is_seeded():
    folder = ZOO / "llama_genai_int4"
    kw = {"do_sample": True, "temperature": 1.5, "top_p": 0.95, "stop_token_ids": []}
    a = onyx.generate(folder, PROMPT, 16, seed=1, **kw).tokens
    assert a == onyx.generate(folder, PROMPT, 16, seed=1, **kw).tokens
    assert a != onyx.generate(folder, PROMPT, 16, seed=2, **kw).tokens
    greedy = onyx.generate(folder, PROMPT, 16, stop_token_ids=[]).tokens
    assert onyx.generate(folder, PROMPT, 16, do_sample=True, top_k=1, seed=5,
                         stop_token_ids=[]).tokens == greedy  # fmt: skip


def test_repetition_penalty_and_stop_tokens():
    folder = ZOO / "llama_genai_int4"
    greedy = onyx.generate(folder, PROMPT, 24, stop_token_ids=[]).tokens
    penalized = onyx.generate(folder, PROMPT, 24, repetition_penalty=3.0, stop_token_ids=[])
    assert penalized.tokens != greedy
    stop = greedy[5]
    result = onyx.generate(folder, PROMPT, 24, stop_token_ids=[stop])
    assert result.tokens == greedy[: greedy.index(stop) + 1] and result.finish_reason == "stop"


def test_sampling_helpers():
    from onyx.genai.sampling import SamplingOptions, next_token, penalize_repeats

    logits = np.array([2.0, -1.0, 0.5, 3.0], np.float32)
    np.testing.assert_allclose(penalize_repeats(logits, np.array([0, 1]), 2.0), [1, -2, 0.5, 3])
    rng = np.random.default_rng(0)
    top2 = SamplingOptions(do_sample=True, top_k=2)
    draws = {next_token(logits, np.array([], int), top2, rng) for _ in range(200)}
    assert draws == {0, 3}
    nucleus = SamplingOptions(do_sample=True, top_p=0.5)
    assert {next_token(logits, np.array([], int), nucleus, rng) for _ in range(50)} == {3}
    with pytest.raises(onyx.OnyxError, match="temperature"):
        SamplingOptions(temperature=0)


def test_text_in_text_out_and_streaming():
    pytest.importorskip("tokenizers")
    folder = ZOO / "llama_genai_int4"
    pieces = []
    result = onyx.generate(folder, "w1 w2 w3", 8, stop_token_ids=[],
                           callback=lambda token, piece: pieces.append((token, piece)))  # fmt: skip
    assert [t for t, _ in pieces] == result.tokens
    assert "".join(p for _, p in pieces) == result.text
    ids = Generator(folder).tokenizer.encode("w1 w2 w3").ids
    assert ids == [5, 6, 7]
    assert onyx.generate(folder, ids, 8, stop_token_ids=[]).tokens == result.tokens


def test_clear_errors(tmp_path):
    with pytest.raises(onyx.OnyxError, match="no genai_config.json and no model.onnx"):
        onyx.generate(tmp_path, [1, 2], 4)
    folder = tmp_path / "m"
    shutil.copytree(ZOO / "llama_genai_int4", folder)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(onyx.OnyxError, match="tokenizer.json"):
        onyx.generate(folder, "w1 w2", 4)
    with pytest.raises(onyx.OnyxError, match="no tokens"):
        onyx.generate(folder, [], 4)
    with pytest.raises(onyx.OnyxError, match="not a decoder"):
        onyx.generate(ZOO / "bert_ort_opt99.onnx", [1, 2], 4)


def test_cli(capsys):
    folder = str(ZOO / "llama_genai_int4")
    assert cli(["generate", folder, "--ids", "1,17,42,9,77", "-n", "6", "--stop", "",
                "--no-stream"]) == 0  # fmt: skip
    expected = onyx.generate(folder, PROMPT, 6, stop_token_ids=[]).tokens
    assert capsys.readouterr().out.split() == [str(t) for t in expected]
    assert cli(["generate", folder, "--ids", "", "-n", "2"]) == 1


@pytest.fixture(scope="module")
def t5_folder(tmp_path_factory) -> Path:
    """optimum's encoder-decoder layout: encoder_model.onnx, decoder_model_merged.onnx."""
    folder = tmp_path_factory.mktemp("t5")
    shutil.copy(ZOO / "t5_encoder_optimum.onnx", folder / "encoder_model.onnx")
    shutil.copy(ZOO / "t5_decoder_merged_optimum.onnx", folder / "decoder_model_merged.onnx")
    config = {"model_type": "t5", "decoder_start_token_id": 0, "eos_token_id": 1,
              "pad_token_id": 0}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_encoder_decoder_matches_onnxruntime(t5_folder):
    """T5: the encoder once, the merged decoder per token (its cross-attention cache from the
    first step); greedy tokens identical to onnxruntime running the same loop."""
    ours = onyx.generate(t5_folder, PROMPT, 16, stop_token_ids=[])
    pair = (_ort(t5_folder, "encoder_model.onnx"), _ort(t5_folder, "decoder_model_merged.onnx"))
    theirs = onyx.generate(t5_folder, PROMPT, 16, stop_token_ids=[], session=pair)
    assert len(ours.tokens) == 16 and ours.tokens == theirs.tokens
    assert ours.sequence == PROMPT + ours.tokens
    assert ours.timings["decode_tokens_per_s"] > 0
