"""Prompt lookup (n-gram) drafting: copy what followed the last time the context ended this way.

Rule: for n = `ngram_max` down to 1, take the last n committed tokens (the pending one
included) and find their most recent earlier occurrence in prompt + output so far; propose the
k tokens that followed it. The first n that matches wins (longest match, then most recent).
If the copied span runs into the end of the sequence, copying continues over the tokens just
copied, so a repeating pattern ("a b a b") is extended to the full k. No match: no draft (the
step is a plain target forward).

The proposal is deterministic (q = None: all draft mass on the copied token), so the lossless
verifier gives exactly the target's output (Saxena 2023, "prompt lookup decoding";
transformers' `prompt_lookup_num_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.target import TargetOutput
from specdec_core.loop.drafter import Drafter


def prompt_lookup(ids: Sequence[int], k: int, ngram_max: int) -> list[int]:
    """Up to k tokens that followed the longest, most recent earlier match of ids' suffix."""
    length = len(ids)
    for n in range(min(ngram_max, length - 1), 0, -1):
        suffix = list(ids[length - n :])
        # the match must start before the suffix itself; search from the most recent
        for start in range(length - n - 1, -1, -1):
            if list(ids[start : start + n]) == suffix:
                return _copy_after(ids, start + n, k)
    return []


def _copy_after(ids: Sequence[int], source: int, k: int) -> list[int]:
    """ids[source:source+k], continuing over the copied tokens past the end of ids."""
    extended = list(ids)
    for offset in range(k):
        extended.append(extended[source + offset])
    return extended[len(ids) :]


class NgramDrafter(Drafter):
    name = "ngram"

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        pass

    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        tokens = prompt_lookup(ids, config.k, config.ngram_max)
        return Proposal(tokens=tokens) if tokens else EMPTY

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        pass
