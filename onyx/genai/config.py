"""What a decoder folder tells about its model: input and output names, the KV cache's layout,
stop tokens. Read from onnxruntime-genai's ``genai_config.json`` or, for optimum's exports,
from ``config.json`` and the model's own input declarations."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InvalidArgument

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


@dataclass
class DecoderConfig:
    """A decoder-only model with a KV cache, as the generation loop drives it."""

    model_path: Path
    input_ids: str = "input_ids"
    attention_mask: str | None = "attention_mask"
    position_ids: str | None = None
    use_cache_branch: str | None = None  # optimum's merged decoder (an If on this flag)
    logits: str = "logits"
    past_names: list[tuple[str, str]] = field(default_factory=list)  # (key, value) per layer
    present_names: list[tuple[str, str]] = field(default_factory=list)
    kv_heads: int = 0
    head_size: int = 0
    cache_dtype: type = np.float32
    int_dtypes: dict[str, type] = field(default_factory=dict)
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    context_length: int = 2048
    #: the cache buffers hold context_length rows from the start (onnxruntime-genai's
    #: past_present_share_buffer): no buffer grows, the model writes each new row in place
    share_buffer: bool = False
    search: dict = field(default_factory=dict)


def _ids(value) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, list) else (int(value),)


def find_model(model_dir: Path) -> tuple[Path, dict | None, dict | None]:
    """(model path, genai_config, config.json) of a folder, or of a model file's folder."""
    path = Path(model_dir)
    folder = path if path.is_dir() else path.parent
    genai = folder / "genai_config.json"
    genai_config = json.loads(genai.read_text()) if genai.exists() else None
    hf = folder / "config.json"
    hf_config = json.loads(hf.read_text()) if hf.exists() else None
    if path.is_file():
        return path, genai_config, hf_config
    if genai_config is not None:
        return folder / genai_config["model"]["decoder"]["filename"], genai_config, hf_config
    for name in ("model.onnx", "decoder_model_merged.onnx", "decoder_with_past_model.onnx"):
        if (folder / name).exists():
            return folder / name, genai_config, hf_config
    raise InvalidArgument(f"{folder}: no genai_config.json and no model.onnx to generate with")


def decoder_config(model_path: Path, genai: dict | None, hf: dict | None, inputs, outputs):
    """The DecoderConfig of a model from its configs and the session's input / output args."""
    cfg = DecoderConfig(model_path=model_path)
    input_types = {a.name: a for a in inputs}
    output_names = {a.name for a in outputs}
    if genai is not None:
        _from_genai(cfg, genai, len(input_types))
    else:
        _from_inputs(cfg, input_types, output_names, hf or {})
    if cfg.input_ids not in input_types or cfg.logits not in output_names:
        raise InvalidArgument(
            f"{model_path}: inputs {sorted(input_types)} / outputs "
            f"{sorted(output_names)} are not a decoder's (input_ids -> logits)"
        )
    if not cfg.past_names:
        raise InvalidArgument(
            f"{model_path}: the model has no past key / value inputs (a KV cache)"
        )
    for name in (cfg.attention_mask, cfg.position_ids):
        if name is not None and name not in input_types:
            if name == cfg.attention_mask:
                cfg.attention_mask = None
            else:
                cfg.position_ids = None
    for name, arg in input_types.items():
        cfg.int_dtypes[name] = _NUMPY.get(arg.type, np.int64)
    first_past = input_types[cfg.past_names[0][0]]
    cfg.cache_dtype = _NUMPY.get(first_past.type, np.float32)
    dims = first_past.shape
    if not cfg.kv_heads and isinstance(dims[1], int):
        cfg.kv_heads = dims[1]
    if not cfg.head_size and isinstance(dims[3], int):
        cfg.head_size = dims[3]
    if not cfg.kv_heads or not cfg.head_size:
        raise InvalidArgument(f"{model_path}: the KV cache's heads / head size are not known")
    return cfg


def _from_genai(cfg: DecoderConfig, genai: dict, n_inputs: int) -> None:
    model = genai["model"]
    dec = model["decoder"]
    ins, outs = dec.get("inputs", {}), dec.get("outputs", {})
    cfg.input_ids = ins.get("input_ids", "input_ids")
    cfg.attention_mask = ins.get("attention_mask", "attention_mask")
    cfg.position_ids = ins.get("position_ids")
    cfg.logits = outs.get("logits", "logits")
    layers = dec["num_hidden_layers"]
    pk, pv = ins.get("past_key_names"), ins.get("past_value_names")
    qk, qv = outs.get("present_key_names"), outs.get("present_value_names")
    if not (pk and pv and qk and qv):
        raise InvalidArgument(
            "genai_config.json: only separate past key / value names are supported"
        )
    cfg.past_names = [(pk % i, pv % i) for i in range(layers)]
    cfg.present_names = [(qk % i, qv % i) for i in range(layers)]
    cfg.kv_heads = dec.get("num_key_value_heads", dec.get("num_attention_heads", 0))
    cfg.head_size = dec.get("head_size", 0)
    cfg.eos_token_ids = _ids(model.get("eos_token_id"))
    cfg.pad_token_id = model.get("pad_token_id")
    cfg.context_length = model.get("context_length", cfg.context_length)
    cfg.search = genai.get("search", {})
    cfg.context_length = min(cfg.context_length, cfg.search.get("max_length", cfg.context_length))
    cfg.share_buffer = bool(cfg.search.get("past_present_share_buffer", False))


def _from_inputs(cfg: DecoderConfig, inputs: dict, outputs: set, hf: dict) -> None:
    """optimum's layout: past_key_values.N.key / .value in, present.N.key / .value out."""
    layers: dict[int, dict[str, str]] = {}
    for name in inputs:
        m = _PAST.match(name)
        if m:
            layers.setdefault(int(m.group(1)), {})[m.group(2)] = name
    for i in sorted(layers):
        cfg.past_names.append((layers[i]["key"], layers[i]["value"]))
        cfg.present_names.append((f"present.{i}.key", f"present.{i}.value"))
    cfg.position_ids = "position_ids" if "position_ids" in inputs else None
    cfg.use_cache_branch = "use_cache_branch" if "use_cache_branch" in inputs else None
    heads = hf.get("num_key_value_heads") or hf.get("num_attention_heads") or hf.get("n_head")
    hidden = hf.get("hidden_size") or hf.get("n_embd")
    cfg.kv_heads = heads or 0
    q_heads = hf.get("num_attention_heads") or hf.get("n_head")
    cfg.head_size = hf.get("head_dim") or (hidden // q_heads if hidden and q_heads else 0)
    cfg.eos_token_ids = _ids(hf.get("eos_token_id"))
    cfg.pad_token_id = hf.get("pad_token_id")
    cfg.context_length = hf.get("max_position_embeddings") or hf.get("n_positions") or 2048
    missing = [p for pair in cfg.present_names for p in pair if p not in outputs]
    if missing:
        raise InvalidArgument(f"the model has no outputs {missing[:2]} for its past inputs")
