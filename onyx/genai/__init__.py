"""Text generation with decoder models that carry a KV cache: ``onyx.generate`` and
``onyx generate``. Reads the layouts onnxruntime-genai's model builder (genai_config.json) and
optimum (config.json, past_key_values.N.key / present.N.key; encoder_model.onnx +
decoder_model_merged.onnx for encoder-decoders) write."""

from .config import DecoderConfig
from .generator import GenerationResult, Generator, KVCache, generate
from .sampling import SamplingOptions
from .seq2seq import Seq2SeqGenerator

__all__ = [
    "DecoderConfig",
    "GenerationResult",
    "Generator",
    "KVCache",
    "SamplingOptions",
    "Seq2SeqGenerator",
    "generate",
]
