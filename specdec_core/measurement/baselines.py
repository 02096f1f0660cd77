"""Peer baselines: transformers' own `generate`, measured on the same prompts in the same run.

- `hf-generate`: plain `model.generate` (what our `ar` path should match in speed);
- `hf-assisted`: `generate(assistant_model=draft)` with a constant k draft tokens;
- `hf-lookup`: `generate(prompt_lookup_num_tokens=k)`.

Target forwards are counted with a forward hook, so τ is new tokens / target forwards, as ours.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.models.loading import LoadedModel


@dataclass(frozen=True)
class HFRun:
    """One `generate()` call: its new tokens, target forwards and wall time."""

    method: str
    token_ids: tuple[int, ...]
    steps: int  # target forwards (its prefill emits the first token)
    wall_seconds: float


def run_hf(
    method: str,
    target: LoadedModel,
    prompt_ids: list[int],
    config: DecodeConfig,
    draft: LoadedModel | None = None,
) -> HFRun:
    kwargs: dict = {
        "max_new_tokens": config.max_new_tokens,
        "do_sample": not config.greedy,
        "pad_token_id": target.tokenizer.pad_token_id or min(target.eos_ids),
        "eos_token_id": sorted(target.eos_ids),  # where the playground's own runs end
    }
    if not config.greedy:
        kwargs.update(temperature=config.temperature, top_p=config.top_p, top_k=0)
    if method == "hf-assisted":
        assert draft is not None, "hf-assisted needs a draft model"
        draft.model.generation_config.num_assistant_tokens = config.k
        draft.model.generation_config.num_assistant_tokens_schedule = "constant"
        draft.model.generation_config.assistant_confidence_threshold = 0.0
        kwargs["assistant_model"] = draft.model
    elif method == "hf-lookup":
        kwargs["prompt_lookup_num_tokens"] = config.k
    forwards = [0]
    hook = target.model.register_forward_hook(
        lambda *args: forwards.__setitem__(0, forwards[0] + 1)
    )
    input_ids = torch.tensor([prompt_ids], device=target.device)
    torch.manual_seed(config.seed)  # transformers' generate takes no generator
    try:
        if target.device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        with torch.inference_mode():
            output = target.model.generate(
                input_ids, attention_mask=torch.ones_like(input_ids), **kwargs
            )
        if target.device.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - started
    finally:
        hook.remove()
    new = output[0, len(prompt_ids) :].tolist()
    # every target forward of `generate` emits tokens (its prefill emits the first one), as
    # every step of ours does (our prefill stops one token short and emits nothing)
    return HFRun(method, tuple(new), max(forwards[0], 1), wall)
