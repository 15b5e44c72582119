"""Validate an LLM judge against human scores: MAE per metric, like the OVIBench paper's Table 1.

    python -m eval.judge_calibrate --human human_scores.jsonl --base-url http://localhost:8000/v1 \\
        --model Qwen/Qwen3-VL-235B-A22B-Instruct
    python -m eval.judge_calibrate --human human_scores.jsonl --local-model /ckpt/Qwen3-8B

The human file's format is described in ``eval.judge.calibrate``. The API key is read from the
environment variable named by ``--api-key-env`` and never printed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from core.files import write_json_atomic
from core.text_models import EndpointConfig, TextBackend, TextModelConfig, make_text_model
from eval.judge import Judge, calibrate

# Seed 003, Table 1: the lowest MAE any judge reached per metric (VES: Qwen3-VL-30B-A3B; the others:
# Qwen3-VL-235B-A22B). A reference point for how good a judge can be, not a pass mark.
PAPER_BEST_MAE: dict[str, float] = {
    "iac": 0.0508,
    "tfs": 0.3672,
    "ves": 0.8477,
    "ifa": 0.0625,
    "cfs": 0.5547,
    "ccs": 0.9453,
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    summary = __doc__.split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m eval.judge_calibrate", description=summary)
    parser.add_argument("--human", required=True, type=Path, help="JSONL of items with human scores")
    backend = parser.add_mutually_exclusive_group(required=True)
    backend.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    backend.add_argument("--local-model", help="a local transformers model (directory or hub cache name)")
    parser.add_argument("--model", help="served model name (with --base-url)")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="env variable holding the API key")
    parser.add_argument("--timeout-s", type=float, default=60.0)
    parser.add_argument("--max-retries", type=int, default=3)
    parser.add_argument("--backoff-s", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=256, help="reply length limit")
    parser.add_argument("--cache", type=Path, help="judgement cache (JSONL); default: next to --human")
    parser.add_argument("--out", type=Path, help="also write the table as JSON here")
    args = parser.parse_args(argv)
    if args.base_url and not args.model:
        parser.error("--base-url needs --model")
    return args


def judge_settings(args: argparse.Namespace) -> TextModelConfig:
    """The judge the arguments describe, as the text-model settings ``judge`` takes in a run's config."""
    if args.local_model:
        return TextModelConfig(backend=TextBackend.local, model=args.local_model, max_tokens=args.max_tokens)
    server = EndpointConfig(
        base_url=args.base_url,
        api_key_env=args.api_key_env,
        timeout_s=args.timeout_s,
        max_retries=args.max_retries,
        backoff_s=args.backoff_s,
    )
    return TextModelConfig(TextBackend.endpoint, args.model, max_tokens=args.max_tokens, endpoint=server)


def format_table(results: dict[str, dict], identity: str) -> str:
    """A plain-text table: metric, MAE, items, unjudged, the paper's best MAE."""
    lines = [f"judge: {identity}", f"{'metric':<8}{'MAE':>8}{'n':>6}{'unjudged':>10}{'paper best':>12}"]
    for metric, row in results.items():
        mae = "-" if row["mae"] is None else f"{row['mae']:.4f}"
        best = PAPER_BEST_MAE.get(metric)
        lines.append(
            f"{metric.upper():<8}{mae:>8}{row['n']:>6}{row['n_unjudged']:>10}"
            f"{'-' if best is None else f'{best:.4f}':>12}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cache = args.cache or args.human.with_name(args.human.stem + ".judge_cache.jsonl")
    try:
        judge = Judge(make_text_model(judge_settings(args), "judge"), cache)
        results = calibrate(judge, args.human)
    except (OSError, ValueError) as err:  # a bad setting or a missing or malformed human file: one line
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_table(results, judge.identity))
    if args.out:
        write_json_atomic(args.out, {"judge": judge.identity, "metrics": results}, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
