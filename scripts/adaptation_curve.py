"""Online adaptation step by step: agreement on the runs adapted on against held-out runs.

For each prompt file: the target answers its first `--adapt-prompts` prompts and the next
`--measure-prompts` greedily; an `Adapter` on the loaded head takes the first group as its runs
and trains on them `--every` steps at a time (fixed step counts, no time budget), and after
each block the script prints teacher-forced top-1 (the adapted head's top-1 against the
target's, one drafting pass) on both groups. A rising first column with a flat or falling
second is a head that learns these runs but not this kind of prompt. One line of settings per
`--settings` JSON object (fields of `AdaptSettings`). Results: docs/benchmarks.md, section
"Online adaptation by kind".

    python scripts/adaptation_curve.py --data ../shared/data --files gsm8k,humaneval \
        --settings '{}' --settings '{"lr": 1e-3, "l2": 0, "kl": 0}' --out curve.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="folder of *.jsonl prompt files")
    parser.add_argument("--files", help="comma-separated file stems (default: every file)")
    parser.add_argument("--head", default="embedded")
    parser.add_argument("--adapt-prompts", type=int, default=10)
    parser.add_argument("--measure-prompts", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--every", type=int, default=8)
    parser.add_argument("--settings", action="append", default=[], help="AdaptSettings as JSON")
    parser.add_argument("--out", type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from specdec_core.models.loading import load_model
    from specdec_core.run.prompts import encode_prompt, read_prompt_file
    from specdec_core.run.runner import load_head
    from specdec_core.training.adaptation import Adapter, AdaptSettings
    from specdec_core.training.datasets import Sample
    from specdec_core.training.objective import Objective
    from specdec_core.training.validation import held_features, teacher_forced_agreement

    args = options(argv)
    target = load_model("embedded", "cpu", "float32")
    lm_head = target.model.get_output_embeddings()
    every = sorted(path.stem for path in args.data.glob("*.jsonl"))
    stems = args.files.split(",") if args.files else every
    settings = [replace(AdaptSettings(), **json.loads(text)) for text in args.settings or ["{}"]]
    first, then = args.adapt_prompts, args.adapt_prompts + args.measure_prompts

    def answered(texts: list[str]) -> list[tuple[list[int], list[int]]]:
        runs = []
        for text in texts:
            ids = encode_prompt(target.tokenizer, text)
            with torch.no_grad():
                out = target.model.generate(
                    torch.tensor([ids]), max_new_tokens=args.max_new_tokens, do_sample=False
                )
            runs.append((ids, out[0, len(ids) :].tolist()))
        return runs

    def featured(runs: list[tuple[list[int], list[int]]]):
        return held_features(target, [Sample(p + o, len(p)) for p, o in runs])

    def agreement(head, featured) -> float:
        objective = Objective("eagle", head, lm_head, head.draft_ids(), 0.0, 1).eval()
        return teacher_forced_agreement(objective, featured, lm_head)

    defaults = asdict(AdaptSettings())
    report: list[dict] = []
    for stem in stems:
        texts = read_prompt_file(args.data / f"{stem}.jsonl")[:then]
        runs = answered(texts)
        adapt_runs = runs[:first]
        seen, held_out = featured(adapt_runs), featured(runs[first:])
        for setting in settings:
            adapter = Adapter(load_head(args.head, target, torch.float32), target, setting)
            for prompt, output in adapt_runs:
                adapter.add_run(prompt, output)
            curve = []
            while True:
                row = {
                    "steps": adapter.steps,
                    "adapted_on": agreement(adapter.model.eval(), seen),
                    "held_out": agreement(adapter.model, held_out),
                }
                curve.append(row)
                changed = {k: v for k, v in asdict(setting).items() if v != defaults[k]}
                print(
                    f"{stem:10} {json.dumps(changed):40} step {row['steps']:3}: "
                    f"top-1 on its runs {row['adapted_on']:.3f}, held out {row['held_out']:.3f}",
                    flush=True,
                )
                if adapter.steps >= args.steps:
                    break
                adapter.model.train()
                adapter.adapt(float("inf"), max_steps=args.every)
            report.append({"file": stem, "settings": asdict(setting), "curve": curve})
            if args.out:  # after every curve, so a cut-off run keeps what it measured
                record = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
                args.out.write_text(json.dumps({"options": record, "results": report}, indent=2))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
