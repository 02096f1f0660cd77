"""Answer tokens/s of a batched generation call, with and without the batched-step attention.

`specdec data` answers requests in calls of `--rows` sequences; every step of such a call in
bf16 on a CPU attends through `cpu_attention.batched_step_attention` (two matrix products)
rather than torch's masked kernel. This script times one call of ROWS prompts of about
PROMPT tokens for NEW tokens each (no row ends early), both ways in alternation, and prints
answer tokens/s, ms per step and whether the answers agree.

    python scripts/generation_speed.py --rows 64 --prompt 150 --new 128 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec_core.environment import current_environment  # noqa: E402
from specdec_core.models import cpu_attention  # noqa: E402
from specdec_core.models.loading import load_model  # noqa: E402
from specdec_core.run.prompts import encode_chat  # noqa: E402
from specdec_core.training import datasets  # noqa: E402

SENTENCE = "The committee met on Tuesday to discuss the budget for the new library wing. "


def prompts(tokenizer, rows: int, length: int) -> list[list[int]]:
    """ROWS chat prompts of about LENGTH tokens (a text to summarise), each a little different."""
    repeats = max(1, length // len(tokenizer(SENTENCE)["input_ids"]))
    return [
        encode_chat(
            tokenizer,
            [{"role": "user", "content": f"Summarise ({row}): " + SENTENCE * repeats}],
            True,
        )
        for row in range(rows)
    ]


def timed(model, batch: list[list[int]], new: int, pad: int) -> tuple[float, list[list[int]]]:
    started = time.perf_counter()
    answers = datasets.answer_batch(model, batch, new, pad, set())  # no end: every row runs
    return time.perf_counter() - started, [answer for answer, _ in answers]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=150, help="prompt tokens (about)")
    parser.add_argument("--new", type=int, default=128, help="new tokens per row")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    loaded = load_model(args.target, "cpu", args.dtype)
    tokenizer = loaded.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    batch = prompts(tokenizer, args.rows, args.prompt)
    datasets.answer_batch(loaded.model, batch[:4], 4, pad, set())  # warm-up
    kernel_only = cpu_attention.is_batched_step
    results: dict[str, list[float]] = {"batched-step": [], "kernel": []}
    answers: dict[str, list[list[int]]] = {}
    for _ in range(args.repeats):
        for name in results:
            cpu_attention.is_batched_step = kernel_only if name == "batched-step" else _never
            seconds, answers[name] = timed(loaded.model, batch, args.new, pad)
            results[name].append(seconds)
    cpu_attention.is_batched_step = kernel_only
    tokens = args.rows * args.new
    report = {
        "settings": vars(args) | {"prompt_tokens": [min(map(len, batch)), max(map(len, batch))]},
        "environment": current_environment(command=shlex.join(["python", *sys.argv])).to_record(),
        "runs": {
            name: [
                {"tokens_per_s": round(tokens / s, 1), "ms_per_step": round(1000 * s / args.new)}
                for s in seconds
            ]
            for name, seconds in results.items()
        },
        "rows_with_equal_answers": sum(
            a == b for a, b in zip(answers["batched-step"], answers["kernel"], strict=True)
        ),
    }
    print(json.dumps(report, indent=1))


def _never(*args) -> bool:
    return False


if __name__ == "__main__":
    main()
