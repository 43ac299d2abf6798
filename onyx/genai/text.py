"""Text in and out through Hugging Face's ``tokenizers`` package (the optional extra
``onyx[llm]``), imported only when a prompt is text."""

from __future__ import annotations

from pathlib import Path

from ..errors import InvalidArgument, OnyxError


class MissingDependency(OnyxError):
    """An optional package a feature needs is not installed."""


def load_tokenizer(folder: Path):
    """The folder's tokenizer.json as a ``tokenizers.Tokenizer``."""
    path = Path(folder) / "tokenizer.json"
    if not path.exists():
        raise InvalidArgument(f"{folder} has no tokenizer.json: give the prompt as token ids")
    try:
        import tokenizers
    except ImportError as e:
        raise MissingDependency(
            "text prompts need the 'tokenizers' package: pip install 'onyx[llm]'"
        ) from e
    return tokenizers.Tokenizer.from_file(str(path))
