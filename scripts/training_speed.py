"""Training tokens/s of an EAGLE head on the corpus, features computed on the fly, under bf16
and in float32.

`specdec train` computes the target's features batch by batch as it trains
(training/online_features.py) and runs both the target's forward and the head's step in
bfloat16 where the CPU multiplies bf16 natively (AVX-512 BF16, AMX; the target loaded in
bf16, the step under bf16 autocast: `training/loop.autocast_dtype`) and in float32 elsewhere.
This script measures both ways on this machine, as `specdec train` runs them: it takes the
first TOKENS tokens of a corpus (a `specdec data` folder; default the embedded model's,
resources/corpus/embedded), and for each way loads the target in that dtype, builds the head
training starts from (a fresh EAGLE-3 head, or with `--arch eagle1` the bundled EAGLE-1 head)
and trains it for SECONDS on `online_batches` of about BATCH_TOKENS tokens (each batch's target
forward and optimiser step timed together, after one warm-up batch); the ways alternate for
REPEATS rounds (the machine may be loaded by other work: each round gives its own ratio). One
JSON line: tokens/s per way and round, the ratio per round, and which way `specdec train` uses.

    python scripts/training_speed.py --arch eagle3 --seconds 60 --repeats 2
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
from specdec_core.training.data_sources import trimmed  # noqa: E402
from specdec_core.training.generation_job import load_samples  # noqa: E402
from specdec_core.training.loop import autocast_dtype, train_step  # noqa: E402
from specdec_core.training.objective import Objective  # noqa: E402
from specdec_core.training.online_features import Sequences, online_batches  # noqa: E402
from specdec_core.training.starting_model import starting_model, trainable  # noqa: E402

BF16, FP32 = "bfloat16", "float32"


def timed_training(target, data: Sequences, args, autocast: torch.dtype | None) -> float:
    """Tokens/s of `args.seconds` of training (after one warm-up batch) on `data` with features
    computed on the fly, the step under `autocast` (None: float32)."""
    layers = fused_layers(target.model.config.num_hidden_layers) if args.arch == "eagle3" else ()
    init = load_head("embedded", target, torch.float32) if args.arch == "eagle1" else None
    torch.manual_seed(0)
    model, draft_ids = starting_model("eagle", init, target, data, 8192, args.arch, 1)
    lm_head = target.model.get_output_embeddings()
    objective = Objective("eagle", model, lm_head, draft_ids, 0.2, args.unroll).train()
    params = trainable(model, "eagle")
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    stream = online_batches(target, data, layers, args.batch_tokens, seed=0)
    train_step(objective, next(stream), optimizer, params, 0.1, autocast)  # warm-up
    tokens, began = 0, time.perf_counter()
    while time.perf_counter() - began < args.seconds:
        batch = next(stream)  # the target's forward for it, then the step: both timed
        train_step(objective, batch, optimizer, params, 0.1, autocast)
        tokens += batch.tokens
    return round(tokens / (time.perf_counter() - began), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(ROOT / "resources" / "corpus" / "embedded"))
    parser.add_argument("--arch", choices=["eagle1", "eagle3"], default="eagle3")
    parser.add_argument("--tokens", type=int, default=200_000, help="of the corpus, in its mix")
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--seconds", type=float, default=60.0, help="timed per way and round")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--unroll", type=int, default=2)
    args = parser.parse_args()

    samples, _ = load_samples(Path(args.corpus), args.tokens)
    data = Sequences.of(trimmed(samples, 512))  # specdec train's --max-len
    ways = {BF16: torch.bfloat16, FP32: None}
    rates: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(args.repeats):
        for way, autocast in ways.items():
            target = load_model("embedded", "cpu", way)
            target.model.requires_grad_(False)
            rates[way].append(timed_training(target, data, args, autocast))
            del target
    ratios = [round(b / f, 2) for b, f in zip(rates[BF16], rates[FP32], strict=True)]
    used = BF16 if autocast_dtype(torch.device("cpu")) else FP32
    env = current_environment("cpu", "python " + shlex.join(sys.argv))
    print(json.dumps({
        "arch": args.arch, "unroll": args.unroll, "batch_tokens": args.batch_tokens,
        "seconds": args.seconds, "corpus_tokens": data.tokens, "tokens_per_s": rates,
        "bf16_over_fp32": ratios, "specdec_train_uses": used, "environment": env.to_record(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
