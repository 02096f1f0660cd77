"""`specdec train dflash`: a DFlash block drafter trained on the target's own answers.

Objective (z-lab's DFlash, SpecForge's trainer): in each training sequence, `anchors` positions
a of the answer are drawn at random. The block of anchor a is [x_a, MASK × (block − 1)] at
positions a.., seeing the target's context features of the positions before a (their fc /
hidden_norm projection, through each layer's k/v) and, without a causal mask, the whole block:
exactly what drafting sees when x_a is the pending token. Slot j predicts x_{a+j}; its loss is
the KL divergence from the target's own distribution at that position (the target's logits
over the draft vocabulary, softmaxed: distillation, not the sampled token), counted where
x_{a+j} is an answer token, weighted exp(−(j − 1)/γ) so that the early slots, which every
accepted chain passes through, count most (DFlash's decay; γ = `gamma`). All of a batch's
blocks run in one pass under one mask.

Start: the drafter's layers are as wide as the target's (its hidden size, heads, MLP), so a
fresh drafter starts its layers from the target's last `layers` decoder layers (q/k/v/o and
MLP weights; q_norm and k_norm at one), its own lm_head from the target's rows of the draft
vocabulary (the `draft_vocab` most frequent tokens of the data), fc at random; the target's
embedding is used as it is (never trained). The mask token is an id the chat never writes
(`mask_token_for`). The context is z-lab's default spread of target layers for `layers` draft
layers.

The pipeline is `specdec train`'s: the target loads once, `--data` is collected by
data_sources.py, the target's features are computed batch by batch (online_features.py),
batches, schedule and the resumable checkpoint from common_training.py, a time budget from
time_budget.py. Each epoch ends with teacher-forced top-1 by block position on held-out answers
and τ of greedy DFlash decoding on held-out prompts, and saves the drafter so far in z-lab's
layout (with vLLM's `draft_vocab_size` + `d2t` for a reduced draft vocabulary).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import Qwen3Config

from specdec_core.errors import SpecdecError
from specdec_core.heads.dflash.draft import DFlashDraft, DFlashSpec
from specdec_core.heads.dflash.formats import (
    check_fits,
    default_target_layers,
    read_dflash,
    save_dflash,
)
from specdec_core.models.loading import LoadedModel
from specdec_core.training.card import ModelCard, Validation
from specdec_core.training.common_request import TrainingData
from specdec_core.training.common_training import EpochTraining
from specdec_core.training.data_sources import Collected
from specdec_core.training.online_features import FeatureBatch, Sequences, target_features
from specdec_core.training.starting_model import frequent_tokens
from specdec_core.training.time_budget import Budget, Probe, fastest, probe_sample, reserve
from specdec_core.training.train_config import TrainConfig
from specdec_core.training.training_set import collect_samples, log, run_card
from specdec_core.training.validation import decoded_tau, held_features

TRAINS = "dflash"  # the card's kind


@dataclass(frozen=True, kw_only=True)
class DFlashRequest(TrainingData):
    """What to train and how; the defaults are `specdec train dflash`'s."""

    layers: int = 3  # draft decoder layers (and target layers read, z-lab's default spread)
    block_size: int = 8  # rows of a block: the pending token and block_size − 1 drafts
    draft_vocab: int = 8192  # tokens it drafts over, the most frequent of the data; 0 = all
    anchors: int = 32  # blocks per training sequence
    gamma: float = 4.0  # decay of the loss weight by block position
    init: str | None = None  # a trained drafter to continue
    batch_tokens: int = 2048
    warmup: int = 50
    lr: float = 6e-4

    def __post_init__(self) -> None:
        self.check_training_data()
        if not 1 <= self.layers <= 8:
            raise SpecdecError(f"--layers {self.layers}: give 1 to 8 draft layers")
        if not 2 <= self.block_size <= 32:
            raise SpecdecError(f"--block-size {self.block_size}: give 2 to 32 rows")
        if self.draft_vocab < 0:
            raise SpecdecError(f"--draft-vocab {self.draft_vocab}: give 0 (all) or more")
        if self.anchors < 1:
            raise SpecdecError(f"--anchors {self.anchors}: give 1 or more blocks per sequence")
        if self.gamma <= 0:
            raise SpecdecError(f"--gamma {self.gamma}: give a decay above 0")
        if self.epochs < 1:
            raise SpecdecError(f"--epochs {self.epochs}: give 1 or more")

    def train_config(self, draft_vocab: int) -> TrainConfig:
        """The loop's settings as the card records them."""
        return TrainConfig(
            trains=TRAINS, epochs=self.epochs, lr=self.lr, warmup=self.warmup,
            batch_tokens=self.batch_tokens, draft_vocab=draft_vocab, noise=0.0, ce_weight=1.0,
            unroll=self.block_size - 1, arch="dflash", seed=self.seed,
            save_every=self.save_every, seconds=self.seconds or 0.0,
        )  # fmt: skip


def mask_token_for(target: LoadedModel) -> int:
    """An id to embed the mask slots with: a special token of the tokenizer that its chat
    template never writes (the last such one), else the vocabulary's last id."""
    tokenizer = target.tokenizer
    template = str(tokenizer.chat_template or "")
    used = {tokenizer.eos_token_id, tokenizer.bos_token_id, tokenizer.pad_token_id}
    for token in reversed(tokenizer.all_special_tokens):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if token not in template and token_id not in used and 0 <= token_id < target.vocab_size:
            return int(token_id)
    return target.vocab_size - 1


def body_config(target: LoadedModel, layers: int) -> Qwen3Config:
    """Qwen3 layers as wide as the target's: its hidden size, heads, MLP, RoPE and norm eps."""
    config = target.model.config.get_text_config(decoder=True)
    heads = int(config.num_attention_heads)
    return Qwen3Config(
        vocab_size=target.vocab_size,
        hidden_size=int(config.hidden_size),
        intermediate_size=int(config.intermediate_size),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=int(getattr(config, "num_key_value_heads", None) or heads),
        head_dim=int(getattr(config, "head_dim", None) or config.hidden_size // heads),
        hidden_act=str(getattr(config, "hidden_act", "silu")),
        max_position_embeddings=int(config.max_position_embeddings),
        rms_norm_eps=float(getattr(config, "rms_norm_eps", 1e-6)),
        rope_parameters=dict(config.rope_parameters),
        attention_bias=False,
        tie_word_embeddings=False,
    )


def fresh_draft(request: DFlashRequest, target: LoadedModel, data: Sequences) -> DFlashDraft:
    """A new drafter for `target`: layers from the target's last ones, lm_head from its rows
    of the draft vocabulary, fc seeded at random."""
    config = target.model.config.get_text_config(decoder=True)
    ids = default_target_layers(int(config.num_hidden_layers), request.layers)
    vocab = target.vocab_size
    draft_vocab = request.draft_vocab if 0 < request.draft_vocab < vocab else None
    spec = DFlashSpec(
        body_config(target, request.layers),
        request.block_size,
        mask_token_for(target),
        tuple(k + 1 for k in ids),
        draft_vocab_size=draft_vocab,
    )
    torch.manual_seed(request.seed)
    draft = DFlashDraft(spec)
    model = target.model
    source = model.model.layers[-request.layers :]
    with torch.no_grad():
        for mine, theirs in zip(draft.layers, source, strict=True):
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(mine.self_attn, name).weight.copy_(getattr(theirs.self_attn, name).weight)
            for name in ("gate_proj", "up_proj", "down_proj"):
                getattr(mine.mlp, name).weight.copy_(getattr(theirs.mlp, name).weight)
            mine.input_layernorm.weight.copy_(theirs.input_layernorm.weight)
            mine.post_attention_layernorm.weight.copy_(theirs.post_attention_layernorm.weight)
        draft.norm.weight.copy_(model.model.norm.weight)
        if draft.lm_head is not None and draft_vocab is not None:
            kept = frequent_tokens(data, draft_vocab, vocab)
            draft.d2t.copy_(kept - torch.arange(len(kept)))
            draft.lm_head.weight.copy_(model.get_output_embeddings().weight[kept])
    return draft


def starting_draft(request: DFlashRequest, target: LoadedModel, data: Sequences) -> DFlashDraft:
    """The --init drafter (checked against the target) or a fresh one, in float32, bound."""
    if request.init is not None:
        draft = read_dflash(request.init)
        check_fits(draft.spec, target, request.init)
    else:
        draft = fresh_draft(request, target, data)
    model = target.model
    draft.bind(model.get_input_embeddings(), model.get_output_embeddings())
    return draft.float()


@dataclass(frozen=True)
class Blocks:
    """A batch's training blocks laid end to end: [b, A·B] ids and positions, the mask over
    [context ; blocks], and per slot the position whose token it predicts (−1: not counted)."""

    ids: torch.Tensor
    positions: torch.Tensor
    mask: torch.Tensor  # [b, 1, A·B, t + A·B] bool
    predicts: torch.Tensor  # [b, A·B] long


def draw_blocks(
    ids: torch.Tensor,
    loss_mask: torch.Tensor,
    attention: torch.Tensor,
    block: int,
    anchors: int,
    mask_token: int,
    generator: torch.Generator,
) -> Blocks:
    """`anchors` blocks per sequence at answer positions drawn at random (each anchor's next
    token an answer token); a sequence with fewer such positions repeats none and leaves the
    rest of its blocks uncounted."""
    b, t = ids.shape
    device = ids.device
    next_is_answer = torch.zeros_like(loss_mask)
    next_is_answer[:, :-1] = loss_mask[:, 1:]
    anchor = torch.zeros(b, anchors, dtype=torch.long)
    valid = torch.zeros(b, anchors, dtype=torch.bool)
    for row in range(b):
        where = torch.nonzero(next_is_answer[row].cpu()).flatten()
        chosen = where[torch.randperm(len(where), generator=generator)[:anchors]]
        anchor[row, : len(chosen)] = chosen
        valid[row, : len(chosen)] = True
    anchor, valid = anchor.to(device), valid.to(device)
    offsets = torch.arange(block, device=device)
    positions = (anchor[:, :, None] + offsets).reshape(b, anchors * block)
    block_ids = torch.full((b, anchors, block), mask_token, dtype=torch.long, device=device)
    block_ids[:, :, 0] = ids.gather(1, anchor)
    inside = positions < t
    at = positions.clamp(max=t - 1)
    counted = (
        inside
        & loss_mask.gather(1, at).bool()
        & valid.repeat_interleave(block, dim=1)
        & (offsets.repeat(anchors) > 0)[None]
    )
    predicts = torch.where(counted, positions, torch.full_like(positions, -1))
    keys = torch.arange(t, device=device)
    sees_context = (keys[None, None, :] < anchor[:, :, None]) & attention.bool()[:, None, :]
    sees_context = sees_context.repeat_interleave(block, dim=1)  # [b, A·B, t]
    own = torch.block_diag(*[torch.ones(block, block, dtype=torch.bool)] * anchors).to(device)
    mask = torch.cat([sees_context, own[None].expand(b, -1, -1)], dim=2)[:, None]
    return Blocks(block_ids.reshape(b, anchors * block), positions, mask, predicts)


def slot_weights(block: int, gamma: float, device) -> torch.Tensor:
    """[block] loss weight by block position: 0 for the anchor, exp(−(j − 1)/γ) for slot j."""
    j = torch.arange(block, device=device, dtype=torch.float32)
    return torch.where(j > 0, torch.exp(-(j - 1) / gamma), torch.zeros_like(j))


def target_log_probs(
    draft: DFlashDraft, hidden: torch.Tensor, lm_head: torch.nn.Module
) -> torch.Tensor:
    """The target's log-distribution over the draft vocabulary from its final hidden states
    [n, h] (its lm_head's rows of the draft vocabulary)."""
    rows = lm_head.weight[draft.draft_ids().to(hidden.device)]
    return torch.log_softmax((hidden.float() @ rows.float().T), dim=-1)


def block_losses(
    draft: DFlashDraft,
    batch: FeatureBatch,
    anchors: int,
    gamma: float,
    generator: torch.Generator,
    lm_head: torch.nn.Module,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> (weighted loss, top-1 hits by slot [B], counted by slot [B]) of one batch."""
    block = draft.spec.block_size
    device = draft.fc.weight.device
    ids, loss_mask = batch.ids.to(device), batch.loss_mask.to(device)
    blocks = draw_blocks(
        ids, loss_mask, batch.attention_mask.to(device), block, anchors,
        draft.spec.mask_token_id, generator,
    )  # fmt: skip
    features = torch.cat([h.to(device) for h in batch.layer_hidden], dim=-1)
    rows = draft.blocks(features, blocks.ids, blocks.positions, blocks.mask)  # [b, A·B, h]
    counted = blocks.predicts >= 0
    slot = torch.arange(blocks.ids.shape[1], device=device) % block
    slots = slot[None].expand_as(counted)[counted]
    where = blocks.predicts[counted]  # the positions predicted
    row_of = torch.arange(ids.shape[0], device=device)[:, None].expand_as(counted)[counted]
    with torch.no_grad():
        wanted = target_log_probs(draft, batch.hidden.to(device)[row_of, where - 1], lm_head)
    logits = draft.lm_head(rows[counted]).float() if draft.lm_head is not None else None
    if logits is None:
        logits = lm_head(rows[counted]).float()
    log_q = torch.log_softmax(logits, dim=-1)
    per_row = (wanted.exp() * (wanted - log_q)).sum(-1)  # KL(target ‖ drafter)
    weights = slot_weights(block, gamma, device)[slots]
    loss = (per_row * weights).sum() / weights.sum().clamp(min=1e-6)
    hits = torch.zeros(block, device=device)
    totals = torch.zeros(block, device=device)
    right = (logits.argmax(-1) == wanted.argmax(-1)).float()
    hits.index_add_(0, slots, right)
    totals.index_add_(0, slots, torch.ones_like(right))
    return loss, hits, totals


@torch.no_grad()
def teacher_forced_top1(
    draft: DFlashDraft, data: list[FeatureBatch], anchors: int, lm_head: torch.nn.Module
) -> list[float]:
    """Per drafted block position (1..block − 1), the share of held-out blocks whose argmax is
    the target's."""
    block = draft.spec.block_size
    hits = torch.zeros(block)
    totals = torch.zeros(block)
    generator = torch.Generator().manual_seed(0)
    for batch in data:
        _, h, t = block_losses(draft, batch, anchors, 4.0, generator, lm_head)
        hits += h.cpu()
        totals += t.cpu()
    return (hits[1:] / totals[1:].clamp(min=1.0)).round(decimals=4).tolist()


@torch.no_grad()
def greedy_tau(
    draft: DFlashDraft, target: LoadedModel, prompts: list[list[int]], max_new_tokens: int = 48
) -> float:
    """Mean acceptance length of greedy DFlash decoding of `prompts`."""
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.drafters.dflash import DFlashDrafter

    config = DecodeConfig(max_new_tokens=max_new_tokens)
    return round(decoded_tau(target, DFlashDrafter(draft), prompts, config), 3)


def _probe(request: DFlashRequest, target: LoadedModel, draft: DFlashDraft, samples) -> Probe:
    """Time the features and a training step's forward and backward (no update) on the first
    samples; the random state is left as it was."""
    taken = probe_sample(samples, request.batch_tokens)
    rows = [(s.ids, s.start) for s in taken]
    made: list[FeatureBatch] = []
    layers = draft.spec.feature_layers
    features = fastest(lambda: made.append(target_features(target, rows, layers)))
    generator = torch.Generator().manual_seed(0)
    lm_head = target.model.get_output_embeddings()

    def step() -> None:
        loss = block_losses(draft, made[-1], request.anchors, request.gamma, generator, lm_head)
        loss[0].backward()

    with torch.random.fork_rng(devices=[]):
        training = fastest(step)
    draft.zero_grad(set_to_none=True)
    tokens = max(1, sum(len(s.ids) for s in taken))
    return Probe(features / tokens, training / tokens)


def train_dflash(request: DFlashRequest) -> ModelCard:
    """`specdec train dflash`: load the target, collect the data, train, save; -> the card."""
    budget = Budget(request.seconds)
    started = time.time()
    target = request.load_target()
    return train_on_sources(request, target, request.collected(target), started, budget)


def train_on_sources(
    request: DFlashRequest,
    target: LoadedModel,
    sources: Iterable[Collected],
    started: float | None = None,
    budget: Budget | None = None,
) -> ModelCard:
    """Train a drafter on `sources` and save it with its card in `request.out`; -> the card."""
    started = started or time.time()
    budget = budget or Budget(request.seconds)
    target.model.requires_grad_(False)
    out = Path(request.out)
    probe_draft: list[DFlashDraft] = []

    def probe(samples, _) -> Probe:
        if not probe_draft:
            probe_draft.append(starting_draft(request, target, Sequences.of(samples)))
        return _probe(request, target, probe_draft[0], samples)

    data = collect_samples(sources, request.data, budget, request.batch_tokens, probe)
    if not len(data.train):
        raise SpecdecError("no training data; check --data and --tokens (or give more --seconds)")
    draft = starting_draft(request, target, data.train).to(target.device)
    draft.requires_grad_(True)
    vocab = draft.spec.draft_vocab_size or target.vocab_size
    config = request.train_config(vocab)
    if budget.seconds is not None:
        config.seconds = max(1.0, budget.left() - reserve(budget))
        log(f"training for at most {config.seconds:.0f}s; {budget.words()}")
    size = sum(p.numel() for p in draft.parameters())
    start = f"continued from {request.init}" if request.init else "from the target's last layers"
    log(
        f"DFlash: {draft.spec.layers} layers, block {draft.spec.block_size}, draft vocabulary "
        f"{vocab}, {size / 1e6:.1f}M parameters, {start}; reads target layers "
        f"{[k - 1 for k in draft.spec.feature_layers]}"
    )
    out.mkdir(parents=True, exist_ok=True)
    layers_total = int(target.model.config.get_text_config(decoder=True).num_hidden_layers)
    lm_head = target.model.get_output_embeddings()
    by_position: list[float] = []
    held = held_features(target, data.held, draft.spec.feature_layers)

    def validate(model: DFlashDraft) -> Validation:
        model.eval()
        by_position[:] = teacher_forced_top1(model, held, request.anchors, lm_head) if held else []
        tau = None
        if data.held_prompts and request.val_prompts:
            tau = greedy_tau(model, target, data.held_prompts[: request.val_prompts])
        model.train()
        result = Validation(by_position[0] if by_position else None, tau)
        save_dflash(model, out, layers_total, ModelCard(kind=TRAINS, partial=result).to_record())
        return result

    history = DFlashTraining(
        draft, target, data.train, draft.spec.feature_layers, config, out, validate,
        anchors=request.anchors, gamma=request.gamma,
    ).run()  # fmt: skip
    draft.eval()
    card = run_card(
        request, TRAINS, data, history, started, target,
        arch="dflash",
        draft_vocab=vocab,
        init=request.init,
        layers=draft.spec.layers,
        train_config=config,
        extra={
            "block_size": draft.spec.block_size,
            "mask_token_id": draft.spec.mask_token_id,
            "target_layer_ids": [k - 1 for k in draft.spec.feature_layers],
            "anchors": request.anchors,
            "gamma": request.gamma,
            "teacher_forced_top1_by_position": list(by_position),
            "start": start,
        },
    )  # fmt: skip
    save_dflash(draft, out, layers_total, card.to_record())
    log(f"saved the DFlash drafter to {out}")
    return card


class DFlashTraining(EpochTraining):
    """A DFlash drafter's epochs (common_training.EpochTraining) on its blocks' loss
    (`block_losses`, `anchors` blocks per sequence, decay `gamma`)."""

    kind = TRAINS
    clip = 1.0

    def __init__(self, *args, anchors: int, gamma: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.anchors, self.gamma = anchors, gamma
        # the anchors drawn: a resumed run draws anew (the data order is what resumes exactly)
        self.blocks = torch.Generator().manual_seed(self.config.seed + self.state["step"])

    def batch_loss(self, batch: FeatureBatch) -> tuple[torch.Tensor, str]:
        lm_head = self.target.model.get_output_embeddings()
        loss, hits, totals = block_losses(
            self.model, batch, self.anchors, self.gamma, self.blocks, lm_head
        )
        shares = (hits[1:4] / totals[1:4].clamp(min=1.0)).tolist()
        return loss, "top-1 by position " + "/".join(f"{share:.2f}" for share in shares)
