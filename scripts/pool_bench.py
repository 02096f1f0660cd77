"""Pool `specdec bench --json-out` files into one markdown table: every prompt of every file.

    python scripts/pool_bench.py docs/tradeoff/*.json

τ = all new tokens / all target forwards; agreements are prompt means; log-prob is per token.
"""

from __future__ import annotations

import json
import sys


def main(paths: list[str]) -> None:
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            rows += [{**row, "file": path} for row in json.load(handle)["per_prompt"]]
    print(f"{len({(r['file'], r['prompt_index']) for r in rows})} prompts\n")
    print("| entry (`--methods`) | τ | prefix agr. | token agr. | identical | log-prob / token |")
    print("|---|---:|---:|---:|---:|---:|")
    for label in dict.fromkeys(r["method"] for r in rows):
        rs = [r for r in rows if r["method"] == label]
        new, steps = sum(r["new_tokens"] for r in rs), sum(r["steps"] for r in rs)
        means = [sum(r[k] for r in rs) / len(rs) for k in ("prefix_agreement", "token_agreement")]
        identical = sum(r["identical_to_ar"] for r in rs) / len(rs)
        logprob = sum(r["mean_logprob"] * r["new_tokens"] for r in rs) / new
        print(
            f"| `{label}` | {new / steps:.2f} | {means[0]:.2f} | {means[1]:.2f} | "
            f"{identical:.2f} | {logprob:.3f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
