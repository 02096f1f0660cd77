"""The model card (`specdec_card.json`) of a trained EAGLE head or token-level draft."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict

from specdec_core.training.features import Featured
from specdec_core.training.loop import TrainConfig
from specdec_core.training.request import TrainRequest


def trained_epochs(history: list[dict]) -> float:
    """Epochs done (a fraction where a time budget stopped training), from `train`'s history."""
    return history[-1]["epoch"] if history else 0


def train_config_record(config: TrainConfig) -> dict:
    """The TrainConfig as cards record it: what it trains under `kind` (eagle | draft)."""
    fields = asdict(config)
    return {"kind": fields.pop("trains"), **fields}


def model_card(
    request: TrainRequest,
    config: TrainConfig,
    *,
    data: Sequence[str],
    trained: Sequence[Featured],
    draft_vocab: int,
    layers: int,
    history: list[dict],
    seconds: float,
    extra: Mapping | None = None,
) -> dict:
    """The card of a model trained on `trained` (sequences from the sources `data`) with
    `config`; `extra`: what else a caller records (a GPU run: its device and stages)."""
    card = {"kind": request.trains}
    if request.trains == "eagle":
        card["arch"] = config.arch
    card.update(
        target=request.target,
        command=request.command,
        data=list(data),
        tokens=sum(len(item.ids) for item in trained),
        sequences=len(trained),
        epochs=trained_epochs(history),
        seed=request.seed,
        draft_vocab=draft_vocab,
        init=request.init,
        layers=layers,
        history=history,
        validation=history[-1] if history else None,
        train_seconds=round(seconds),
        train_config=train_config_record(config),
    )
    return {**card, **(extra or {})}
