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
data_sources.py (cached under --work), the target's features are computed batch by batch as
training needs them (online_features.py: no feature files), batches, the schedule and the
resumable checkpoint from common_training.py, the held-out split and the table by kind from
validation.py, the card from card.py. Each epoch ends with teacher-forced top-1 per stage on
the held-out samples and tau of greedy decoding on held-out prompts, and saves the speculator
so far. `--seconds` is one time budget for the whole run, as `specdec train eagle`'s
(time_budget.py): a probe refuses at once a budget that cannot cover the features and
training of one batch; training takes what is left.

Start: a fresh speculator as wide as the target (inner_dim 0) starts from the target, as
Medusa's heads do (`MLPSpeculator.start_from_target`: every stage's embedding, head and norm
the target's, each projection passing the state through), and its vocabulary-sized tables
(embedding, head) are then frozen: only the projections and norms train, and the head's cost
in a step is its matmul for the activations only. `--train-vocab-tables` trains them too. An
--init speculator whose tables are still the target's keeps them frozen the same way. Any
other width starts from fms-extras' random initialisation, its tables trained. The checkpoint
holds only the trained weights (frozen tables are the target's, rebuilt by a resumed run).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from specdec_core.errors import SpecdecError
from specdec_core.heads.mlp_speculator.formats import check_fits, read_speculator, save_speculator
from specdec_core.heads.mlp_speculator.head import MLPSpeculator, SpeculatorConfig
from specdec_core.models.loading import LoadedModel
from specdec_core.training.card import ModelCard, Validation
from specdec_core.training.common_request import TrainingData
from specdec_core.training.common_training import EpochTraining
from specdec_core.training.data_sources import Collected
from specdec_core.training.online_features import FeatureBatch, target_features
from specdec_core.training.time_budget import Budget, Probe, fastest, probe_sample, reserve
from specdec_core.training.train_config import TrainConfig
from specdec_core.training.training_set import collect_samples, log, run_card
from specdec_core.training.validation import by_kind_table, decoded_tau, held_features

TRAINS = "mlp-speculator"  # the card's kind
CHUNK_ROWS = 512  # rows of one recomputed cross-entropy chunk
FROM_TARGET = "from the target's embedding and head"
RANDOM = "random"


@dataclass(frozen=True, kw_only=True)
class SpeculatorRequest(TrainingData):
    """What to train and how; the defaults are `specdec train mlp-speculator`'s. Speculator
    settings left None take the --init speculator's, or for a fresh one fms-extras' defaults
    (3 stages, inner_dim 0 = the target's width, untied, unscaled input). `train_vocab_tables`:
    train the embeddings and heads even when they are the target's (frozen otherwise)."""

    n_predict: int | None = None
    inner_dim: int | None = None
    tie_weights: bool | None = None
    scale_input: bool | None = None
    train_vocab_tables: bool = False
    init: str | None = None  # a trained speculator to continue
    batch_tokens: int = 2048
    warmup: int = 50
    save_dtype: str = "bfloat16"  # the saved weights' dtype

    def __post_init__(self) -> None:
        self.check_training_data()
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
        if self.epochs < 1:
            raise SpecdecError(f"--epochs {self.epochs}: give 1 or more")
        if self.val_prompts < 0:
            raise SpecdecError(f"--val-prompts {self.val_prompts}: give 0 (none) or more")
        if self.save_dtype not in ("float32", "bfloat16", "float16"):
            raise SpecdecError(f"--save-dtype {self.save_dtype}: use float32, bfloat16 or float16")

    def train_config(self, n_predict: int) -> TrainConfig:
        """The loop's settings as the card records them (the full vocabulary, no noise)."""
        return TrainConfig(
            trains=TRAINS, epochs=self.epochs, lr=self.lr, warmup=self.warmup,
            batch_tokens=self.batch_tokens, draft_vocab=0, noise=0.0, ce_weight=1.0,
            unroll=n_predict, arch="mlp_speculator", seed=self.seed, save_every=self.save_every,
            seconds=self.seconds or 0.0,
        )  # fmt: skip


def starts_from_target(request: SpeculatorRequest, hidden: int) -> bool:
    """Whether a fresh speculator starts from the target: no --init, and its stages as wide
    as the target's hidden size `hidden`."""
    return request.init is None and (request.inner_dim or 0) in (0, hidden)


def starting_speculator(request: SpeculatorRequest, target: LoadedModel) -> MLPSpeculator:
    """The --init speculator in float32 (checked against the target); or a fresh one, from the
    target's embedding, output head and final norm when as wide as the target
    (`starts_from_target`), else with fms-extras' initialisation, seeded."""
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
    if starts_from_target(request, hidden):
        model = target.model
        speculator.start_from_target(
            model.get_input_embeddings().weight,
            model.get_output_embeddings().weight,
            model.model.norm.weight,  # the decoder's final norm (Llama layout)
        )
    else:
        speculator.reset_parameters(torch.Generator().manual_seed(request.seed))
    return speculator


def tables_are_targets(speculator: MLPSpeculator, target: LoadedModel) -> bool:
    """Whether every stage's embedding is the target's input embedding and every head its
    output head (compared in bfloat16, so a speculator saved in bfloat16 still counts)."""
    model = target.model
    if speculator.config.width != model.config.hidden_size:
        return False
    pairs = [(m.weight, model.get_input_embeddings().weight) for m in speculator.emb]
    pairs += [(m.weight, model.get_output_embeddings().weight) for m in speculator.head]
    return all(
        torch.equal(
            mine.detach().to(torch.bfloat16), theirs.detach().to(mine.device, torch.bfloat16)
        )
        for mine, theirs in pairs
    )


class _Trained(torch.nn.Module):
    """The trained part of a speculator whose vocabulary tables are frozen: its projections and
    norms, under the speculator's own names (what the checkpoint holds)."""

    def __init__(self, speculator: MLPSpeculator) -> None:
        super().__init__()
        self.proj, self.ln = speculator.proj, speculator.ln


def _refuse_other_tables(out: Path, frozen: bool) -> None:
    """Refuse to resume OUT/checkpoint.pt of a run that treated the vocabulary tables the other
    way (its optimiser holds other parameters)."""
    path = out / "checkpoint.pt"
    if not path.is_file():
        return
    saved = torch.load(path, weights_only=True, map_location="cpu", mmap=True)["model"]
    trained = any(key.startswith(("emb.", "head.")) for key in saved)
    if trained == frozen:
        flag = "with" if trained else "without"
        raise SpecdecError(
            f"{path} is from a run that {'trained' if trained else 'froze'} the vocabulary "
            f"tables, so it cannot resume this one; rerun {flag} --train-vocab-tables, or use "
            "a new --out"
        )


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
def teacher_forced_top1(speculator: MLPSpeculator, data: list[FeatureBatch]) -> list[float]:
    """Per stage, the share of counted held-out positions where its argmax is the true token."""
    n = speculator.n_predict
    hits, totals = [0] * n, [0] * n
    device = speculator.proj[0].weight.device
    for batch in data:
        ids, mask = batch.ids.to(device), batch.loss_mask.to(device)
        hidden = batch.hidden.to(device)
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
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.drafters.mlp_speculator import MLPSpeculatorDrafter

    config = DecodeConfig(max_new_tokens=max_new_tokens, k=speculator.n_predict)
    return round(decoded_tau(target, MLPSpeculatorDrafter(speculator), prompts, config), 3)


def _probe(
    request: SpeculatorRequest, target: LoadedModel, speculator: MLPSpeculator, samples
) -> Probe:
    """Time the features and a training step's forward and backward (no update) on the first
    samples (`time_budget.probe_sample`); the random state is left as it was."""
    taken = probe_sample(samples, request.batch_tokens)
    rows = [(s.ids, s.start) for s in taken]
    made: list[FeatureBatch] = []
    features = fastest(lambda: made.append(target_features(target, rows)))
    ids, hidden, mask = made[-1].ids, made[-1].hidden, made[-1].loss_mask

    def step() -> None:
        (sum(stage_losses(speculator, ids, hidden, mask)) / speculator.n_predict).backward()

    with torch.random.fork_rng(devices=[]):
        training = fastest(step)
    speculator.zero_grad(set_to_none=True)
    tokens = max(1, sum(len(s.ids) for s in taken))
    return Probe(features / tokens, training / tokens)


def train_speculator(request: SpeculatorRequest) -> ModelCard:
    """`specdec train mlp-speculator`: load the target, collect the data, train, save; -> the
    card. A time budget counts from here."""
    budget = Budget(request.seconds)
    started = time.time()
    target = request.load_target()
    speculator = starting_speculator(request, target)  # a misfit --init is refused here
    return train_on_sources(request, target, request.collected(target), speculator, started, budget)


def train_on_sources(
    request: SpeculatorRequest,
    target: LoadedModel,
    sources: Iterable[Collected],
    speculator: MLPSpeculator | None = None,
    started: float | None = None,
    budget: Budget | None = None,
) -> ModelCard:
    """Train `speculator` (default: `starting_speculator`) on `sources` and save it with its
    card in `request.out`; -> the card. With `request.seconds`, the whole run ends by that
    much time after this call, or by `budget` (the caller's, started earlier)."""
    started = started or time.time()
    budget = budget or Budget(request.seconds)
    target.model.requires_grad_(False)
    speculator = (speculator or starting_speculator(request, target)).to(target.device).float()
    frozen = not request.train_vocab_tables and tables_are_targets(speculator, target)
    speculator.requires_grad_(True)
    for table in speculator.vocab_tables() if frozen else ():
        table.requires_grad_(False)
    hidden = target.model.config.hidden_size
    if request.init is not None:
        start = f"continued from {request.init}"
    else:
        start = FROM_TARGET if starts_from_target(request, hidden) else RANDOM
    tables = "frozen (the target's)" if frozen else "trained"
    log(f"MLP speculator: starts {start}; vocabulary tables {tables}")
    out = Path(request.out)
    data = collect_samples(
        sources, request.data, budget, request.batch_tokens,
        lambda samples, _: _probe(request, target, speculator, samples),
    )  # fmt: skip
    if not len(data.train):
        raise SpecdecError("no training data; check --data and --tokens (or give more --seconds)")
    config = request.train_config(speculator.n_predict)
    if budget.seconds is not None:
        config.seconds = max(1.0, budget.left() - reserve(budget))
        log(f"training for at most {config.seconds:.0f}s; {budget.words()}")
    size = sum(p.numel() for p in speculator.parameters() if p.requires_grad)
    log(f"MLP speculator: {size / 1e6:.1f}M trained parameters")
    out.mkdir(parents=True, exist_ok=True)
    _refuse_other_tables(out, frozen)

    by_stage: list[float] = []
    held = held_features(target, data.held)

    def validate(model: MLPSpeculator) -> Validation:
        model.eval()
        by_stage[:] = teacher_forced_top1(model, held) if held else []
        tau = None
        if data.held_prompts and request.val_prompts:
            tau = greedy_tau(model, target, data.held_prompts[: request.val_prompts])
        model.train()
        result = Validation(by_stage[0] if by_stage else None, tau)
        partial = ModelCard(kind=TRAINS, partial=result)
        save_speculator(model, out, partial.to_record(), _dtype(request.save_dtype))
        return result

    history = SpeculatorTraining(speculator, target, data.train, (), config, out, validate).run()
    speculator.eval()
    by_kind = None
    if request.val_kinds:

        def measure(prompts: list[list[int]], featured: list[FeatureBatch]) -> Validation:
            top1 = teacher_forced_top1(speculator, featured)[0]
            return Validation(top1, greedy_tau(speculator, target, prompts))

        by_kind = by_kind_table(target, request.work_dir, request.val_kinds, (), measure)
    card = run_card(
        request, TRAINS, data, history, started, target,
        arch="mlp_speculator",
        draft_vocab=speculator.config.vocab_size,
        init=request.init,
        layers=speculator.n_predict,
        train_config=config,
        validation_by_kind=by_kind,
        extra={
            "speculator": speculator.config.to_json(),
            "teacher_forced_top1_by_stage": list(by_stage),
            "start": start,
            "vocab_tables": tables,
            "saved_dtype": request.save_dtype,
        },
    )  # fmt: skip
    save_speculator(speculator, out, card.to_record(), _dtype(request.save_dtype))
    log(f"saved the MLP speculator to {out}")
    return card


def _dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


class SpeculatorTraining(EpochTraining):
    """An MLP speculator's epochs (common_training.EpochTraining) on the mean of its stages'
    losses (`stage_losses`)."""

    kind = TRAINS
    clip = 1.0

    @property
    def saved(self) -> torch.nn.Module:
        """The speculator, or only its projections and norms when its tables are frozen."""
        model = self.model
        return model if model.emb[0].weight.requires_grad else _Trained(model)

    def batch_loss(self, batch: FeatureBatch) -> tuple[torch.Tensor, str]:
        device = self.model.proj[0].weight.device
        ids, mask = batch.ids.to(device), batch.loss_mask.to(device)
        losses = stage_losses(self.model, ids, batch.hidden.to(device), mask)
        shown = "/".join(f"{float(loss.detach()):.2f}" for loss in losses)
        return sum(losses) / len(losses), f"ce by stage {shown}"
