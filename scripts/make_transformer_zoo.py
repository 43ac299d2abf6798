"""Build the transformer zoo offline: tiny random-weight Hugging Face models exported to ONNX by
the tools people use, with feeds and onnxruntime's outputs as test fixtures.

Dev-time only. Heavy packages live in two virtual environments this script creates (transformers
for optimum and for onnxruntime-genai's builder need different versions):

    python scripts/make_transformer_zoo.py --setup      # make the venvs (torch from local disk)
    python scripts/make_transformer_zoo.py              # build everything, refresh the fixtures
    python scripts/make_transformer_zoo.py --only llama # the models whose name contains "llama"

No hub downloads: every checkpoint is ``AutoConfig`` -> ``from_config`` -> ``save_pretrained``
with a word-level ``tokenizer.json`` made here. Exports:

- optimum (``main_export``): BERT, GPT-2, Llama, Qwen2, Phi-3, Gemma (decoders with past, the
  merged decoder with its If where optimum writes one), T5, BART, Whisper, ViT;
- onnxruntime's transformer optimizer on BERT and GPT-2 at opt levels 0, 1, 2 and 99, and its
  fp16 conversion (Attention, SkipLayerNormalization, EmbedLayerNormalization, BiasGelu,
  FastGelu); its 4-bit weight quantizer (MatMulNBits) on the Llama export;
- onnxruntime-genai's model builder: Llama, Qwen2, Phi-3 and Gemma for CPU in fp32 and int4
  (GroupQueryAttention, RotaryEmbedding, MatMulNBits, SkipSimplifiedLayerNormalization).

The small models go to tests/models/transformers/ with ``<name>.npz`` (feeds ``in.*`` and
onnxruntime's outputs ``out.*``) and a manifest.json; the genai folders keep their
genai_config.json and tokenizer for ``onyx generate``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "models" / "transformers"
VENV_HOME = Path(os.environ.get("ONYX_ZOO_VENVS", Path.home() / ".cache" / "onyx-transformer-zoo"))
VENVS = {
    # optimum-onnx pins transformers 4.x; onnxruntime-genai's builder wants the newest
    "optimum": ["transformers<4.58", "optimum-onnx", "onnx", "onnxruntime", "onnxscript",
                "tokenizers", "numpy"],
    "genai": ["transformers", "onnxruntime-genai", "onnx", "onnxruntime", "onnx-ir",
              "tokenizers", "numpy"],
}  # fmt: skip
VOCAB = 128

# tiny configurations: (model_type, Auto class, config keywords)
CONFIGS = {
    "bert": ("bert", "AutoModel", dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
             num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)),
    "gpt2": ("gpt2", "AutoModelForCausalLM", dict(vocab_size=VOCAB, n_embd=32, n_layer=2,
             n_head=4, n_positions=128, bos_token_id=1, eos_token_id=2)),
    "llama": ("llama", "AutoModelForCausalLM", dict(vocab_size=VOCAB, hidden_size=64,
              intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1,
              eos_token_id=2, pad_token_id=3)),
    "qwen2": ("qwen2", "AutoModelForCausalLM", dict(vocab_size=VOCAB, hidden_size=64,
              intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1,
              eos_token_id=2)),
    "phi3": ("phi3", "AutoModelForCausalLM", dict(vocab_size=VOCAB, hidden_size=64,
             intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=4, max_position_embeddings=256, original_max_position_embeddings=256,
             bos_token_id=1, eos_token_id=2, pad_token_id=3)),
    "gemma": ("gemma", "AutoModelForCausalLM", dict(vocab_size=VOCAB, hidden_size=64,
              intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=1, head_dim=16, max_position_embeddings=256, bos_token_id=1,
              eos_token_id=2, pad_token_id=3)),
    "t5": ("t5", "AutoModelForSeq2SeqLM", dict(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64,
           num_layers=2, num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=2)),
    "bart": ("bart", "AutoModelForSeq2SeqLM", dict(vocab_size=VOCAB, d_model=32, encoder_layers=2,
             decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)),
    "whisper": ("whisper", "AutoModelForSpeechSeq2Seq", dict(vocab_size=VOCAB, num_mel_bins=16,
                d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                max_source_positions=1500, max_target_positions=32, decoder_start_token_id=1,
                pad_token_id=3, eos_token_id=2, bos_token_id=1)),
    "vit": ("vit", "AutoModelForImageClassification", dict(image_size=32, patch_size=8,
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            num_labels=3)),
}  # fmt: skip
# the benchmark models (benchmarks/models/transformers, not committed): a 4-layer d=512
# Llama-style decoder and a BERT-style encoder
BENCH = ROOT / "benchmarks" / "models" / "transformers"
BENCH_CONFIGS = {
    "llama_bench": ("llama", "AutoModelForCausalLM", dict(vocab_size=32000, hidden_size=512,
                    intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
                    num_key_value_heads=4, max_position_embeddings=4096, bos_token_id=1,
                    eos_token_id=2, pad_token_id=3)),
    "bert_bench": ("bert", "AutoModel", dict(vocab_size=30522, hidden_size=256,
                   num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                   max_position_embeddings=512)),
}  # fmt: skip
TASKS = {"bert": "feature-extraction", "gpt2": "text-generation-with-past",
         "llama": "text-generation-with-past", "qwen2": "text-generation-with-past",
         "phi3": "text-generation-with-past", "gemma": "text-generation-with-past",
         "t5": "text2text-generation-with-past", "bart": "text2text-generation-with-past",
         "whisper": "automatic-speech-recognition-with-past", "vit": "image-classification"}  # fmt: skip
GENAI = ("llama", "qwen2", "phi3", "gemma")


# ---------------------------------------------------------------------------------------------
# Driver (any Python): venvs and stages


def venv_python(name: str) -> Path:
    return VENV_HOME / name / "bin" / "python"


def setup() -> None:
    for name, packages in VENVS.items():
        py = venv_python(name)
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(py.parent.parent)], check=True)
        pip = [str(py), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "torch==2.13.0"], check=True)  # (a CPU wheel from local disk)
        subprocess.run([*pip, *packages], check=True)


def run_stage(venv: str, stage: str, work: Path, only: str) -> None:
    py = venv_python(venv)
    if not py.exists():
        sys.exit(f"{py} is missing: run {Path(__file__).name} --setup first")
    cmd = [str(py), __file__, "--stage", stage, "--work", str(work), "--only", only]
    print(f"== {stage} ({venv})", flush=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ONYX_ZOO_STAGE": venv}
    subprocess.run(cmd, check=True, env=env)


# ---------------------------------------------------------------------------------------------
# Stages (inside the venvs)


def make_tokenizer(out: Path) -> None:
    """A word-level tokenizer over 'w0' ... : special tokens <unk> <s> </s> <pad> are 0-3."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", "<pad>"])}
    vocab.update({f"w{i}": i + 4 for i in range(VOCAB - 4)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")  # (joins words with spaces)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>")  # fmt: skip
    fast.save_pretrained(out)


def stage_hf(work: Path, only: str, configs: dict = CONFIGS) -> None:
    import torch
    import transformers

    for name, (model_type, auto, kwargs) in configs.items():
        if only not in name:
            continue
        torch.manual_seed(0)
        config = transformers.AutoConfig.for_model(model_type, **kwargs)
        model = getattr(transformers, auto).from_config(config)
        with torch.no_grad():  # (random weights of a larger spread: logits that differ)
            for p in model.parameters():
                if p.dim() > 1:
                    p.normal_(0, 0.2)
        out = work / "hf" / name
        model.save_pretrained(out)
        make_tokenizer(out)
        if name == "whisper":
            transformers.WhisperFeatureExtractor(feature_size=16).save_pretrained(out)
        if name == "vit":
            transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(out)
        print(f"hf {name}", flush=True)


def stage_optimum(work: Path, only: str) -> None:
    from optimum.exporters.onnx import main_export

    for name, task in TASKS.items():
        if only not in name:
            continue
        out = work / "optimum" / name
        try:
            main_export(str(work / "hf" / name), out, task=task, do_validation=False,
                        local_files_only=True)  # fmt: skip
            print(f"optimum {name}: {sorted(p.name for p in out.glob('*.onnx'))}", flush=True)
        except Exception as exc:  # record what does not export, build the rest
            print(f"optimum {name} failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)


def stage_ort_tools(work: Path, only: str) -> None:
    import onnx
    from onnxruntime.transformers import optimizer

    out = work / "ort"
    out.mkdir(parents=True, exist_ok=True)
    for name, model_type, heads, hidden in (("bert", "bert", 4, 32), ("gpt2", "gpt2", 4, 32)):
        if only not in name:
            continue
        src = work / "optimum" / name / ("model.onnx")
        for level in (0, 1, 2, 99):
            try:
                m = optimizer.optimize_model(str(src), model_type=model_type, num_heads=heads,
                                             hidden_size=hidden, opt_level=level)  # fmt: skip
                m.save_model_to_file(str(out / f"{name}_ort_opt{level}.onnx"))
                if level == 0:
                    m.convert_float_to_float16(keep_io_types=True)
                    m.save_model_to_file(str(out / f"{name}_ort_opt0_fp16.onnx"))
                print(f"ort optimizer {name} level {level}", flush=True)
            except Exception as exc:
                print(f"ort optimizer {name} {level} failed: {exc!s:.300}", flush=True)
    if "llama" in only or not only:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        src = work / "optimum" / "llama" / "model.onnx"
        for block, symmetric in ((32, True), (16, False)):
            q = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=block, is_symmetric=symmetric)
            q.process()
            tag = f"b{block}{'_sym' if symmetric else ''}"
            q.model.save_model_to_file(str(out / f"llama_nbits_{tag}.onnx"), False)
            print(f"matmul_nbits_quantizer llama {tag}", flush=True)


def stage_genai(work: Path, only: str) -> None:
    for name in GENAI:
        if only not in name:
            continue
        for precision in ("fp32", "int4"):
            out = work / "genai" / f"{name}_{precision}"
            cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i",
                   str(work / "hf" / name), "-o", str(out), "-p", precision, "-e", "cpu",
                   "-c", str(work / "genai_cache")]  # fmt: skip
            if precision == "int4":
                cmd += ["--extra_options", "int4_block_size=32", "int4_accuracy_level=4"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            status = "ok" if done.returncode == 0 else "failed: " + done.stderr[-400:]
            print(f"genai {name} {precision}: {status}", flush=True)


# ---------------------------------------------------------------------------------------------
# Fixtures: feeds and onnxruntime's outputs

DIMS = {"batch": 2, "sequence": 5, "past": 4, "encoder": 6}
#: named dims of the exporters' inputs (other names: the sequence length)
NAMED_DIMS = {"channels": 3, "height": 32, "width": 32, "feature_size": 16}


def _dim(dim_name: str, with_past: bool) -> int:
    n = (dim_name or "").lower()
    if "batch" in n:
        return DIMS["batch"]
    for key, size in NAMED_DIMS.items():
        if key in n:
            return size
    past = DIMS["past"] if with_past else 0
    if "past" in n and ("+" in n or "sequence_length" in n.replace("past_sequence_length", "")):
        return past + DIMS["sequence"]
    if "total" in n:
        return past + DIMS["sequence"]
    if "past" in n:
        return past
    if "encoder" in n:
        return DIMS["encoder"]
    return DIMS["sequence"]


def make_feeds(model_path: Path, with_past: bool, seed: int = 0) -> dict:
    """Feeds for every graph input, from its name, type and (symbolic) shape."""
    import numpy as np
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    genai = model_path.parent / "genai_config.json"
    head = json.loads(genai.read_text())["model"]["decoder"]["head_size"] if genai.exists() else 0
    feeds = {}
    for arg in sess.get_inputs():
        name = arg.name
        shape = [d if isinstance(d, int) else _dim(d, with_past) for d in arg.shape]
        if head and arg.shape[-1] == "kv_cache_dim":  # (the genai builder's name for it)
            shape[-1] = head
        if head and not isinstance(arg.shape[0], int):  # (GQA: one sequence when prompts
            shape[0] = 1  # follow a cache)
        if name == "input_features":  # (Whisper: 2 x max_source_positions frames)
            shape[-1] = 3000
        if "past" in name and ("key" in name or "value" in name) and "encoder" not in name:
            shape[2] = DIMS["past"] if with_past else 0
        if name == "attention_mask" and with_past:
            shape[-1] = DIMS["past"] + DIMS["sequence"]
        if arg.type in ("tensor(int64)", "tensor(int32)"):
            dtype = np.int64 if "int64" in arg.type else np.int32
            if "mask" in name:
                value = np.ones(shape, dtype)
            elif "position" in name:
                start = DIMS["past"] if with_past else 0
                value = np.broadcast_to(np.arange(start, start + shape[-1]), shape).astype(dtype)
            elif "token_type" in name:
                value = np.zeros(shape, dtype)
            else:
                value = rng.integers(4, VOCAB, shape).astype(dtype)
        elif arg.type == "tensor(bool)":
            value = np.array([with_past] * int(np.prod(shape)), bool).reshape(shape)
        elif arg.type == "tensor(float16)":
            value = rng.standard_normal(shape).astype(np.float16)
        else:
            value = rng.standard_normal(shape).astype(np.float32)
        feeds[name] = value
    return feeds


def record_fixture(src: Path, name: str, manifest: dict, *, with_past=False, files=()) -> None:
    """Copy src into the fixtures with feeds and onnxruntime's outputs (``<name>.npz``)."""
    dst = FIXTURES / f"{name}.onnx"
    shutil.copy(src, dst)
    record_outputs(dst, name, manifest, with_past)


def record_outputs(model: Path, name: str, manifest: dict, with_past: bool) -> None:
    import numpy as np
    import onnx
    import onnxruntime as ort

    feeds = make_feeds(model, with_past)
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    names = [o.name for o in sess.get_outputs()]
    arrays = {f"in.{k}": v for k, v in feeds.items()}
    arrays.update({f"out.{k}": v for k, v in zip(names, outs)})
    np.savez_compressed(FIXTURES / f"{name}.npz", **arrays)
    proto = onnx.load(str(model), load_external_data=False)
    ops: dict[str, int] = {}
    for node in proto.graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        ops[key] = ops.get(key, 0) + 1
    size = sum(f.stat().st_size for f in model.parent.glob(model.name + "*"))
    manifest[name] = {"file": str(model.relative_to(FIXTURES)), "bytes": size,
                      "with_past": with_past, "ops": dict(sorted(ops.items()))}  # fmt: skip
    print(f"fixture {name}: {size / 1024:.0f} KiB", flush=True)


def record_genai_folder(src: Path, name: str, manifest: dict) -> None:
    """A genai builder's folder, for onyx generate: model, genai_config.json, tokenizer."""
    dst = FIXTURES / name
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    keep = ("model.onnx", "model.onnx.data", "genai_config.json", "tokenizer.json",
            "tokenizer_config.json", "special_tokens_map.json")  # fmt: skip
    for f in keep:
        if (src / f).exists():
            shutil.copy(src / f, dst / f)
    record_outputs(dst / "model.onnx", name, manifest, with_past=True)


def stage_fixtures(work: Path, only: str) -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    path = FIXTURES / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {}
    singles = [
        (work / "ort" / "bert_ort_opt99.onnx", "bert_ort_opt99", False),
        (work / "ort" / "bert_ort_opt1.onnx", "bert_ort_opt1", False),
        (work / "ort" / "bert_ort_opt0_fp16.onnx", "bert_ort_opt0_fp16", False),
        (work / "ort" / "gpt2_ort_opt99.onnx", "gpt2_ort_opt99", True),
        (work / "ort" / "llama_nbits_b32_sym.onnx", "llama_nbits_b32_sym", True),
        (work / "ort" / "llama_nbits_b16.onnx", "llama_nbits_b16", True),
        (work / "optimum" / "t5" / "encoder_model.onnx", "t5_encoder_optimum", False),
        (work / "optimum" / "t5" / "decoder_model_merged.onnx", "t5_decoder_merged_optimum", True),
        (work / "optimum" / "bart" / "decoder_model_merged.onnx", "bart_decoder_merged_optimum", True),
        (work / "optimum" / "whisper" / "decoder_model_merged.onnx", "whisper_decoder_merged_optimum", True),
        (work / "optimum" / "vit" / "model.onnx", "vit_optimum", False),
        (work / "optimum" / "bert" / "model.onnx", "bert_optimum", False),
        (work / "optimum" / "whisper" / "encoder_model.onnx", "whisper_encoder_optimum", False),
        (work / "optimum" / "bart" / "encoder_model.onnx", "bart_encoder_optimum", False),
    ]  # fmt: skip
    for src, name, with_past in singles:
        if only in name and src.exists():
            try:
                record_fixture(src, name, manifest, with_past=with_past)
            except Exception as exc:
                print(f"fixture {name} failed: {exc!s:.300}", flush=True)
    for name in GENAI:
        for precision in ("fp32", "int4") if name == "llama" else ("int4",):
            src = work / "genai" / f"{name}_{precision}"
            tag = f"{name}_genai_{precision}"
            if only in tag and (src / "model.onnx").exists():
                try:
                    record_genai_folder(src, tag, manifest)
                except Exception as exc:
                    print(f"fixture {tag} failed: {exc!s:.300}", flush=True)
    path.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    total = sum(f.stat().st_size for f in FIXTURES.rglob("*") if f.is_file())
    print(f"{len(manifest)} fixtures, {total / 2**20:.2f} MiB in {FIXTURES}")


def stage_bench_hf(work: Path, only: str) -> None:
    stage_hf(work, only, BENCH_CONFIGS)


def stage_bench(work: Path, only: str) -> None:
    """The benchmark models: the decoder through the genai builder (int4, fp32), the encoder
    through optimum and onnxruntime's transformer optimizer."""
    BENCH.mkdir(parents=True, exist_ok=True)
    if os.environ.get("ONYX_ZOO_STAGE") == "genai":
        for precision in ("int4", "fp32"):
            out = BENCH / f"llama_bench_{precision}"
            cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i",
                   str(work / "hf" / "llama_bench"), "-o", str(out), "-p", precision, "-e", "cpu",
                   "-c", str(work / "genai_cache")]  # fmt: skip
            if precision == "int4":
                cmd += ["--extra_options", "int4_block_size=32", "int4_accuracy_level=4"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            print(
                f"bench llama {precision}: {'ok' if done.returncode == 0 else done.stderr[-400:]}"
            )
        return
    from onnxruntime.transformers import optimizer
    from optimum.exporters.onnx import main_export

    out = work / "optimum" / "bert_bench"
    main_export(str(work / "hf" / "bert_bench"), out, task="feature-extraction",
                do_validation=False, local_files_only=True)  # fmt: skip
    shutil.copy(out / "model.onnx", BENCH / "bert_bench.onnx")
    m = optimizer.optimize_model(str(out / "model.onnx"), model_type="bert", num_heads=4,
                                 hidden_size=256, opt_level=99)  # fmt: skip
    m.save_model_to_file(str(BENCH / "bert_bench_ort_opt.onnx"))
    print("bench bert: ok")


STAGES = {"hf": stage_hf, "optimum": stage_optimum, "ort": stage_ort_tools, "genai": stage_genai,
          "fixtures": stage_fixtures, "bench_hf": stage_bench_hf, "bench": stage_bench}  # fmt: skip
BENCH_PIPELINE = [("optimum", "bench_hf"), ("optimum", "bench"), ("genai", "bench")]
PIPELINE = [("optimum", "hf"), ("optimum", "optimum"), ("optimum", "ort"), ("genai", "genai"),
            ("optimum", "fixtures")]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", action="store_true", help="create the virtual environments")
    parser.add_argument("--only", default="", help="substring of the model names to build")
    parser.add_argument("--work", type=Path, default=Path("/tmp/onyx-transformer-zoo"))
    parser.add_argument("--stage", choices=sorted(STAGES), help=argparse.SUPPRESS)
    parser.add_argument("--bench", action="store_true", help=f"the benchmark models, into {BENCH}")
    args = parser.parse_args()
    if args.setup:
        setup()
        return
    if args.stage:
        STAGES[args.stage](args.work, args.only)
        return
    for venv, stage in BENCH_PIPELINE if args.bench else PIPELINE:
        run_stage(venv, stage, args.work, args.only)


if __name__ == "__main__":
    main()
