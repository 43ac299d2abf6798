"""The LLM paths' native kernels (attention.c, nbits.c's transposed scales) against their numpy
oracles, bit for bit where promised: the KV cache rows, the RMS norm's sum; and the generation
loop's last-position logits (onyx/genai/last_token.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import onyx
from onyx.genai import Generator
from onyx.genai.last_token import last_token_logits
from onyx.runtime import native
from onyx.runtime.kernels import contrib_attention
from onyx.runtime.kernels.contrib_attention import group_query_attention
from onyx.runtime.kernels.contrib_norm import skip_simplified_layer_normalization

ZOO = Path(__file__).resolve().parent / "models" / "transformers"
needs_native = pytest.mark.skipif(not native.available(), reason=f"native: {native.status()}")
CTX = SimpleNamespace(n_outputs=3)


def _gqa_inputs(rng, q_len: int, past: int, cache: int, head: int = 64):
    x = rng.standard_normal((1, q_len, 16 * head), dtype=np.float32)  # packed: 8 + 2 * 4 heads
    pk = rng.standard_normal((1, 4, cache, head), dtype=np.float32) if cache else None
    pv = rng.standard_normal((1, 4, cache, head), dtype=np.float32) if cache else None
    angles = rng.uniform(0, 6, (cache + q_len + 8, head // 2))
    total = past + q_len
    return [x, None, None, pk, pv, np.array([total - 1], np.int32), np.array([total], np.int32),
            np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)]  # fmt: skip


@needs_native
@pytest.mark.parametrize("q_len, past, cache", [(1, 40, 48), (9, 0, 0), (3, 20, 30), (33, 0, 0)])
def test_gqa_native_matches_numpy(q_len, past, cache):
    """Rotated cache rows bit for bit (they are onnxruntime's), the attention within 1e-5."""
    rng = np.random.default_rng(q_len + past)
    args = _gqa_inputs(rng, q_len, past, cache)
    kw = dict(num_heads=8, kv_num_heads=4, do_rotary=1)
    calls = native.library().onyx_parallel
    count = []
    native.library().onyx_parallel = lambda *a: count.append(1) or calls(*a)
    try:
        got = group_query_attention(CTX, *args, **kw)
    finally:
        native.library().onyx_parallel = calls
    with native.disabled():
        want = group_query_attention(CTX, *args, **kw)
    assert count, "the native step did not run"
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    for g, w in zip(got[1:], want[1:]):
        assert g.shape == w.shape and g.tobytes() == w.tobytes()


@needs_native
def test_gqa_native_writes_a_shared_buffer_in_place():
    rng = np.random.default_rng(1)
    args = _gqa_inputs(rng, 1, 10, 16)
    keys, values = args[3], args[4]
    before = keys.copy()
    contrib_attention.share_kv_buffers([keys, values])
    try:
        y, pk, pv = group_query_attention(CTX, *args, num_heads=8, kv_num_heads=4, do_rotary=1)
    finally:
        contrib_attention.unshare_kv_buffers([keys, values])
    assert pk is keys and pv is values
    assert not np.array_equal(keys[0, :, 10], before[0, :, 10])  # the new row, written there
    np.testing.assert_array_equal(keys[0, :, :10], before[0, :, :10])


def _gqa_reference(qkv, heads: int, key_bias):
    """gqa_step on q, k, v slices of qkv into fresh caches: the step packed_attention sets up."""
    batch, q_len, width = qkv.shape
    size = width // 3
    kv = np.zeros((2, batch, heads, q_len, size // heads), np.float32)
    y = native.gqa_step(
        qkv[..., :size], qkv[..., size : 2 * size], qkv[..., 2 * size :], kv[0], kv[1],
        np.zeros(batch, np.int64), np.full(batch, q_len, np.int64), None, None, None, None,
        q_heads=heads, kv_heads=heads, n_keys=q_len, interleaved=0, causal=0, window=-1,
        scale=0.125, softcap=0.0, key_bias=key_bias,
    )  # fmt: skip
    return y, kv


@needs_native
def test_packed_attention_set_up_is_per_signature():
    """The kept set-up (sizes, strides, thread split) is the right one for each call: a second
    shape, a strided qkv of the first shape and a mask each give gqa_step's bits; a width the
    kernel cannot split into heads falls back (None), also when asked again."""
    rng = np.random.default_rng(7)
    wide = rng.standard_normal((2, 9, 2 * 96), dtype=np.float32)
    calls = [
        (rng.standard_normal((1, 5, 96), dtype=np.float32), None),
        (rng.standard_normal((2, 9, 96), dtype=np.float32), None),
        (wide[..., :96], None),  # (the same shape, rows 2 * 96 floats apart)
        (wide[..., 96:], rng.choice([0, -1e4], (2, 9)).astype(np.float32)),
    ]
    for qkv, key_bias in calls:
        y, present = native.packed_attention(qkv, 2, 0.125, key_bias, True)
        want_y, want_kv = _gqa_reference(qkv, 2, key_bias)
        assert np.array_equal(y, want_y) and np.array_equal(present, want_kv)
        assert native.packed_attention(qkv, 2, 0.125, key_bias, False)[1] is None
    for _ in range(2):
        assert native.packed_attention(wide[..., :93], 2, 0.125, None, False) is None


@needs_native
def test_rms_norm_native_sum_is_exact():
    rng = np.random.default_rng(2)
    x, skip = (rng.standard_normal((3, 5, 512), dtype=np.float32) for _ in range(2))
    gamma, bias = (rng.standard_normal(512, dtype=np.float32) for _ in range(2))
    got = skip_simplified_layer_normalization(x, skip, gamma, bias, epsilon=1e-6)
    with native.disabled():
        want = skip_simplified_layer_normalization(x, skip, gamma, bias, epsilon=1e-6)
    assert got[3].tobytes() == want[3].tobytes()
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["llama_genai_int4", "gemma_genai_int4"])
def test_last_token_logits_are_the_last_row(name):
    folder = ZOO / name
    model = onyx.load(str(folder / "model.onnx"))
    assert last_token_logits(model)
    full = onyx.InferenceSession(str(folder / "model.onnx"))
    last = onyx.InferenceSession(model)
    feeds = {"input_ids": np.array([[1, 17, 42, 9, 77]], np.int64),
             "attention_mask": np.ones((1, 5), np.int64)}  # fmt: skip
    cfg = Generator(folder, session=full).config
    for name in (n for pair in cfg.past_names for n in pair):
        feeds[name] = np.zeros((1, cfg.kv_heads, 0, cfg.head_size), np.float32)
    want = full.run(["logits"], feeds)[0]
    got = last.run(["logits"], feeds)[0]
    assert got.shape == (1, 1, want.shape[2])
    np.testing.assert_array_equal(got[0, 0], want[0, -1])


def test_last_token_logits_leaves_other_heads_alone():
    """An LM head that is not a constant-weight MatMul of [B, S, hidden] states: no rewrite."""
    model = onyx.load(str(ZOO / "gpt2_ort_opt99.onnx"))
    names = [v.name for v in model.graph.outputs]
    assert not last_token_logits(model, "no_such_output")
    assert [v.name for v in model.graph.outputs] == names


@pytest.mark.parametrize("chunk", [2, 3])
def test_chunked_prefill_gives_the_same_tokens(chunk):
    """A prompt prefilled a few tokens at a time (each step attending the cache the earlier
    ones wrote) continues as the one-step prefill does, and as onnxruntime does chunked."""
    import onnxruntime as ort

    folder = ZOO / "llama_genai_int4"
    prompt = [1, 17, 42, 9, 77, 5, 8]
    whole = onyx.generate(folder, prompt, 12, stop_token_ids=[], prefill_chunk=64)
    ours = onyx.generate(folder, prompt, 12, stop_token_ids=[], prefill_chunk=chunk)
    theirs = onyx.generate(folder, prompt, 12, stop_token_ids=[], prefill_chunk=chunk,
                           session=ort.InferenceSession(str(folder / "model.onnx")))  # fmt: skip
    assert ours.tokens == whole.tokens == theirs.tokens
