"""onyx generate: text or token generation with a decoder folder (onnxruntime-genai's builder or
optimum's export), streaming each token as it comes."""

from __future__ import annotations

import argparse
import sys

HELP = "generate tokens with a decoder model folder (genai_config.json or config.json + model.onnx)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", help="the model's folder (or its .onnx file)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text (needs tokenizer.json and onyx[llm])")
    src.add_argument("--ids", help="prompt token ids, comma-separated")
    p.add_argument("--max-new-tokens", "-n", type=int, default=32)
    p.add_argument("--sample", action="store_true", help="sample (default: greedy)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stop", help="stop token ids, comma-separated (default: the model's eos)")
    p.add_argument("--no-stream", action="store_true", help="print the result only at the end")
    p.add_argument("--timings", action="store_true", help="print prefill time and decode speed")


def _int_list(text: str) -> list[int]:
    return [int(t) for t in text.replace(" ", "").split(",") if t]


def main(args) -> int:
    from ..genai import generate

    prompt = args.prompt if args.prompt is not None else _int_list(args.ids)
    as_text = isinstance(prompt, str)

    def stream(token: int, piece: str | None) -> None:
        sys.stdout.write(piece if as_text else f"{token} ")
        sys.stdout.flush()

    result = generate(
        args.model_dir,
        prompt,
        args.max_new_tokens,
        do_sample=args.sample,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        repetition_penalty=args.repetition_penalty,
        seed=args.seed,
        stop_token_ids=None if args.stop is None else _int_list(args.stop),
        callback=None if args.no_stream else stream,
    )
    if args.no_stream:
        print(result.text if as_text else " ".join(map(str, result.tokens)))
    else:
        print()
    if args.timings:
        t = result.timings
        rate = t.get("decode_tokens_per_s")
        print(
            f"prefill {t['prefill_s'] * 1e3:.1f} ms, decode "
            f"{'-' if rate is None else f'{rate:.1f}'} tokens/s, finish: {result.finish_reason}"
        )
    return 0
