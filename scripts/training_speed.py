"""Training tokens/s of an EAGLE head on the corpus, under bf16 autocast and in float32.

`specdec train` runs its steps under bf16 autocast where the CPU multiplies bf16 natively
(AVX-512 BF16, AMX; `training/loop.autocast_dtype`) and in float32 elsewhere. This script
measures both on this machine: it takes the first TOKENS tokens of a corpus (a `specdec data`
folder; default the embedded model's, resources/corpus/embedded), computes the target's
features once, builds the head training would start from (the bundled EAGLE-1 head, or a fresh
EAGLE-3 head with `--arch eagle3`), and times STEPS optimiser steps of batches of about
BATCH_TOKENS tokens each way, in alternation (REPEATS rounds), printing one JSON line: tokens/s
per way and round, the ratio, and which way `specdec train` uses here.

    python scripts/training_speed.py --arch eagle1 --tokens 40000 --steps 6 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec_core.environment import current_environment  # noqa: E402
from specdec_core.heads.eagle.head import fused_layers  # noqa: E402
from specdec_core.models.loading import load_model  # noqa: E402
from specdec_core.run.runner import load_head  # noqa: E402
from specdec_core.training.features import extract_features  # noqa: E402
from specdec_core.training.generation_job import load_samples  # noqa: E402
from specdec_core.training.loop import autocast_dtype, train_step  # noqa: E402
from specdec_core.training.objective import Objective  # noqa: E402
from specdec_core.training.starting_model import starting_model, trainable  # noqa: E402


def batches(data, batch_tokens: int) -> list[list]:
    """Consecutive items of about `batch_tokens` tokens each."""
    found, batch, size = [], [], 0
    for item in data:
        batch.append(item)
        size += len(item.ids)
        if size >= batch_tokens:
            found.append(batch)
            batch, size = [], 0
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(ROOT / "resources" / "corpus" / "embedded"))
    parser.add_argument("--arch", choices=["eagle1", "eagle3"], default="eagle1")
    parser.add_argument("--tokens", type=int, default=40_000)
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per way and round")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--unroll", type=int, default=2)
    args = parser.parse_args()

    target = load_model("embedded", "cpu", "bfloat16" if autocast_dtype(torch.device("cpu"))
                        else "float32")  # fmt: skip
    target.model.requires_grad_(False)
    samples, _ = load_samples(Path(args.corpus), args.tokens)
    layers = fused_layers(target.model.config.num_hidden_layers) if args.arch == "eagle3" else ()
    data = extract_features(target.model, [s for s in samples if len(s.ids) <= 512], None,
                            layers=layers)  # fmt: skip
    init = load_head("embedded", target, torch.float32) if args.arch == "eagle1" else None
    lm_head = target.model.get_output_embeddings()
    ways = {"bfloat16 autocast": torch.bfloat16, "float32": None}
    rates: dict[str, list[float]] = {way: [] for way in ways}
    steps = batches(data, args.batch_tokens)
    for _ in range(args.repeats):
        for way, dtype in ways.items():
            model, draft_ids = starting_model("eagle", init, target, data, 8192, args.arch, 1)
            objective = Objective("eagle", model, lm_head, draft_ids, 0.2, args.unroll).train()
            params = trainable(model, "eagle")
            optimizer = torch.optim.AdamW(params, lr=1e-4)
            train_step(objective, steps[0], optimizer, params, 0.1, dtype)  # warm-up
            timed = steps[1 : 1 + args.steps]
            began = time.perf_counter()
            for batch in timed:
                train_step(objective, batch, optimizer, params, 0.1, dtype)
            seconds = time.perf_counter() - began
            rates[way].append(round(sum(len(i.ids) for b in timed for i in b) / seconds, 1))
    best = {way: max(r) for way, r in rates.items()}
    used = "bfloat16 autocast" if autocast_dtype(torch.device("cpu")) else "float32"
    env = current_environment("cpu", "python " + shlex.join(sys.argv))
    print(json.dumps({
        "arch": args.arch, "unroll": args.unroll, "batch_tokens": args.batch_tokens,
        "tokens_per_s": rates, "bf16_over_fp32": round(best["bfloat16 autocast"]
                                                        / best["float32"], 2),
        "specdec_train_uses": used, "environment": env.to_record(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
