"""`TrainConfig`: the training settings (common_training.py), as the model card records them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainConfig:
    trains: str = "eagle"  # what is trained: eagle (an EAGLE head) | draft (a token-level draft)
    epochs: int = 2
    lr: float = 1e-3
    warmup: int = 50
    batch_tokens: int = 4096
    draft_vocab: int = 8192
    noise: float = 0.2  # uniform noise width on input features (eagle)
    ce_weight: float = 0.1
    unroll: int = 2  # eagle: drafting steps simulated in training (1 = plain EAGLE-1)
    arch: str = "eagle1"  # eagle: head layout, eagle1 | eagle3
    seed: int = 0
    save_every: int = 100
    seconds: float = 0.0  # > 0: a time budget; the schedule decays over it and training stops
