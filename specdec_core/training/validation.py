"""Validation of a model being trained by real decoding (beside the teacher-forced top-1)."""

from __future__ import annotations

import torch

from specdec_core.models import LoadedModel


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
    from specdec_core.config import DecodeConfig
    from specdec_core.decode import generate
    from specdec_core.drafters.classic import ClassicDrafter
    from specdec_core.drafters.eagle import EagleDrafter
    from specdec_core.events import Finished

    model.eval()
    if trains == "eagle":
        drafter = EagleDrafter(model, target.model.config.num_hidden_layers)
    else:
        drafter = ClassicDrafter(model, target.vocab_size)
    new = steps = 0
    config = DecodeConfig(max_new_tokens=max_new_tokens, k=k)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=target.device.type == "cpu"):
        for prompt in prompts:
            for event in generate(target, drafter, prompt, config):
                if isinstance(event, Finished):
                    new += event.summary.new_tokens
                    steps += event.summary.steps
    model.train()
    return new / max(1, steps)
