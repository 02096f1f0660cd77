"""PARD's published format: where a parallel draft model's config.json names its mask token.

A PARD checkpoint (amd/PARD-Llama-3.2-1B, amd/PARD-Qwen2.5-0.5B, ...) is an ordinary causal LM
whose config.json adds `"pard_token": ID` (PARD's trainer sets it from `unused_tokenids[0]`,
a reserved token of the tokenizer: 128020 for Llama 3, 151665 for Qwen2.5) and `"spd_type":
"pard"`. vLLM reads a parallel draft's mask token from the first of `mask_token_id`,
`pard_token` and `ptd_token_id` that its config sets (vllm/v1/spec_decode/llm_base_proposer.py
`_init_parallel_drafting_params`; DFlash's `dflash_config.mask_token_id` and DSpark's noise
token are other methods' keys), so the drafter and the export read them in that order.
Torch-free: the export reads it from a config.json it finds on this machine.
"""

from __future__ import annotations

from collections.abc import Mapping

from specdec_core.errors import SpecdecError

MASK_KEYS = ("mask_token_id", "pard_token", "ptd_token_id")  # vLLM's order
PARD_TOKEN = "pard_token"  # the key PARD's own checkpoints carry and `specdec train pard` writes


def stated_mask_token(values: Mapping) -> int | None:
    """The mask token a draft's config.json `values` names (the first of `MASK_KEYS` set), or
    None where it names none; a value that is no token id is a one-line error naming its key."""
    for key in MASK_KEYS:
        value = values.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecdecError(
                f"the draft's config.json gives {key} = {value!r}, not a token id; a PARD draft's "
                f'{key} is one integer id (amd/PARD-Llama-3.2-1B: "pard_token": 128020)'
            )
        return value
    return None
