"""`specdec train mlp-speculator`: an MLP speculator (specdec_core/mlp_speculator) trained on the
target's own hidden states and tokens, saved as vLLM loads it.

Objective (teacher forcing, fms-extras' first stage): at every position t of a sample, the
chain starts from the target's final-norm hidden state h_t; stage i stands on the true token
x_{t+1+i} and predicts x_{t+2+i}, its loss the cross-entropy against that token, counted where
x_{t+2+i} is an answer token (position >= the sample's start). The loss is the mean over the
stages. On the target's own answers (`--data self`, magpie, a `specdec data` job) the true
tokens are the target's greedy tokens, so teacher forcing trains on exactly the chains that
drafting meets when its drafts are right (fms-extras' second stage, training on the base
model's own outputs, is what self-distilled data gives here). Each stage's cross-entropy is
computed in chunks of rows that are recomputed in the backward pass, so a full-vocabulary head
never holds a batch's logits at once.

The pipeline is `specdec train`'s: the target loads once, `--data` sources are collected by
data_sources.py (cached under --work), features come from features.py (shards reused by a
rerun), batches, the schedule and the resumable checkpoint from loop.py, the held-out split and
the table by kind from validation.py, the card from card.py. Each epoch ends with teacher-forced
top-1 per stage on the held-out samples and tau of greedy decoding on held-out prompts, and
saves the speculator so far.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from tqdm import tqdm

from specdec_core.environment import current_environment
from specdec_core.errors import SpecdecError
from specdec_core.mlp_speculator.formats import check_fits, read_speculator, save_speculator
from specdec_core.mlp_speculator.head import MLPSpeculator, SpeculatorConfig
from specdec_core.models import LoadedModel, load_model
from specdec_core.training.card import EpochRecord, ModelCard, Validation, trained_epochs
from specdec_core.training.data_sources import Collected, check_source, collect
from specdec_core.training.features import Featured, extract_features, feature_shards
from specdec_core.training.loop import Checkpoint, Schedule, batches
from specdec_core.training.magpie import evaluation_prompts, prompt_files
from specdec_core.training.objective import collate
from specdec_core.training.train_config import TrainConfig

TRAINS = "mlp-speculator"  # the card's kind
CHUNK_ROWS = 512  # rows of one recomputed cross-entropy chunk


@dataclass(frozen=True)
class SpeculatorRequest:
    """What to train and how; the defaults are `specdec train mlp-speculator`'s. Speculator
    settings left None take the --init speculator's, or for a fresh one fms-extras' defaults
    (3 stages, inner_dim 0 = the target's width, untied, unscaled input)."""

    out: str
    target: str = "embedded"
    data: tuple[str, ...] = ("self",)
    tokens: tuple[int, ...] = (1_000_000,)  # token budget: one, or one per source
    epochs: int = 2
    n_predict: int | None = None
    inner_dim: int | None = None
    tie_weights: bool | None = None
    scale_input: bool | None = None
    init: str | None = None  # a trained speculator to continue
    work: str | None = None  # cache for data and features (default OUT/work)
    cached_only: bool = False
    max_len: int = 512
    batch_tokens: int = 2048
    lr: float = 1e-3
    warmup: int = 50
    seed: int = 0
    val_prompts: int = 4
    val_kinds: int = 3
    device: str = "cpu"
    feature_dtype: str = "bfloat16"
    save_dtype: str = "bfloat16"  # the saved weights' dtype
    seconds: float | None = None  # time budget, from the features to the end of training
    save_every: int = 100
    command: str | None = None
    exclude_prompts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.data:
            raise SpecdecError(
                "--data names no source; use sharegpt, self, self-long, magpie, FILE.jsonl, "
                "FILE.npz or a `specdec data` job folder"
            )
        for source in self.data:
            check_source(source)
        prompt_files(self.exclude_prompts)
        if len(self.tokens) not in (1, len(self.data)):
            raise SpecdecError(
                "--tokens takes one number, or one per --data source (comma-separated)"
            )
        if self.init is not None:
            given = [
                flag
                for flag, value in (
                    ("--n-predict", self.n_predict),
                    ("--inner-dim", self.inner_dim),
                    ("--tie-weights", self.tie_weights),
                    ("--scale-input", self.scale_input),
                )
                if value is not None
            ]
            if given:
                raise SpecdecError(
                    f"{', '.join(given)} shape a fresh speculator; --init continues one as it "
                    "is: drop them or --init"
                )
        if self.n_predict is not None and not 1 <= self.n_predict <= 16:
            raise SpecdecError(f"--n-predict {self.n_predict}: give 1 to 16 stages")
        if self.tie_weights and (self.n_predict or 3) < 2:
            raise SpecdecError("--tie-weights needs two or more stages (--n-predict 2 or more)")
        if self.inner_dim is not None and self.inner_dim < 0:
            raise SpecdecError(f"--inner-dim {self.inner_dim}: give 0 (the target's width) or more")
        for name, value in (("--epochs", self.epochs), ("--save-every", self.save_every)):
            if value < 1:
                raise SpecdecError(f"{name} {value}: give 1 or more")
        if self.seconds is not None and self.seconds <= 0:
            raise SpecdecError(f"--seconds {self.seconds}: give a time budget above 0")
        if self.val_kinds < 0 or self.val_prompts < 0:
            raise SpecdecError("--val-kinds and --val-prompts take 0 (none) or more")
        if self.save_dtype not in ("float32", "bfloat16", "float16"):
            raise SpecdecError(f"--save-dtype {self.save_dtype}: use float32, bfloat16 or float16")

    @property
    def budgets(self) -> tuple[int, ...]:
        return self.tokens * len(self.data) if len(self.tokens) == 1 else self.tokens

    @property
    def work_dir(self) -> Path:
        return Path(self.work) if self.work else Path(self.out) / "work"

    def train_config(self, n_predict: int) -> TrainConfig:
        """The loop's settings as the card records them (the full vocabulary, no noise)."""
        return TrainConfig(
            trains=TRAINS, epochs=self.epochs, lr=self.lr, warmup=self.warmup,
            batch_tokens=self.batch_tokens, draft_vocab=0, noise=0.0, ce_weight=1.0,
            unroll=n_predict, arch="mlp_speculator", seed=self.seed, save_every=self.save_every,
            seconds=self.seconds or 0.0,
        )  # fmt: skip


def _log(message: str) -> None:
    print(f"[train] {message}", file=sys.stderr, flush=True)


def starting_speculator(request: SpeculatorRequest, target: LoadedModel) -> MLPSpeculator:
    """The --init speculator in float32 (checked against the target), or a fresh one with
    fms-extras' initialisation, seeded."""
    hidden, vocab = target.model.config.hidden_size, target.vocab_size
    if request.init is not None:
        speculator = read_speculator(request.init)
        check_fits(speculator.config, hidden, vocab, request.init)
        return speculator.float()
    config = SpeculatorConfig(
        emb_dim=hidden,
        vocab_size=vocab,
        n_predict=request.n_predict or 3,
        inner_dim=request.inner_dim or 0,
        tie_weights=bool(request.tie_weights),
        scale_input=bool(request.scale_input),
    )
    speculator = MLPSpeculator(config)
    speculator.reset_parameters(torch.Generator().manual_seed(request.seed))
    return speculator


def stage_inputs(ids: torch.Tensor, mask: torch.Tensor, n_predict: int):
    """-> (positions T', tokens [B, T' + n - 1], targets [n, B, T'], counted [n, B, T']) for a
    batch of ids [B, T] and loss mask [B, T]: stage i at position t stands on x_{t+1+i} and
    predicts x_{t+2+i}, counted where that token is inside the mask."""
    width = ids.shape[1] - 2  # positions with a token two ahead
    padded = F.pad(ids, (0, n_predict))
    counted = F.pad(mask, (0, n_predict))
    tokens = padded[:, 1 : 1 + width + n_predict - 1]
    targets = torch.stack([padded[:, 2 + i : 2 + i + width] for i in range(n_predict)])
    kept = torch.stack([counted[:, 2 + i : 2 + i + width] for i in range(n_predict)])
    return width, tokens, targets, kept


def _chunk_loss(head: torch.nn.Module, states: torch.Tensor, targets: torch.Tensor):
    return F.cross_entropy(head(states).float(), targets, reduction="sum")


def stage_losses(
    speculator: MLPSpeculator, ids: torch.Tensor, hidden: torch.Tensor, mask: torch.Tensor
) -> list[torch.Tensor]:
    """Mean cross-entropy of each stage on a batch (ids [B, T], hidden [B, T, h], loss mask
    [B, T]); a stage with nothing counted gives 0."""
    n = speculator.n_predict
    width, tokens, targets, kept = stage_inputs(ids, mask, n)
    if width <= 0:
        return [hidden.new_zeros((), dtype=torch.float32, requires_grad=True) for _ in range(n)]
    state = speculator.first_state(hidden[:, :width].float())
    losses = []
    for stage in range(n):
        state = speculator.advance(stage, state, tokens[:, stage : stage + width])
        rows, wanted = state[kept[stage]], targets[stage][kept[stage]]
        total = rows.new_zeros((), dtype=torch.float32)
        for first in range(0, len(rows), CHUNK_ROWS):
            part = slice(first, first + CHUNK_ROWS)
            total = total + checkpoint(
                _chunk_loss, speculator.head[stage], rows[part], wanted[part], use_reentrant=False
            )
        losses.append(total / max(1, len(rows)))
    return losses


@torch.no_grad()
def teacher_forced_top1(speculator: MLPSpeculator, data: list[Featured]) -> list[float]:
    """Per stage, the share of counted held-out positions where its argmax is the true token."""
    n = speculator.n_predict
    hits, totals = [0] * n, [0] * n
    device = speculator.proj[0].weight.device
    for item in data:
        ids, hidden, mask, _ = collate([item], device)
        width, tokens, targets, kept = stage_inputs(ids, mask, n)
        if width <= 0:
            continue
        state = speculator.first_state(hidden[:, :width])
        for stage in range(n):
            state, logits = speculator.step(stage, state, tokens[:, stage : stage + width])
            chosen = logits.argmax(-1)[kept[stage]]
            hits[stage] += int((chosen == targets[stage][kept[stage]]).sum())
            totals[stage] += int(kept[stage].sum())
    return [round(h / max(1, t), 4) for h, t in zip(hits, totals, strict=True)]


@torch.no_grad()
def greedy_tau(
    speculator: MLPSpeculator, target: LoadedModel, prompts: list[list[int]], max_new_tokens=48
) -> float:
    """Mean acceptance length of greedy decoding with the speculator (k = n_predict)."""
    from specdec_core.config import DecodeConfig
    from specdec_core.decode import generate
    from specdec_core.drafters.mlp_speculator import MLPSpeculatorDrafter
    from specdec_core.events import Finished

    config = DecodeConfig(max_new_tokens=max_new_tokens, k=speculator.n_predict)
    new = steps = 0
    for prompt in prompts:
        drafter = MLPSpeculatorDrafter(speculator)
        for event in generate(target, drafter, prompt, config):
            if isinstance(event, Finished):
                new += event.summary.new_tokens
                steps += event.summary.steps
    return round(new / max(1, steps), 3)


@dataclass
class _Data:
    train: list[Featured]
    held: list[Featured]
    held_prompts: list[list[int]]
    mix: dict


def _featured(request: SpeculatorRequest, target: LoadedModel, samples, name: str):
    return extract_features(
        target.model, samples, feature_shards(request.work_dir, name),
        batch_tokens=4096,
        progress=lambda n, total, made: _log(f"features {n}/{total} sequences: {made} tokens"),
    )  # fmt: skip


def _features(request: SpeculatorRequest, target: LoadedModel, sources) -> _Data:
    """Each source's samples as features; the held-out part is the first source's that has
    any (as `specdec train`)."""
    data = _Data([], [], [], {"by_source": {}, "by_kind": {}})
    for source in sources:
        tokens = sum(len(s.ids) for s in source.samples)
        _log(f"{source.name}: {len(source.samples)} sequences, {tokens} tokens")
        counts = {"sequences": len(source.samples), "tokens": tokens}
        data.mix["by_source"][source.source] = {**counts, **source.mix}
        for kind, count in source.mix.get("kinds", {}).items():
            data.mix["by_kind"][kind] = data.mix["by_kind"].get(kind, 0) + count
        data.train += _featured(request, target, source.samples, source.name)
        if source.held and not data.held:
            data.held = _featured(request, target, source.held, "heldout")
            data.held_prompts = source.held_prompts
    return data


def train_speculator(request: SpeculatorRequest) -> ModelCard:
    """`specdec train mlp-speculator`: load the target, collect the data, train, save; -> the
    card."""
    started = time.time()
    torch.manual_seed(request.seed)
    target = load_model(request.target, request.device, request.feature_dtype)
    speculator = starting_speculator(request, target)  # a misfit --init is refused here
    exclude = evaluation_prompts(request.exclude_prompts)
    sources = (
        collect(source, target, budget, request.work_dir, request.max_len, request.seed,
                request.cached_only, exclude)
        for source, budget in zip(request.data, request.budgets, strict=True)
    )  # fmt: skip
    return train_on_sources(request, target, sources, speculator, started)


def train_on_sources(
    request: SpeculatorRequest,
    target: LoadedModel,
    sources: Iterable[Collected],
    speculator: MLPSpeculator | None = None,
    started: float | None = None,
) -> ModelCard:
    """Train `speculator` (default: `starting_speculator`) on `sources` and save it with its
    card in `request.out`; -> the card."""
    began, started = time.monotonic(), started or time.time()
    target.model.requires_grad_(False)
    speculator = (speculator or starting_speculator(request, target)).to(target.device).float()
    data = _features(request, target, sources)
    if not data.train:
        raise SpecdecError("no training data; check --data and --tokens")
    config = request.train_config(speculator.n_predict)
    if request.seconds:
        config.seconds = max(1.0, request.seconds - (time.monotonic() - began))
    size = sum(p.numel() for p in speculator.parameters())
    _log(f"MLP speculator: {size / 1e6:.1f}M trained parameters")
    out = Path(request.out)
    out.mkdir(parents=True, exist_ok=True)

    by_stage: list[float] = []

    def validate(model: MLPSpeculator) -> Validation:
        model.eval()
        by_stage[:] = teacher_forced_top1(model, data.held) if data.held else []
        tau = None
        if data.held_prompts and request.val_prompts:
            tau = greedy_tau(model, target, data.held_prompts[: request.val_prompts])
        model.train()
        result = Validation(by_stage[0] if by_stage else None, tau)
        partial = ModelCard(kind=TRAINS, partial=result)
        save_speculator(model, out, partial.to_record(), _dtype(request.save_dtype))
        return result

    history = SpeculatorTraining(speculator, data.train, config, out, validate).run()
    speculator.eval()
    by_kind = _by_kind(request, target, speculator) if request.val_kinds else None
    tokens = sum(len(item.ids) for item in data.train)
    card = ModelCard(
        kind=TRAINS,
        arch="mlp_speculator",
        target=request.target,
        command=request.command,
        data=tuple(data.mix["by_source"]),
        tokens=tokens,
        sequences=len(data.train),
        epochs=trained_epochs(history),
        seed=request.seed,
        draft_vocab=speculator.config.vocab_size,
        init=request.init,
        layers=speculator.n_predict,
        history=tuple(history),
        validation=history[-1] if history else None,
        train_seconds=round(time.time() - started),
        train_config=config,
        data_mix=data.mix,
        environment=current_environment(target.device, request.command).to_record(),
        validation_by_kind=by_kind,
        extra={
            "speculator": speculator.config.to_json(),
            "teacher_forced_top1_by_stage": list(by_stage),
            "saved_dtype": request.save_dtype,
        },
    )
    save_speculator(speculator, out, card.to_record(), _dtype(request.save_dtype))
    _log(f"saved the MLP speculator to {out}")
    return card


def _dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def _by_kind(
    request: SpeculatorRequest, target: LoadedModel, speculator: MLPSpeculator
) -> dict[str, Validation]:
    """kind -> Validation (stage 0's teacher-forced top-1, tau) on the held-out prompts of
    each kind (`validation.held_out_by_kind`)."""
    from specdec_core.training.validation import held_out_by_kind

    table = {}
    for kind, (prompts, answers) in held_out_by_kind(
        target, request.work_dir, request.val_kinds
    ).items():
        featured = _featured(request, target, answers, f"kinds-heldout-{kind}")
        top1 = teacher_forced_top1(speculator, featured)
        table[kind] = Validation(top1[0], greedy_tau(speculator, target, prompts))
    _log(f"validation by kind: { {k: v.to_record() for k, v in table.items()} }")
    return table


class SpeculatorTraining:
    """One training run: AdamW (0.9, 0.95) over shuffled length-grouped batches, loop.py's
    warm-up and cosine schedule (over the epochs or the time budget, whichever ends first),
    checkpoints in OUT/checkpoint.pt every `save_every` steps and after each epoch (a rerun
    resumes where it stopped), `validate(speculator)` after each epoch."""

    def __init__(self, speculator, data, config: TrainConfig, out: Path, validate) -> None:
        self.speculator, self.data, self.config, self.validate = speculator, data, config, validate
        self.params = list(speculator.parameters())  # a tied module's weights once
        self.optimizer = torch.optim.AdamW(
            self.params, lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0
        )
        self.generator = torch.Generator().manual_seed(config.seed)
        self.steps_per_epoch = len(batches(data, config.batch_tokens, torch.Generator()))
        self.total = max(1, self.steps_per_epoch * config.epochs)
        plan = {
            "sequences": len(data),
            "tokens": sum(len(item.ids) for item in data),
            "batch_tokens": config.batch_tokens,
        }
        self.checkpoint = Checkpoint(out, plan)
        resumed = self.checkpoint.resume(speculator, self.optimizer, self.generator)
        self.state = resumed or {"epoch": 0, "step": 0, "history": [], "plan": plan}
        self.schedule = Schedule(config, self.total, self.state.get("seconds", 0.0))

    def run(self) -> list[EpochRecord]:
        state = self.state
        while state["epoch"] < self.config.epochs and not state.get("out_of_time"):
            epoch_start = self.generator.get_state()
            order = batches(self.data, self.config.batch_tokens, self.generator)
            self._epoch(order[state["step"] - state["epoch"] * self.steps_per_epoch :], epoch_start)
            if not state.get("out_of_time"):
                state["epoch"] += 1
            self._end_epoch(self.generator.get_state())
        return [EpochRecord.from_record(record) for record in state["history"]]

    def _epoch(self, order, epoch_start: torch.Tensor) -> None:
        state, config, speculator = self.state, self.config, self.speculator
        speculator.train()
        device = speculator.proj[0].weight.device
        bar = tqdm(order, desc=f"epoch {state['epoch'] + 1}/{config.epochs}", unit="batch")
        for items in bar:
            if config.seconds and self.schedule.done(state["step"]) >= 1.0:
                state["out_of_time"] = True
                break
            for group in self.optimizer.param_groups:
                group["lr"] = self.schedule.rate(state["step"])
            ids, hidden, mask, _ = collate(items, device)
            losses = stage_losses(speculator, ids, hidden, mask)
            self.optimizer.zero_grad(set_to_none=True)
            (sum(losses) / len(losses)).backward()
            torch.nn.utils.clip_grad_norm_(self.params, 1.0)
            self.optimizer.step()
            state["step"] += 1
            state["seconds"] = self.schedule.seconds()
            bar.set_postfix(ce="/".join(f"{loss.item():.2f}" for loss in losses))
            if state["step"] % config.save_every == 0:
                self.checkpoint.save(speculator, TRAINS, self.optimizer, epoch_start, state)

    def _end_epoch(self, next_start: torch.Tensor) -> None:
        """The epoch's record (a fraction of one where the time ran out), validated and saved."""
        state = self.state
        stopped = "time" if state.get("out_of_time") else None
        epoch = round(state["step"] / self.steps_per_epoch, 2) if stopped else state["epoch"]
        validation = self.validate(self.speculator) if self.validate else Validation()
        record = EpochRecord(epoch, state["step"], time.time(), validation, stopped)
        state["history"].append(record.to_record())
        _log(f"epoch {epoch}: {record.to_record()}")
        self.checkpoint.save(self.speculator, TRAINS, self.optimizer, next_start, state)
