"""The model card (`specdec_card.json`) of a trained EAGLE head or token-level draft.

`ModelCard` is the card as the engine holds it; it becomes JSON only at the file: `to_record`
when a head or draft is saved, `read_card` / `ModelCard.from_record` when one is read. A card
written by an earlier version reads back: a field it lacks takes its default, and what it has
that this version does not know (notes, lineage, `embedding_from_target`, an adapted head's
`adaptation`) is kept in `extra`, in order. While a run trains, the model saved after each epoch
has a partial card (`partial`: its latest validation, nothing else). No torch here: the window
reads cards too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from specdec_core.errors import SpecdecError
from specdec_core.files import format_duration
from specdec_core.training.train_config import TrainConfig

CARD = "specdec_card.json"  # in the head's or draft's directory


@dataclass(frozen=True)
class Validation:
    """How a model being trained agrees with the target on held-out data: teacher-forced top-1
    agreement, and tau of real greedy decoding (when held-out prompts were decoded)."""

    teacher_forced_top1: float | None = None
    tau: float | None = None

    def to_record(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Validation:
        return cls(record.get("teacher_forced_top1"), record.get("tau"))


@dataclass(frozen=True)
class EpochRecord:
    """One entry of a run's history: the end of an epoch (a fraction of one where a time budget
    stopped training: `stopped` "time"), the optimiser step, the wall-clock time and the
    validation there."""

    epoch: float
    step: int
    time: float
    validation: Validation = Validation()
    stopped: str | None = None

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"epoch": self.epoch}
        if self.stopped is not None:
            record["stopped"] = self.stopped
        return {**record, "step": self.step, "time": self.time, **self.validation.to_record()}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> EpochRecord:
        return cls(
            epoch=record["epoch"],
            step=record.get("step", 0),
            time=record.get("time", 0.0),
            validation=Validation.from_record(record),
            stopped=record.get("stopped"),
        )


def trained_epochs(history: Sequence[EpochRecord]) -> float:
    """Epochs done (a fraction where a time budget stopped training), from a run's history."""
    return history[-1].epoch if history else 0


@dataclass(frozen=True)
class ModelCard:
    """What a trained head or draft was trained from, how, and how well it validated."""

    kind: str  # eagle (an EAGLE head) | draft (a token-level draft)
    arch: str | None = None  # an EAGLE head's layout: eagle1 | eagle3
    target: str | None = None  # the target spec it was trained for
    command: str | None = None  # the command line that trained it
    data: tuple[str, ...] = ()  # its data sources, as written
    tokens: int = 0  # training tokens (prompts included)
    sequences: int = 0
    epochs: float = 0  # a fraction where a time budget stopped training
    seed: int = 0
    draft_vocab: int = 0  # tokens of its draft vocabulary
    init: str | None = None  # the head it continued
    layers: int | None = None  # decoder layers
    history: tuple[EpochRecord, ...] = ()
    validation: EpochRecord | None = None  # the last of `history`
    train_seconds: int | None = None
    train_config: TrainConfig | None = None
    data_mix: Mapping[str, Any] | None = None  # sequences and tokens by source, prompts by kind
    device: str | None = None  # where a timed GPU run trained it
    environment: Mapping[str, Any] | None = None  # date, machine, versions (environment.py)
    validation_by_kind: Mapping[str, Validation] | None = None  # per kind of request
    stages: Mapping[str, Any] | None = None  # a timed run's stages: seconds, sizes, history
    partial: Validation | None = None  # a run still training saved the model so far
    extra: Mapping[str, Any] = field(default_factory=dict)  # what else the card holds

    def to_record(self) -> dict[str, Any]:
        """The card as `specdec_card.json` holds it (the keys and order earlier versions
        wrote)."""
        arch = {"arch": self.arch} if self.arch is not None else {}
        if self.partial is not None:
            return {"kind": self.kind, **arch, "partial": self.partial.to_record(), **self.extra}
        record: dict[str, Any] = {"kind": self.kind, **arch}
        record.update(
            target=self.target,
            command=self.command,
            data=list(self.data),
            tokens=self.tokens,
            sequences=self.sequences,
            epochs=self.epochs,
            seed=self.seed,
            draft_vocab=self.draft_vocab,
            init=self.init,
            layers=self.layers,
            history=[epoch.to_record() for epoch in self.history],
            validation=self.validation.to_record() if self.validation else None,
            train_seconds=self.train_seconds,
            train_config=_config_record(self.train_config) if self.train_config else None,
        )
        optional = {
            "data_mix": self.data_mix,
            "device": self.device,
            "environment": self.environment,
            "validation_by_kind": (
                {kind: v.to_record() for kind, v in self.validation_by_kind.items()}
                if self.validation_by_kind is not None
                else None
            ),
            "stages": self.stages,
        }
        record.update((key, value) for key, value in optional.items() if value is not None)
        return {**record, **self.extra}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ModelCard:
        """A card as `to_record` (or an earlier version) wrote it."""
        known = {f.name for f in fields(cls)} - {"extra"}
        by_kind = record.get("validation_by_kind")
        config = record.get("train_config")
        return cls(
            **{key: record[key] for key in _PLAIN if key in record},
            data=tuple(record.get("data") or ()),
            history=tuple(EpochRecord.from_record(r) for r in record.get("history") or ()),
            validation=(
                EpochRecord.from_record(record["validation"]) if record.get("validation") else None
            ),
            train_config=_config_from_record(config) if config else None,
            validation_by_kind=(
                {kind: Validation.from_record(v) for kind, v in by_kind.items()}
                if by_kind is not None
                else None
            ),
            partial=Validation.from_record(record["partial"]) if "partial" in record else None,
            extra={key: value for key, value in record.items() if key not in known},
        )


OWN_ANSWERS = ("self", "magpie")  # --data sources that are the target's own answers


def diet(card: ModelCard) -> str:
    """What a head or draft was fed and for how long, in one line (the window's hover): its
    training tokens and what they were (the target's own answers or a dataset's), epochs, time
    and machine, and its last held-out top-1 and tau."""
    if card.partial is not None:
        return "still training (a partial card)"
    sources = [str(source) for source in card.data]
    own = [s.startswith(OWN_ANSWERS) or "corpus" in s or "answers" in s for s in sources]
    what = (
        "the target's own answers and a dataset's" if any(own) and not all(own)
        else "the target's own answers" if any(own) else "a dataset's answers"
    )  # fmt: skip
    named = ", ".join(s.split(":")[0].split(" (")[0] for s in sources) or "unrecorded data"
    seconds = card.train_seconds or sum(
        float(stage.get("seconds", 0)) for stage in (card.stages or {}).values()
        if isinstance(stage, Mapping)
    )  # fmt: skip
    where = card.device or (card.environment or {}).get("machine")
    took = f", {format_duration(seconds)}" if seconds else ""
    line = (f"fed {card.tokens:,} tokens of {what} ({named}) for {card.epochs:g} epochs{took}"
            + (f" on {where}" if where else ""))  # fmt: skip
    last = card.validation
    if last is not None and last.validation.teacher_forced_top1 is not None:
        line += f"; held-out top-1 {last.validation.teacher_forced_top1:.2f}"
        if last.validation.tau is not None:
            line += f", tau {last.validation.tau:.2f}"
    return line


# fields read from a card record as they are
_PLAIN = ("kind", "arch", "target", "command", "tokens", "sequences", "epochs", "seed",
          "draft_vocab", "init", "layers", "train_seconds", "data_mix", "device",
          "environment", "stages")  # fmt: skip


def _config_record(config: TrainConfig) -> dict[str, Any]:
    """The TrainConfig as cards record it: what it trains under `kind` (eagle | draft)."""
    record = asdict(config)
    return {"kind": record.pop("trains"), **record}


def _config_from_record(record: Mapping[str, Any]) -> TrainConfig:
    """A card's `train_config` (settings an earlier version recorded and this one lacks are
    left out; settings it lacks take their defaults)."""
    names = {f.name for f in fields(TrainConfig)}
    settings = {key: value for key, value in record.items() if key in names}
    return TrainConfig(**settings, **({"trains": record["kind"]} if "kind" in record else {}))


def read_card(directory: str | Path) -> ModelCard:
    """The card in a head's or draft's `directory`."""
    path = Path(directory) / CARD
    try:
        return ModelCard.from_record(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SpecdecError(
            f"{path}: no readable model card ({exc}); give the directory of a head or draft "
            "that specdec trained"
        ) from None
