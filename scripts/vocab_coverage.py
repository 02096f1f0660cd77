"""How much of the target's answers a draft vocabulary can draft, per prompt file.

A head with a reduced draft vocabulary (the N most frequent tokens of its training data) can
never propose a token outside it, so the share of the target's answer tokens inside it bounds
what the head can draft. This script takes the training data (a `specdec data` work folder),
ranks its tokens as `specdec train` does (`frequent_tokens`: prompts and answers), answers the
first `--limit` prompts of each evaluation file greedily with the target, and prints, per file,
the share of answer tokens inside the top 8k / 16k / 32k and inside a trained head's
vocabulary (`--head`, e.g. embedded).

    python scripts/vocab_coverage.py --data ~/.local/share/specdec-playground/training-data \
        --eval 'my-benchmarks/*.jsonl' --head embedded --out coverage.json
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec_core.models.loading import load_model  # noqa: E402
from specdec_core.run.prompts import encode_prompt  # noqa: E402
from specdec_core.training import datasets  # noqa: E402
from specdec_core.training.generation_job import load_samples  # noqa: E402

SIZES = (8192, 16384, 32768)


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a `specdec data` work folder")
    parser.add_argument("--tokens", type=int, default=None, help="training tokens to rank")
    parser.add_argument("--eval", required=True, help="evaluation prompt files (glob)")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--head", default=None, help="also a trained head's draft vocabulary")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--out", type=Path)
    return parser.parse_args(argv)


def ranked(samples) -> list[int]:
    counts: Counter[int] = Counter()
    for sample in samples:
        counts.update(sample.ids)
    return [token for token, _ in counts.most_common()]


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
    samples, mix = load_samples(args.data, args.tokens)
    order = ranked(samples)
    target = load_model(args.target, "cpu", args.dtype)
    tok = target.tokenizer
    vocabularies = {f"top {size}": set(order[:size]) for size in map(int, args.sizes.split(","))}
    if args.head:
        from specdec_core.run.runner import load_head

        ids = load_head(args.head, target).draft_ids()
        if ids is not None:
            vocabularies[f"head {args.head}"] = set(ids.tolist())
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    report: dict = {"training_tokens": sum(len(s.ids) for s in samples), "files": {}}
    for path in sorted(glob.glob(args.eval)):
        lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        texts = [r.get("prompt") or r["turns"][0] for r in lines[: args.limit]]
        prompts = [encode_prompt(tok, text) for text in texts]
        answers = [
            answer
            for answer, _ in datasets.answer_batch(
                target.model, prompts, args.max_new_tokens, pad, target.eos_ids
            )
        ]
        tokens = [t for answer in answers for t in answer]
        report["files"][Path(path).stem] = {
            name: round(sum(t in vocab for t in tokens) / max(1, len(tokens)), 4)
            for name, vocab in vocabularies.items()
        }
    print(f"training tokens ranked: {report['training_tokens']:,}")
    names = list(vocabularies)
    print(f"{'file':<12}" + "".join(f"{n:>18}" for n in names))
    for file, row in report["files"].items():
        print(f"{file:<12}" + "".join(f"{row[n]:>18.1%}" for n in names))
    if args.out:
        args.out.write_text(json.dumps({**report, "mix": mix}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
