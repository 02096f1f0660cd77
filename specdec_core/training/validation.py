"""Validation of a model being trained: teacher-forced top-1 agreement with the target, tau of
real greedy decoding, and both per kind of request on the held-out prompts of `kinds.HELD_OUT`
(`head_by_kind` measures any EAGLE head that way, `specdec validate`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from specdec_core.models.loading import LoadedModel
from specdec_core.training.card import Validation
from specdec_core.training.objective import Objective
from specdec_core.training.online_features import FeatureBatch, feature_batches

if TYPE_CHECKING:
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.loop.drafter import Drafter


HELD_BATCH_TOKENS = 2048  # padded tokens per target forward over held-out answers


def held_features(
    target: LoadedModel, samples: list, layers: tuple[int, ...] = ()
) -> list[FeatureBatch]:
    """The target's features of held-out answers (a few dozen: kept for every validation)."""
    if not samples:
        return []
    return feature_batches(target, samples, layers, HELD_BATCH_TOKENS)


def teacher_forced_agreement(objective: Objective, data: list[FeatureBatch], lm_head) -> float:
    """Share of held-out answer positions where the model's top-1 equals the target's top-1
    (every draft position of `objective.unroll` counted)."""
    hits, counted = hits_by_position(objective, data, lm_head, objective.unroll)
    return sum(hits) / max(1, sum(counted))


@torch.no_grad()
def hits_by_position(
    objective: Objective, data: list[FeatureBatch], lm_head, positions: int
) -> tuple[list[int], list[int]]:
    """Per draft position 1..`positions` (the objective's passes: position j drafts from the
    model's own j-1 earlier predictions): the answer positions where the model's top-1 equals
    the target's, and the answer positions counted."""
    hits, counted = [0] * positions, [0] * positions
    for batch in data:
        ids, mask = batch.ids, batch.loss_mask
        pred, true = objective.on(batch)
        draft = objective.draft_ids[objective.draft_logits(pred).argmax(-1)]  # target ids
        agree = draft == lm_head(true.to(lm_head.weight.dtype)).argmax(-1)
        at = 0
        for j in range(1, min(positions, objective.unroll, ids.shape[1] - 1) + 1):
            rows = int(mask[:, j:].sum())  # pass j's rows, as the objective orders them
            hits[j - 1] += int(agree[at : at + rows].sum())
            counted[j - 1] += rows
            at += rows
    return hits, counted


@torch.no_grad()
def validation_tau(
    trains: str,
    model,
    target: LoadedModel,
    prompts: list[list[int]],
    k: int = 4,
    max_new_tokens: int = 48,
) -> float:
    """Mean acceptance length of real greedy decoding on held-out prompts."""
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.drafters.classic import ClassicDrafter
    from specdec_core.drafters.eagle import EagleDrafter

    model.eval()
    if trains == "eagle":
        drafter = EagleDrafter(model, target.model.config.num_hidden_layers)
    else:
        drafter = ClassicDrafter(model, target.vocab_size)
    config = DecodeConfig(max_new_tokens=max_new_tokens, k=k)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=target.device.type == "cpu"):
        tau = decoded_tau(target, drafter, prompts, config)
    model.train()
    return tau


def decoded_tau(
    target: LoadedModel, drafter: Drafter, prompts: list[list[int]], config: DecodeConfig
) -> float:
    """Mean acceptance length (new tokens per target step) of decoding each of `prompts`."""
    from specdec_core.decoding.events import Finished
    from specdec_core.loop.decode import generate

    new = steps = 0
    for prompt in prompts:
        for event in generate(target, drafter, prompt, config):
            if isinstance(event, Finished):
                new += event.summary.new_tokens
                steps += event.summary.steps
    return new / max(1, steps)


def held_out_by_kind(
    target: LoadedModel, work: Path, per_kind: int
) -> dict[str, tuple[list[list[int]], list]]:
    """kind -> (its first `per_kind` held-out prompts, chat-templated; the target's greedy
    answers to them, features kept), from `kinds.HELD_OUT`; answers cached under WORK."""
    from specdec_core.training import datasets
    from specdec_core.training.kinds import HELD_OUT, KINDS

    held = {}
    for kind in KINDS:
        texts = HELD_OUT[kind][:per_kind]
        found = (datasets.first_prompt(target.tokenizer, [{"from": "human", "value": t}], 512)
                 for t in texts)  # fmt: skip
        prompts = [p for p in found if p]
        answers = datasets.generate_answers(
            target.model, target.tokenizer, prompts, 128, 32, work / "kinds-heldout" / kind
        )
        held[kind] = (prompts, answers)
    return held


def by_kind_table(
    target: LoadedModel,
    work: Path,
    per_kind: int,
    layers: tuple[int, ...],
    measure: Callable[[list[list[int]], list[FeatureBatch]], Validation],
) -> dict[str, Validation]:
    """kind -> `measure`(its first `per_kind` held-out prompts, the target's features of its
    answers to them (`layers`: with the hidden states entering those)): the table a card's
    `validation_by_kind` holds, said on stderr. The answers are cached under `work`."""
    table = {}
    for kind, (prompts, answers) in held_out_by_kind(target, work, per_kind).items():
        table[kind] = measure(prompts, held_features(target, answers, layers))
    said = json.dumps({kind: v.to_record() for kind, v in table.items()})
    print(f"[train] validation by kind: {said}", file=sys.stderr, flush=True)
    return table


def head_validation(
    trains: str, objective: Objective, target: LoadedModel, tau: bool = True
) -> Callable[[list[list[int]], list[FeatureBatch]], Validation]:
    """An EAGLE head's or draft's `by_kind_table` measure: teacher-forced top-1 and (unless
    `tau` is off) tau of greedy decoding."""
    lm_head = target.model.get_output_embeddings()
    objective.eval()  # no input noise

    def measure(prompts: list[list[int]], featured: list[FeatureBatch]) -> Validation:
        return Validation(
            round(teacher_forced_agreement(objective, featured, lm_head), 4),
            round(validation_tau(trains, objective.model, target, prompts), 3) if tau else None,
        )

    return measure


def head_by_kind(
    target: LoadedModel, head, work: Path, per_kind: int = 3, unroll: int = 2, tau: bool = True
) -> dict[str, Validation]:
    """kind -> `Validation` of an EAGLE `head` (trained here or not) on the first `per_kind`
    held-out prompts of each kind: the table `specdec train` writes in a card's
    `validation_by_kind`, teacher-forced top-1 taken as the mean of `unroll` passes. The
    target's answers are cached under `work` (a training run's `--work` holds the same
    files); their features are computed again."""
    from specdec_core.heads.eagle.head import fused_layers

    # the layers EAGLE-3 reads (layout.input_layers; imported from there, training would cycle)
    fused = fused_layers(target.model.config.num_hidden_layers) if head.kind == "eagle3" else ()

    draft_ids = head.draft_ids()
    if draft_ids is None:
        draft_ids = torch.arange(target.vocab_size, device=target.device)
    lm_head = target.model.get_output_embeddings()
    objective = Objective("eagle", head, lm_head, draft_ids.to(target.device), 0.0, unroll)
    measure = head_validation("eagle", objective, target, tau)
    return by_kind_table(target, work, per_kind, fused, measure)
