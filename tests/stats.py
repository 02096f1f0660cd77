"""Distribution checks shared by the lossless tests of every method."""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch
from scipy.stats import chisquare

from specdec_core.decoding.prefix_cache import PrefixCache


def chi_square_pvalue(
    samples: list[int], expected: torch.Tensor, min_expected: float = 5.0
) -> float:
    """Chi-square goodness of fit of integer samples to a distribution over ids.

    Cells whose expected count is below `min_expected` are pooled into one, as the test needs.
    """
    n = len(samples)
    counts = Counter(samples)
    expected_counts = expected.double().numpy() * n
    big = expected_counts >= min_expected
    observed = [counts.get(i, 0) for i in np.flatnonzero(big)]
    wanted = list(expected_counts[big])
    rest_observed = n - sum(observed)
    rest_expected = n - sum(wanted)
    if rest_expected >= min_expected:
        observed.append(rest_observed)
        wanted.append(rest_expected)
    else:
        assert rest_observed <= max(3, 3 * rest_expected), "samples where p is ~0"
        wanted = list(np.array(wanted) * sum(observed) / sum(wanted))
    return float(chisquare(observed, wanted).pvalue)


@torch.inference_mode()
def target_marginals(model, prompt_ids: list[int], temperature: float, top_p: float, eos: int = 2):
    """Exact distributions of the first and second generated token under the target.

    Generation stops at EOS, so the second distribution has one extra cell (index V, "no
    second token") holding the probability that the first token is EOS.
    """
    from specdec_core.decoding.sampling import probs

    def next_probs(ids: list[int]) -> torch.Tensor:
        logits = model(torch.tensor([ids])).logits[0, -1]
        return probs(logits, temperature, top_p)

    first = next_probs(prompt_ids)  # [V]
    second = torch.zeros(first.shape[0] + 1)  # [V + 1]
    second[-1] = first[eos]
    for token in torch.nonzero(first > 0).flatten().tolist():
        if token != eos:
            second[:-1] += first[token] * next_probs([*prompt_ids, token])
    return first, second


def sample_first_two_tokens(target, drafter, ids, config, samples: int, seed: int):
    """Run `samples` generations; the first tokens, the second ones (V after EOS), and the
    number of accepted drafts (so a test can check it exercised acceptance). The prompt is
    prefilled once; every generation's steps are its own."""
    from specdec_core.decoding.events import Finished, Step
    from specdec_core.loop.decode import generate

    generator = torch.Generator().manual_seed(seed)
    vocab = target.vocab_size
    firsts, seconds, accepted = [], [], 0
    kept = PrefixCache()  # later generations take the prompt's cached values, bit for bit
    for _ in range(samples):
        for event in generate(target, drafter, ids, config, generator=generator, prefix=kept):
            if isinstance(event, Step):
                accepted += event.accepted
            if isinstance(event, Finished):
                tokens = event.summary.token_ids
                firsts.append(tokens[0])
                seconds.append(tokens[1] if len(tokens) > 1 else vocab)  # after EOS
    return firsts, seconds, accepted


def first_two_pvalues(target, drafter, temperature: float, top_p: float, samples: int, seed: int):
    """`samples` generations of two tokens after `tiny.prompt(length=4)` with k = 3; -> the
    chi-square p-values of the first tokens and of the second ones against the target's
    marginals, and the number of accepted drafts."""
    from specdec_core.decoding.config import DecodeConfig
    from tests.tiny import prompt

    ids = prompt(length=4)
    first, second = target_marginals(target.model, ids, temperature, top_p)
    config = DecodeConfig(max_new_tokens=2, k=3, temperature=temperature, top_p=top_p)
    firsts, seconds, accepted = sample_first_two_tokens(target, drafter, ids, config, samples, seed)
    return chi_square_pvalue(firsts, first), chi_square_pvalue(seconds, second), accepted
