"""Self-distil and train an EAGLE head inside a fixed wall-clock budget (a GPU held for minutes).

`scripts/gpu_distill.py` is the command line over this module; the bundled head's GPU stages
were made with it (its card records the arguments). It answers the prompts itself, sized by
time for a GPU that is held for minutes, not hours, then hands the answers to the driver of
`specdec train eagle` (`driver.train_on_samples`: training on the target's features computed
batch by batch, per-epoch validation, the head and its card):

1. `export_prompts` (on any machine with the ShareGPT package): the first user prompts of
   ShareGPT, chat-templated for the target, split like `specdec train` splits them (the same
   64 held-out conversations), saved as token ids in one compressed .npz.
2. `run` (on the GPU): answer the prompts greedily in large batches until `gen_seconds`
   (batches in random order, so a cut-off drops a random subset, not the longest prompts),
   then sample answers at T=1 with what is left of that time; save the answers' token ids;
   continue the bundled head on them (the target's features computed as each batch needs
   them) until `total_seconds` less `reserve_seconds`, one budget from the start that
   generation and training share (driver.py; the schedule decays over the time left, at most
   `max_epochs`, rather than over an epoch count fixed up front: the first epoch in a process
   runs several times slower than later ones); save the head and card, and `report.json` (the
   settings and the stages).
   `answers` skips generation and trains on an earlier run's saved answers; `arch="eagle3"`
   trains a fresh EAGLE-3-layout head (`init=""`) instead of continuing the EAGLE-1 one;
   `layers` grows the continued head by identity-initialised decoder layers. Several runs
   with their own `out` and `work` can share one GPU (epoch times: docs/eagle.md).
3. `smoke`: the same stages on a random model of the target's shape, a few batches each, to
   time generation and catch device problems before a real run.

Answers are `training/datasets.answer_prompts`' shards under `work` (WORK/greedy, WORK/sampled,
WORK/held), so a rerun with the same prompts and settings reads what an earlier one generated.
Folders of one batch each (WORK/greedy-NNNN), as earlier versions cached them, are not read:
those answers are generated again.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from specdec_core.errors import SpecdecError
from specdec_core.models.loading import LoadedModel
from specdec_core.training import datasets
from specdec_core.training.card import ModelCard
from specdec_core.training.data_sources import HOLDOUT, Collected, trimmed
from specdec_core.training.datasets import Sample, pack, unpack
from specdec_core.training.driver import train_on_samples
from specdec_core.training.layout import resolve_layout
from specdec_core.training.request import TrainRequest
from specdec_core.training.time_budget import Budget


@dataclass(frozen=True, kw_only=True)
class ExportSettings:
    """`gpu_distill.py export`: ShareGPT's first prompts for `target`, as token ids in `out`."""

    target: str = "embedded"
    out: str
    max_prompt: int = 1024  # longest training prompt in tokens (held-out prompts: 256)
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class DistillSettings:
    """`gpu_distill.py run` (or `smoke`): every setting of a timed run, in the order report.json
    records them."""

    target: str = "embedded"
    prompts: str  # the .npz `export_prompts` wrote
    out: str  # OUT/head (the head and its card), the answers, report.json
    work: str = "/tmp/gpu_distill"  # generated shards and the training checkpoint
    init: str = "resources/head"  # head to continue; "" = a fresh head
    draft_vocab: int = 8192  # a fresh head only
    device: str = "cuda"
    batch: int = 1024  # prompts per generation batch
    gen_batch_tokens: int = 600_000  # padded tokens per generation batch (answers included)
    max_new: int = 384
    max_len: int = 1536
    gen_seconds: float = 240
    total_seconds: float = 520
    reserve_seconds: float = 25  # kept at the end of the budget for saving
    max_epochs: int = 6
    batch_tokens: int = 32768
    lr: float = 5e-4
    unroll: int = 2
    arch: str | None = None  # eagle1 | eagle3
    ce_weight: float | None = None  # default 0.1; eagle3 1
    layers: int | None = None  # eagle1 decoder layers
    answers: str = ""  # an earlier run's greedy_ids.npz: train on it, generate nothing
    val_kinds: int = 3  # held-out prompts per kind for the card's table by kind (0 = none)
    seed: int = 0
    smoke: bool = False  # a random target of SmolLM2-135M's shape, a few batches

    @property
    def work_dir(self) -> Path:
        """`work`, or `work`-smoke for a smoke run (its shards never mix with a real run's)."""
        return Path(self.work + ("-smoke" if self.smoke else ""))


class Log:
    """Progress lines on stderr with the seconds since `started` (time.monotonic())."""

    def __init__(self, started: float | None = None) -> None:
        self.started = time.monotonic() if started is None else started

    def __call__(self, message: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.1f}s] {message}", file=sys.stderr, flush=True)


def export_prompts(settings: ExportSettings, log: Log | None = None) -> None:
    """ShareGPT's first user prompts for the target, split as `specdec train` splits them."""
    from specdec_core.models.loading import load_model

    log = log or Log()
    target = load_model(settings.target, "cpu", "float32")
    tok = target.tokenizer
    conversations = list(datasets.iter_sharegpt())
    rest, held = datasets.split_conversations(len(conversations), HOLDOUT, settings.seed)
    first = datasets.first_prompt
    train_prompts = [first(tok, conversations[i], settings.max_prompt) for i in rest]
    held_prompts = [first(tok, conversations[i], 256) for i in held]
    train_prompts = [p for p in train_prompts if p]
    held_prompts = [p for p in held_prompts if p]
    tf, to = pack(train_prompts)
    hf, ho = pack(held_prompts)
    Path(settings.out).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(settings.out, train=tf, train_offsets=to, held=hf, held_offsets=ho)
    log(f"{len(train_prompts)} prompts ({len(tf)} tokens), {len(held_prompts)} held out")


def train_request(settings: DistillSettings, command: str) -> TrainRequest:
    """The `specdec train eagle` request of a timed run (checked when made: before the model
    loads). Checkpoints only after each epoch, apart from the head."""
    return TrainRequest(
        "eagle", out=str(Path(settings.out) / "head"), target=settings.target,
        epochs=settings.max_epochs, init=settings.init or None, arch=settings.arch,
        layers=settings.layers, draft_vocab=settings.draft_vocab, max_len=settings.max_len,
        batch_tokens=settings.batch_tokens, lr=settings.lr, unroll=settings.unroll,
        ce_weight=settings.ce_weight, seed=settings.seed, val_prompts=0,
        val_kinds=settings.val_kinds,
        device=settings.device, command=command, save_every=10**9,
        checkpoints=str(settings.work_dir / "train"),
    )  # fmt: skip


def run(settings: DistillSettings, command: str, log: Log | None = None) -> ModelCard:
    """Answer, train and save within the settings' time budget (module docstring); -> the
    head's card. `command`: the command line the card records; `log`: progress lines, whose
    clock also starts the budget (`total_seconds`)."""
    from specdec_core.models.loading import load_model

    log = log or Log()
    if settings.smoke:
        settings = replace(settings, init="")  # a random target: nothing to continue
    if not Path(settings.prompts).is_file():  # before minutes of model loading
        raise SpecdecError(f"{settings.prompts} not found; make it with: gpu_distill.py export")
    out = Path(settings.out)
    request = train_request(settings, command)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(settings.seed)
    if settings.smoke:
        target = smoke_target(settings.device)
    else:
        target = load_model(settings.target, settings.device, "bfloat16")
    log(f"target on {target.model.device}, {target.model.dtype}")
    layout = resolve_layout(request, target)  # a misfit --init is refused before generating
    saved = np.load(settings.prompts)
    prompts = unpack(saved["train"], saved["train_offsets"])
    held_prompts = unpack(saved["held"], saved["held_offsets"])
    if settings.smoke:
        prompts = prompts[: 3 * settings.batch]
    report = {"args": {"mode": "smoke" if settings.smoke else "run", **asdict(settings)}}
    report["stages"] = {}
    greedy, sampled, held = _answers(target, settings, prompts, held_prompts, report, log)
    source = (
        f"self (answers from {settings.answers})"
        if settings.answers
        else "self (GPU: greedy + T=1 answers to ShareGPT first prompts)"
    )
    samples = Collected(source, trimmed(greedy + sampled, settings.max_len), held, held_prompts)
    # one budget from the log's start: generation above, then training, saving
    seconds = settings.total_seconds - settings.reserve_seconds
    budget = Budget(seconds, started=log.started)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    card = train_on_samples(
        replace(request, seconds=seconds),
        target,
        [samples],
        layout=layout,
        stages=report["stages"],
        device=device,
        budget=budget,
    )
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    validation = card.validation.to_record() if card.validation else {}
    log(f"saved {out / 'head'}: {json.dumps(validation)}")
    return card


def _answers(
    target: LoadedModel,
    settings: DistillSettings,
    prompts: list[list[int]],
    held_prompts: list[list[int]],
    report: dict,
    log: Log,
) -> tuple[list[Sample], list[Sample], list[Sample]]:
    """-> (greedy answers, sampled answers, held-out answers), saved under `out` as .npz and
    recorded in `report`'s generate stage; with `settings.answers`, the greedy ones are those."""
    out, work = Path(settings.out), settings.work_dir
    began = time.monotonic()
    deadline = datasets.Deadline(began + settings.gen_seconds)  # greedy and sampled share it
    model, tok = target.model, target.tokenizer

    def timed(temperature: float, seed: int, label: str) -> list[Sample]:
        """Answers to `prompts` in like-length calls taken in random order (`seed`) while
        `deadline` allows, cached under WORK/LABEL."""
        return datasets.generate_answers(
            model, tok, prompts, settings.max_new, settings.batch, work / label,
            padded=settings.gen_batch_tokens, shuffle=seed, deadline=deadline,
            temperature=temperature,
            progress=lambda done: log(
                f"{label} batch {done.number}/{done.calls}: {done.seconds:.1f}s, "
                f"{done.answer_tokens} answer tokens"
            ),
        )  # fmt: skip

    held = datasets.generate_answers(
        model, tok, held_prompts[:32], settings.max_new, 32, work / "held"
    )
    if settings.answers:  # answered by an earlier run: train on those
        greedy = datasets.load_answers(settings.answers)
        greedy = greedy[: 3 * settings.batch if settings.smoke else None]
        sampled = []
    else:
        greedy = timed(0.0, settings.seed, "greedy")
        sampled = timed(1.0, settings.seed + 1, "sampled")
    report["stages"]["generate"] = {
        "seconds": round(time.monotonic() - began, 1),
        "greedy_answers": len(greedy),
        "sampled_answers": len(sampled),
        "answer_tokens": sum(len(s.ids) - s.start for s in greedy + sampled),
        "tokens": sum(len(s.ids) for s in greedy + sampled),
    }
    log(json.dumps(report["stages"]["generate"]))
    if not settings.answers:
        datasets.save_answers(greedy, out / "greedy_ids.npz")
    if sampled:
        datasets.save_answers(sampled, out / "sampled_ids.npz")
    return greedy, sampled, held


def smoke_target(device: str) -> LoadedModel:
    """A random model of SmolLM2-135M's shape (timing and device checks; no weights needed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
        rope_theta=100000.0, tie_word_embeddings=True, eos_token_id=2, pad_token_id=2,
    )  # fmt: skip
    model = LlamaForCausalLM(config).to(device, torch.bfloat16).eval()
    model.generation_config.eos_token_id = 2
    return LoadedModel(model, SmokeTokenizer(), "smoke", "random", torch.device(device),
                       torch.bfloat16)  # fmt: skip


class SmokeTokenizer:
    """What generation reads of a tokenizer: the pad and end-of-sequence ids."""

    pad_token_id = 2
    eos_token_id = 2
