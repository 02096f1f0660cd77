"""Self-distil and train an EAGLE head on a GPU, inside a fixed wall-clock budget.

The bundled head's GPU stages were made with it (its card records the arguments). It answers
the prompts itself, sized by time for a GPU that is held for minutes, not hours, then
hands the answers to the driver of `specdec train eagle` (`training.driver.train_on_samples`:
features, training with per-epoch validation, the head and its card):

1. `export` (on any machine with the ShareGPT package): the first user prompts of ShareGPT,
   chat-templated for the target, split like `specdec train` splits them (the same 64
   held-out conversations), saved as token ids in one compressed .npz.
2. `run` (on the GPU): answer the prompts greedily in large batches until `--gen-seconds`
   (batches in random order, so a cut-off drops a random subset, not the longest prompts),
   then sample answers at T=1 with what is left of that time; save the answers' token ids;
   take the target's features in one forward per sequence; continue the bundled head on them
   until `--total-seconds` (the schedule decays over the time left, at most `--max-epochs`,
   rather than from an up-front probe: the first epoch in a process runs several times slower
   than later ones); save the head and card.
   `--answers` skips generation and trains on an earlier run's saved answers; `--arch eagle3`
   trains a fresh EAGLE-3-layout head (`--init ''`) instead of continuing the EAGLE-1 one;
   `--layers N` grows the continued head by identity-initialised decoder layers. Several runs
   with their own `--out` and `--work` can share one GPU (epoch times: docs/eagle.md).
3. `smoke`: the same stages on a random model of the target's shape, a few batches each, to
   time generation and catch device problems before a real run.

    python scripts/gpu_distill.py export --out .xfer/prompts.npz
    python scripts/gpu_distill.py run --target model.gguf --prompts prompts.npz --out OUT
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec_core.eagle import data as datasets  # noqa: E402
from specdec_core.errors import SpecdecError  # noqa: E402
from specdec_core.training.data_sources import HOLDOUT, Collected, trimmed  # noqa: E402
from specdec_core.training.driver import train_on_samples  # noqa: E402
from specdec_core.training.layout import resolve_layout  # noqa: E402
from specdec_core.training.request import TrainRequest  # noqa: E402

START = time.monotonic()


def log(message: str) -> None:
    print(f"[{time.monotonic() - START:6.1f}s] {message}", file=sys.stderr, flush=True)


def pack(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    flat = np.fromiter((t for ids in lists for t in ids), dtype=np.uint16)
    return flat, np.cumsum([0] + [len(ids) for ids in lists]).astype(np.int64)


def unpack(flat: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    bounds = zip(offsets[:-1], offsets[1:], strict=True)
    return [flat[a:b].astype(np.int64).tolist() for a, b in bounds]


def export(args) -> None:
    from specdec_core.models import load_model

    target = load_model(args.target, "cpu", "float32")
    tok = target.tokenizer
    conversations = list(datasets.iter_sharegpt())
    rest, held = datasets.split_conversations(len(conversations), HOLDOUT, args.seed)
    train_prompts = [datasets.first_prompt(tok, conversations[i], args.max_prompt) for i in rest]
    held_prompts = [datasets.first_prompt(tok, conversations[i], 256) for i in held]
    train_prompts = [p for p in train_prompts if p]
    held_prompts = [p for p in held_prompts if p]
    tf, to = pack(train_prompts)
    hf, ho = pack(held_prompts)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, train=tf, train_offsets=to, held=hf, held_offsets=ho)
    log(f"{len(train_prompts)} prompts ({len(tf)} tokens), {len(held_prompts)} held out")


def length_groups(prompts, batch: int, batch_tokens: int, max_new: int) -> list[list[int]]:
    """Length-sorted groups of at most `batch` prompts and `batch_tokens` padded tokens."""
    groups, group = [], []
    for i in sorted(range(len(prompts)), key=lambda i: len(prompts[i])):
        if group and (
            len(group) >= batch or (len(group) + 1) * (len(prompts[i]) + max_new) > batch_tokens
        ):
            groups.append(group)
            group = []
        group.append(i)
    return groups + [group] if group else groups


def answer(model, tok, prompts, args, deadline, spent, temperature, seed, work, label):
    """Answers to `prompts` batch by batch (length-sorted batches in random order) while the
    slowest batch so far (`spent`, seconds, shared between calls) still fits before `deadline`."""
    groups = length_groups(prompts, args.batch, args.gen_batch_tokens, args.max_new)
    random.Random(seed).shuffle(groups)
    samples = []
    for n, group in enumerate(groups):
        left = deadline - time.monotonic()
        if left <= 0 or (spent and left < 1.1 * max(spent)):
            break
        began = time.monotonic()
        samples += datasets.generate_answers(
            model,
            tok,
            [prompts[i] for i in group],
            args.max_new,
            len(group),
            work / f"{label}-{n:04d}",
            keep_features=False,
            temperature=temperature,
        )
        spent.append(time.monotonic() - began)
        made = sum(len(s.ids) - s.start for s in samples)
        log(f"{label} batch {n + 1}/{len(groups)}: {spent[-1]:.1f}s, {made} answer tokens")
    return samples


def run(args) -> None:
    from specdec_core.models import load_model

    if not Path(args.prompts).is_file():  # before minutes of model loading
        raise SpecdecError(f"{args.prompts} not found; make it with: gpu_distill.py export")
    out = Path(args.out)
    work = Path(args.work + ("-smoke" if args.smoke else ""))  # never mix smoke shards in
    request = TrainRequest(  # checked here, before the model loads
        "eagle", out=str(out / "head"), target=args.target, epochs=args.max_epochs,
        init=args.init or None, arch=args.arch, layers=args.layers,
        draft_vocab=args.draft_vocab, max_len=args.max_len, batch_tokens=args.batch_tokens,
        lr=args.lr, unroll=args.unroll, ce_weight=args.ce_weight, seed=args.seed,
        val_prompts=0, device=args.device,
        command="python scripts/gpu_distill.py " + " ".join(sys.argv[1:]),
        # features stay in memory; checkpoints only after each epoch, apart from the head
        save_every=10**9, checkpoints=str(work / "train"), cache_features=False,
        feature_batch_tokens=args.feature_batch_tokens,
    )  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    target = smoke_target(args) if args.smoke else load_model(args.target, args.device, "bfloat16")
    model, tok = target.model, target.tokenizer
    log(f"target on {model.device}, {model.dtype}")
    layout = resolve_layout(request, target)  # a misfit --init is refused before generating
    saved = np.load(args.prompts)
    prompts = unpack(saved["train"], saved["train_offsets"])
    held_prompts = unpack(saved["held"], saved["held_offsets"])
    if args.smoke:
        prompts = prompts[: 3 * args.batch]
    report = {"args": vars(args), "stages": {}}

    began = time.monotonic()
    deadline, spent = began + args.gen_seconds, []
    held = datasets.generate_answers(
        model, tok, held_prompts[:32], args.max_new, 32, work / "held", keep_features=False
    )
    if args.answers:  # answered by an earlier run: train on those
        greedy = datasets.load_answers(args.answers)[: 3 * args.batch if args.smoke else None]
        sampled = []
    else:
        greedy = answer(model, tok, prompts, args, deadline, spent, 0.0, args.seed, work, "greedy")
        sampled = answer(
            model, tok, prompts, args, deadline, spent, 1.0, args.seed + 1, work, "sampled"
        )
    report["stages"]["generate"] = {
        "seconds": round(time.monotonic() - began, 1),
        "greedy_answers": len(greedy),
        "sampled_answers": len(sampled),
        "answer_tokens": sum(len(s.ids) - s.start for s in greedy + sampled),
        "tokens": sum(len(s.ids) for s in greedy + sampled),
    }
    log(json.dumps(report["stages"]["generate"]))
    if not args.answers:
        datasets.save_answers(greedy, out / "greedy_ids.npz")
    if sampled:
        datasets.save_answers(sampled, out / "sampled_ids.npz")

    source = (
        f"self (answers from {args.answers})"
        if args.answers
        else "self (GPU: greedy + T=1 answers to ShareGPT first prompts)"
    )
    samples = Collected(source, trimmed(greedy + sampled, args.max_len), held, held_prompts)
    left = args.total_seconds - (time.monotonic() - START) - args.reserve_seconds
    card = train_on_samples(
        replace(request, seconds=left),
        target,
        [samples],
        layout=layout,
        stages=report["stages"],
        card_extra={"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"},
    )
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    log(f"saved {out / 'head'}: {json.dumps(card['validation'] or {})}")


def smoke_target(args):
    """A random model of SmolLM2-135M's shape (timing and device checks; no weights needed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from specdec_core.models import LoadedModel

    config = LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
        rope_theta=100000.0, tie_word_embeddings=True, eos_token_id=2, pad_token_id=2,
    )  # fmt: skip
    model = LlamaForCausalLM(config).to(args.device, torch.bfloat16).eval()
    model.generation_config.eos_token_id = 2

    class Tok:
        pad_token_id = 2
        eos_token_id = 2

    device = torch.device(args.device)
    return LoadedModel(model, Tok(), "smoke", "random", device, torch.bfloat16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    ex = sub.add_parser("export")
    ex.add_argument("--target", default="embedded")
    ex.add_argument("--out", required=True)
    ex.add_argument("--max-prompt", type=int, default=1024)
    ex.add_argument("--seed", type=int, default=0)
    for name in ("run", "smoke"):
        p = sub.add_parser(name)
        p.add_argument("--target", default="embedded")
        p.add_argument("--prompts", required=True)
        p.add_argument("--out", required=True)
        p.add_argument("--work", default="/tmp/gpu_distill")
        p.add_argument("--init", default="resources/head", help="head to continue; '' = fresh")
        p.add_argument("--draft-vocab", type=int, default=8192, help="fresh head only")
        p.add_argument("--device", default="cuda")
        p.add_argument("--batch", type=int, default=1024)
        p.add_argument("--gen-batch-tokens", type=int, default=600_000)
        p.add_argument("--max-new", type=int, default=384)
        p.add_argument("--max-len", type=int, default=1536)
        p.add_argument("--gen-seconds", type=float, default=240)
        p.add_argument("--total-seconds", type=float, default=520)
        p.add_argument("--reserve-seconds", type=float, default=25)
        p.add_argument("--max-epochs", type=int, default=6)
        p.add_argument("--batch-tokens", type=int, default=32768)
        p.add_argument("--feature-batch-tokens", type=int, default=131072)
        p.add_argument("--lr", type=float, default=5e-4)
        p.add_argument("--unroll", type=int, default=2)
        p.add_argument("--arch", choices=["eagle1", "eagle3"], default=None)
        p.add_argument("--ce-weight", type=float, default=None, help="default 0.1; eagle3 1")
        p.add_argument("--layers", type=int, default=None, help="eagle1 decoder layers")
        p.add_argument("--answers", default="", help="earlier run's greedy_ids.npz")
        p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        if args.mode == "export":
            export(args)
        else:
            args.smoke = args.mode == "smoke"
            if args.smoke:
                args.init = ""  # a random target: nothing to continue
            run(args)
    except SpecdecError as exc:
        sys.exit(f"gpu_distill: {exc}")


if __name__ == "__main__":
    main()
