"""Hugging Face transformers models with tiny random configs (no download), exported by
optimum-onnx's exporter (main_export on a locally saved model) and by torch.onnx (dynamo).

Runs in its own venv (build.sh: torch, transformers, optimum-onnx).
"""

from __future__ import annotations

import tempfile
import traceback
from pathlib import Path

import numpy as np
import torch
from stage import stage

RNG = np.random.default_rng(19)


def _configs():
    from transformers import (
        BartConfig,
        BertConfig,
        DebertaV2Config,
        DistilBertConfig,
        GPT2Config,
        RobertaConfig,
        T5Config,
        ViTConfig,
        Wav2Vec2Config,
        WhisperConfig,  # fmt: skip
    )

    small = {
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    }  # (small files: the fixtures are committed)
    return {
        "bert": ("BertModel", BertConfig(vocab_size=100, hidden_size=32, **small), "feature-extraction"),
        "gpt2": ("GPT2LMHeadModel", GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2,
                                                n_positions=64), "text-generation"),
        "vit": ("ViTModel", ViTConfig(hidden_size=32, image_size=32, patch_size=8, **small),
                "feature-extraction"),
        "whisper": ("WhisperForConditionalGeneration",
                    WhisperConfig(vocab_size=100, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                  decoder_start_token_id=1, d_model=32, encoder_layers=1, decoder_layers=1,
                                  encoder_attention_heads=2, decoder_attention_heads=2,
                                  encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
                                  max_source_positions=1500, max_target_positions=32),
                    "automatic-speech-recognition"),
        "distilbert": ("DistilBertModel", DistilBertConfig(vocab_size=100, dim=32, n_layers=2,
                       n_heads=2, hidden_dim=64, max_position_embeddings=64), "feature-extraction"),
        "roberta": ("RobertaModel", RobertaConfig(vocab_size=100, hidden_size=32, **small),
                    "feature-extraction"),
        "deberta": ("DebertaV2Model", DebertaV2Config(vocab_size=100, hidden_size=32,
                    relative_attention=True, position_buckets=8, max_relative_positions=16,
                    pos_att_type=["p2c", "c2p"], **small), "feature-extraction"),
        "wav2vec2": ("Wav2Vec2Model", Wav2Vec2Config(hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=2, intermediate_size=64, conv_dim=(16, 16),
                     conv_kernel=(10, 3), conv_stride=(5, 2), num_conv_pos_embeddings=16,
                     num_conv_pos_embedding_groups=2), "feature-extraction"),
        "t5": ("T5ForConditionalGeneration", T5Config(vocab_size=100, d_model=32, d_kv=16,
               d_ff=64, num_layers=1, num_heads=2, decoder_start_token_id=0), "text2text-generation"),
        "bart": ("BartForConditionalGeneration", BartConfig(vocab_size=100, d_model=32,
                 encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                 decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                 max_position_embeddings=64), "text2text-generation"),
    }  # fmt: skip


def _feeds(path: Path) -> dict:
    import onnx

    feeds = {}
    for v in onnx.load(str(path), load_external_data=False).graph.input:
        t = v.type.tensor_type
        dims = [d.dim_value if d.dim_value > 0 else None for d in t.shape.dim]
        name = v.name
        if name in ("input_ids", "decoder_input_ids"):
            shape = [2 if i == 0 else 7 for i, d in enumerate(dims)]
            feeds[name] = RNG.integers(0, 100, shape).astype(np.int64)
        elif "mask" in name:
            shape = [2 if i == 0 else 7 for i, d in enumerate(dims)]
            mask = np.ones(shape, np.int64)
            mask[1, 5:] = 0
            feeds[name] = mask
        elif name == "token_type_ids":
            feeds[name] = np.zeros([2, 7], np.int64)
        elif name == "position_ids":
            feeds[name] = np.tile(np.arange(7, dtype=np.int64), (2, 1))
        elif name == "pixel_values":
            feeds[name] = RNG.random((2, 3, 32, 32), dtype=np.float32)
        elif name == "input_features":
            feeds[name] = RNG.standard_normal((1, 16, 3000)).astype(np.float32)
        elif name == "encoder_hidden_states":  # (whisper's encoder has 1500 positions)
            steps = 1500 if "whisper" in path.name or "whisper" in str(path.parent) else 7
            feeds[name] = RNG.standard_normal((2, steps, 32)).astype(np.float32)
        elif name == "input_values":
            feeds[name] = RNG.standard_normal((2, 400)).astype(np.float32)
        else:
            raise ValueError(f"no feed for {name}")
    return feeds


def _framework(model, path: Path, feeds: dict) -> list | None:
    """transformers' own outputs named like the ONNX outputs (None for the seq2seq parts)."""
    import onnx

    if not all(k in ("input_ids", "attention_mask", "token_type_ids", "pixel_values",
                     "input_values")
               for k in feeds):  # fmt: skip
        return None
    try:
        with torch.no_grad():
            out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    except (TypeError, ValueError):  # a seq2seq model's part: not callable on its own
        return None
    names = [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]
    values = []
    for n in names:
        if n not in out:
            break
        values.append(out[n].numpy())
    return values or None


def main() -> None:
    import transformers
    from optimum.exporters.onnx import main_export

    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp())
    for name, (cls, config, task) in _configs().items():
        model = getattr(transformers, cls)(config).eval()
        src = tmp / name
        model.save_pretrained(src)
        try:
            out = tmp / f"{name}_onnx"
            main_export(str(src), out, task=task, opset=17, no_post_process=False,
                        do_validation=False, library_name="transformers")  # fmt: skip
        except Exception:
            print(
                f"export failed: {name}: {traceback.format_exc(limit=3).strip().splitlines()[-1]}"
            )
            continue
        for path in sorted(out.glob("*.onnx")):
            try:
                feeds = _feeds(path)
            except ValueError as e:
                print(f"skipped {name}/{path.name}: {e}")
                continue
            stage("optimum", f"{name}_{path.stem}", path, feeds,
                  framework=_framework(model, path, feeds))  # fmt: skip


if __name__ == "__main__":
    main()
