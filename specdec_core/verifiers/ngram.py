"""N-gram match policy (lossy): accept the drafted span that overlaps the target's own greedy text.

The target's greedy continuation over the drafted positions is g_i = argmax π_i (teacher-forced
on the draft: what one verification forward gives). The overlap of a span x_1..x_j with
g_1..g_j is the clipped n-gram precision (as in BLEU) with n' = min(n, j): the share of the
span's n'-grams that also occur among g's n'-grams, each counted at most as often as there.
The accepted span is the longest prefix x_1..x_j whose overlap is ≥ τ.

Parameters (`--policy-param`): `n` (default 2) and `tau` (default 0.5). τ = 0 accepts every
drafted token. τ = 1 with n ≥ k accepts only a prefix equal to the target's greedy tokens
(n' = j: the one n-gram is the whole span); τ = 1 with a smaller n still accepts reorderings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch

from specdec_core.verifiers.lossy import ScoringPolicy


def ngram_overlap(span: Sequence[int], reference: Sequence[int], n: int) -> float:
    """Clipped n-gram precision of `span` against `reference` (n' = min(n, len(span)))."""
    n = max(1, min(int(n), len(span)))
    grams = Counter(tuple(span[i : i + n]) for i in range(len(span) - n + 1))
    ref = Counter(tuple(reference[i : i + n]) for i in range(len(reference) - n + 1))
    matched = sum(min(count, ref[gram]) for gram, count in grams.items())
    return matched / max(1, sum(grams.values()))


def ngram_span(draft: Sequence[int], greedy: Sequence[int], n: int, tau: float) -> int:
    """Longest j with ngram_overlap(draft[:j], greedy[:j], n) ≥ τ (0 if none)."""
    for j in range(len(draft), 0, -1):
        if ngram_overlap(draft[:j], greedy[:j], n) >= tau:
            return j
    return 0


def ngram_approve(draft: torch.Tensor, pi: torch.Tensor, n: float, tau: float) -> torch.Tensor:
    """[k] bool: True on the accepted span (a prefix), against g = argmax π."""
    j = ngram_span(draft.tolist(), pi.argmax(-1).tolist(), int(n), tau)
    return torch.arange(draft.shape[0], device=draft.device) < j


class NgramVerifier(ScoringPolicy):
    name = "ngram"
    PARAMS = {"n": 2.0, "tau": 0.5}

    def approve(self, draft: torch.Tensor, q: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
        return ngram_approve(draft, pi, self.params["n"], self.params["tau"])
