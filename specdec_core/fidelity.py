"""Fidelity of a generation: agreement with the target-only greedy output, and target log-prob.

Lossy policies buy acceptance with fidelity; these are the prices `specdec bench` reports
(docs/architecture.md#measurement). With `output` a method's new tokens and `reference` the
autoregressive (target-only) new tokens on the same prompt, and L = max(len(output),
len(reference)):

- prefix agreement = (tokens before the first difference) / L: the share of the text that is
  exactly the target's own until the first divergence;
- token agreement = #{i : output_i = reference_i} / L: position-wise matches, which can recover
  after a divergence that did not shift the text;
- mean target log-prob = mean over the output tokens of log π(x_t | prompt, x_<t), π the target's
  softmax at temperature 1, from one teacher-forced target forward over prompt + output.

Both agreements are 1 for identical outputs (also two empty ones). At temperature 0 they say how
far a lossy policy strays from what the target would have written; the log-prob says how
plausible the target finds what was written instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel


def common_prefix(output: Sequence[int], reference: Sequence[int]) -> int:
    """Number of tokens before the first difference."""
    for i, (a, b) in enumerate(zip(output, reference, strict=False)):
        if a != b:
            return i
    return min(len(output), len(reference))


def prefix_agreement(output: Sequence[int], reference: Sequence[int]) -> float:
    longest = max(len(output), len(reference))
    return common_prefix(output, reference) / longest if longest else 1.0


def token_agreement(output: Sequence[int], reference: Sequence[int]) -> float:
    longest = max(len(output), len(reference))
    same = sum(a == b for a, b in zip(output, reference, strict=False))
    return same / longest if longest else 1.0


@torch.inference_mode()
def target_logprobs(
    model: PreTrainedModel, prompt_ids: Sequence[int], output_ids: Sequence[int]
) -> torch.Tensor:
    """[m] log π(x_t | prompt, x_<t) for the m output tokens, in one forward over both."""
    if not output_ids:
        return torch.zeros(0)
    ids = torch.tensor([[*prompt_ids, *output_ids]], device=model.device)  # [1, n + m]
    start = len(prompt_ids) - 1  # the logits at position t predict token t + 1
    logits = model(input_ids=ids, use_cache=False).logits[0, start:-1].float()  # [m, V]
    targets = ids[0, len(prompt_ids) :]  # [m]
    return logits.log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1).cpu()


def mean_logprob(
    model: PreTrainedModel, prompt_ids: Sequence[int], output_ids: Sequence[int]
) -> float | None:
    """Mean target log-probability per output token (None for an empty output)."""
    if not output_ids:
        return None
    return float(target_logprobs(model, prompt_ids, output_ids).mean())
