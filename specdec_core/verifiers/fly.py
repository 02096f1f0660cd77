"""FLy, training-free loosely speculative decoding (Li et al., ICLR 2026) (lossy).

The lossless rule refuses a drafted token the target would not have produced (a mismatch).
FLy still accepts a mismatch x_i when two tiers agree that it is another wording rather than
an error:

- entropy gate: the target admits alternatives at i — the entropy of its three most likely
  tokens, H₃(π_i) = −Σ_{top 3} π_i(y) log π_i(y) (probabilities of the full distribution, not
  renormalised), is at least θ — and it gives x_i some mass, π_i(x_i) > 0;
- deferred window: the target carries on with the drafted text — the W drafted tokens after
  the mismatch, x_{i+1} … x_{i+W}, are each accepted by the lossless rule at their own rows.

"Accepted by the lossless rule" is the native decision: at T = 0, x_j equals the argmax of p_j;
at T > 0, u_j · q_j(x_j) < p_j(x_j) with one uniform u_j per drafted token, drawn as
`lossless.speculative_accept` draws them. The accepted prefix is the longest run of native or
deferred acceptances; at the first refused position the next token is the target's correction
norm(max(0, p − q)) (at T = 0 its argmax), after a fully accepted draft the bonus token from p
(`lossy.verdict_after`).

**What it reads.** Nothing beyond the step's one target forward: the rows that score the
drafted tokens. Row j + 1 of that forward is teacher-forced on the drafted x_1 … x_j, mismatch
included, so rows i + 1 … i + W say whether the target takes the text back after x_i. The
window of a mismatch at i (0-based, k drafted tokens) therefore needs i + W < k: a mismatch in
the last W drafted positions cannot be judged and is refused as the lossless rule refuses it
(the tail of the chain is judged strictly). The bonus row is never read by the window.

Parameters (`--policy-param`): `entropy_threshold` (θ in nats, default 0.3) and `window` (W,
default 6), the published configuration (AMD-AGI/FLy `FLy_Llama3_70b.json`: `entropy_thre`
0.3, `win_len` 6, drafting 15 tokens) and vLLM's defaults (`fly_entropy_threshold`,
`fly_window_size`). W counts the confirming tokens after the mismatch, as vLLM's
`fly_window_size` does; the reference code's `win_len` also counts the mismatched token and
judges one position less at the tail. With the default W = 6 a chain needs k ≥ 7 drafted
tokens (`--k 8` or more) before anything is deferred. θ = 0 lets the gate pass every mismatch
the target gives mass to; W = 0 accepts every such mismatch at once. π is the target's
distribution the lossy policies score (`verifiers.lossy`: p at T > 0, the softmax at T = 1 when
decoding greedily), the same reading as vLLM's processed target scores. At T > 0 the reference
code instead compares the draft with two samples of the target; the native rule here is vLLM's.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from specdec_core.errors import SpecdecError
from specdec_core.verifiers.lossy import ScoringPolicy, drafted_probs, leading_true

ENTROPY_TOP = 3  # FLy's entropy reads the target's three most likely tokens


def top_entropy(pi: torch.Tensor, top: int = ENTROPY_TOP) -> torch.Tensor:
    """H of the `top` largest probabilities per row, unrenormalised: [k] from [k, V]."""
    largest = pi.topk(min(top, pi.shape[-1]), dim=-1).values  # [k, top]
    return -(largest * largest.clamp(min=1e-30).log()).sum(-1)


def gate(pi: torch.Tensor, mass: torch.Tensor, entropy_threshold: float) -> torch.Tensor:
    """FLy's entropy gate: the rows of `pi` [k, V] that admit alternatives (H₃ ≥ θ), for
    tokens to which they give mass (`mass` [k] for the drafted tokens, [k, V] for every
    token): bool of `mass`'s shape."""
    admits = top_entropy(pi) >= entropy_threshold  # [k]
    return admits.reshape(admits.shape + (1,) * (mass.dim() - 1)) & (mass > 0)


def native_accepts(
    draft: torch.Tensor,  # [k]
    q: torch.Tensor,  # [k, V]
    p: torch.Tensor,  # [k, V] the rows that score the drafted tokens
    uniforms: torch.Tensor,  # [k] one uniform per drafted token
) -> torch.Tensor:
    """[k] bool: the lossless rule's decision per drafted token, u · q(x) < p(x)."""
    return uniforms * drafted_probs(draft, q) < drafted_probs(draft, p)


def deferred(
    draft: torch.Tensor,  # [k]
    native: torch.Tensor,  # [k] bool
    pi: torch.Tensor,  # [k, V] the scored rows
    entropy_threshold: float,
    window: int,
) -> torch.Tensor:
    """[k] bool: mismatches FLy accepts — the gate passes and the next `window` drafted tokens
    are natively accepted; only positions i with i + window < k can be judged."""
    k = draft.shape[0]
    passes = gate(pi, drafted_probs(draft, pi), entropy_threshold)  # [k]
    confirmed = torch.zeros(k, dtype=torch.bool, device=draft.device)
    if window == 0:
        confirmed[:] = True
    elif k > window:  # window i covers native[i + 1 .. i + window], for i = 0 .. k - window - 1
        confirmed[: k - window] = native[1:].unfold(0, window, 1).all(-1)
    return ~native & passes & confirmed


class FlyVerifier(ScoringPolicy):
    name = "fly"
    PARAMS: ClassVar[dict[str, float]] = {"entropy_threshold": 0.3, "window": 6.0}

    def __init__(self, **params: float) -> None:
        super().__init__(**params)
        window = self.params["window"]
        if window < 0 or window != int(window):
            raise SpecdecError(f"policy 'fly' needs a whole window >= 0 (got {window:g})")
        if self.params["entropy_threshold"] < 0:
            raise SpecdecError(
                "policy 'fly' needs entropy_threshold >= 0 "
                f"(got {self.params['entropy_threshold']:g})"
            )
        self.window = int(window)

    def accepted(
        self,
        draft: torch.Tensor,
        q: torch.Tensor,
        p: torch.Tensor,
        pi: torch.Tensor,
        generator: torch.Generator | None,
    ) -> int:
        k = draft.shape[0]
        uniforms = torch.rand(k, generator=generator, device=p.device)
        native = native_accepts(draft, q, p[:k], uniforms)
        loose = deferred(draft, native, pi[:k], self.params["entropy_threshold"], self.window)
        return leading_true(native | loose)
