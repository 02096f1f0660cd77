"""IBM's MLP speculator (fms-extras `MLPSpeculator`, "Accelerating Production LLMs with Combined
Token/Embedding Speculators", arXiv 2404.19124) as vLLM's `MLPSpeculator` computes it.

A recurrent chain of `n_predict` small stages over the target's last hidden state s (after the
target's final norm). With `scale_input`, first s = ln0(s) / sqrt(2) (a norm without weights).
Stage i takes the state and the token x the chain stands on (the target's own token for stage
0, the previous stage's draft after that):

    state = proj[i](state) + emb[i](x) * emb_weight / state_weight
    state = gelu(ln[i](state))                    # ln: x * rsqrt(mean(x^2) + 1e-6) * w + b
    logits_i = head[i](state)                     # over the full vocabulary

with state_weight = 0.5 ** (0.5 / n_predict) and emb_weight = sqrt((1 - state_weight^2) *
inner_dim / 2). fms-extras writes the sum as proj(state) * state_weight + emb(x) * emb_weight;
the norm that follows takes the common factor out, so the two differ only in where the norm's
epsilon falls (vLLM's form is used here: it is what a server drafts with).

Weights (no biases but the norms'): `emb.{i}` [V, inner], `proj.0` [inner, emb_dim], `proj.{i>0}`
[inner, inner], `head.{i}` [V, inner], `ln.{i}.weight` / `ln.{i}.bias` [inner]. With
`tie_weights` one embedding, one head, one norm and one `proj.1` serve every stage (`proj.0`,
from the target's width, stays its own): the modules are shared, so the file holds `emb.0`,
`proj.0`, `proj.1`, `head.0` and `ln.0` only. `inner_dim` 0 means emb_dim.

`forward` is the teacher-forced training pass (fms-extras' `forward`): every position's state
runs the whole chain on the true tokens at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from specdec_core.errors import SpecdecError

MODEL_TYPE = "mlp_speculator"
ARCHITECTURE = "MLPSpeculatorPreTrainedModel"  # as fms-extras' Hugging Face wrapper saves it
SQRT2 = math.sqrt(2.0)
# A stage from the target starts at this share of the target's final-norm weight: the
# target's ranking at a quarter of its logit scale (see `MLPSpeculator.start_from_target`)
START_NORM_SHARE = 0.25


@dataclass(frozen=True)
class SpeculatorConfig:
    """config.json of an MLP speculator (vLLM's `MLPSpeculatorConfig`)."""

    emb_dim: int  # the target's hidden size
    vocab_size: int
    n_predict: int = 3  # stages: the longest chain it drafts
    inner_dim: int = 0  # 0: emb_dim
    tie_weights: bool = False
    scale_input: bool = False
    # tree drafting (unused here); () takes 5, 4, 3, ... (vLLM's default for 3 stages)
    top_k_tokens_per_head: tuple[int, ...] = field(default=())
    n_candidates: int = 5  # tree drafting (unused here)

    def __post_init__(self) -> None:
        if self.n_predict < 1:
            raise SpecdecError(
                f"the MLP speculator's config.json gives n_predict {self.n_predict}; it needs "
                "1 or more stages"
            )
        if self.tie_weights and self.n_predict < 2:
            raise SpecdecError(
                "the MLP speculator's config.json ties the weights of a single stage "
                "(tie_weights with n_predict 1), which vLLM refuses; set tie_weights false"
            )
        if not self.top_k_tokens_per_head:
            top_k = tuple(max(1, 5 - i) for i in range(self.n_predict))
            object.__setattr__(self, "top_k_tokens_per_head", top_k)
        if len(self.top_k_tokens_per_head) != self.n_predict:
            raise SpecdecError(
                f"the MLP speculator's config.json lists {len(self.top_k_tokens_per_head)} "
                f"top_k_tokens_per_head for {self.n_predict} stages (n_predict); give one per "
                "stage"
            )

    @property
    def width(self) -> int:
        """The inner dimension the stages work in."""
        return self.inner_dim or self.emb_dim

    @property
    def state_weight(self) -> float:
        return 0.5 ** (0.5 / self.n_predict)

    @property
    def emb_weight(self) -> float:
        return math.sqrt((1 - self.state_weight**2) * (self.width / 2))

    def to_json(self) -> dict:
        """config.json as vLLM's and fms-extras' MLPSpeculatorConfig read it."""
        return {
            "architectures": [ARCHITECTURE],
            "model_type": MODEL_TYPE,
            "emb_dim": self.emb_dim,
            "inner_dim": self.inner_dim,
            "vocab_size": self.vocab_size,
            "n_predict": self.n_predict,
            "top_k_tokens_per_head": list(self.top_k_tokens_per_head),
            "n_candidates": self.n_candidates,
            "tie_weights": self.tie_weights,
            "scale_input": self.scale_input,
        }


class SpeculatorNorm(nn.Module):
    """vLLM's MLPSpeculatorLayerNorm: x / rms(x) (no mean subtracted), then an optional
    elementwise scale and shift."""

    def __init__(self, size: int, affine: bool = True, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size)) if affine else None
        self.bias = nn.Parameter(torch.zeros(size)) if affine else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight is not None:
            x = x * self.weight + self.bias
        return x


class MLPSpeculator(nn.Module):
    def __init__(self, config: SpeculatorConfig) -> None:
        super().__init__()
        self.config = config
        n, d, vocab = config.n_predict, config.width, config.vocab_size
        if config.tie_weights:  # one module per role, shared by the stages
            emb, head = nn.Embedding(vocab, d), nn.Linear(d, vocab, bias=False)
            ln, tied = SpeculatorNorm(d), nn.Linear(d, d, bias=False)
            self.emb = nn.ModuleList([emb] * n)
            self.proj = nn.ModuleList([nn.Linear(config.emb_dim, d, bias=False)] + [tied] * (n - 1))
            self.head = nn.ModuleList([head] * n)
            self.ln = nn.ModuleList([ln] * n)
        else:
            self.emb = nn.ModuleList(nn.Embedding(vocab, d) for _ in range(n))
            self.proj = nn.ModuleList(
                nn.Linear(config.emb_dim if i == 0 else d, d, bias=False) for i in range(n)
            )
            self.head = nn.ModuleList(nn.Linear(d, vocab, bias=False) for _ in range(n))
            self.ln = nn.ModuleList(SpeculatorNorm(d) for _ in range(n))
        self.ln0 = SpeculatorNorm(config.emb_dim, affine=False) if config.scale_input else None
        self.activation = nn.GELU()

    @property
    def n_predict(self) -> int:
        return self.config.n_predict

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """fms-extras' initialisation: truncated normal weights of std 1/sqrt(inner_dim), norms
        at the identity."""
        std = 1 / math.sqrt(self.config.width)
        with torch.no_grad():
            for name, param in self.weights().items():
                if name.startswith("ln."):
                    param.fill_(1.0 if name.endswith("weight") else 0.0)
                else:
                    param.copy_(_trunc_normal(param.shape, std, generator))

    def start_from_target(
        self, embedding: torch.Tensor, lm_head: torch.Tensor, final_norm: torch.Tensor
    ) -> None:
        """Start every stage from the target (its width must be the stages'): `emb.i` its input
        embedding [V, d], `head.i` its output head [V, d], `ln.i` its final norm's weight w [d]
        times START_NORM_SHARE (bias 0; the target's RMSNorm has this norm's form), and each
        projection `alpha * diag(1 / w)`.

        So a stage starts by passing the state through: stage 0's input is the target's
        final-norm state h = u * w with rms(u) = 1, proj.0 turns it into alpha * u, and ln.0
        multiplies the normalised sum by w / 4, so head.0 sees (up to gelu and the token's
        term) the target's own state h / 4: the target's ranking at that state, a quarter as
        sharp. That ranking is of the token the stage stands on, not of the one it predicts,
        so at the target's full scale a stage starts confident and wrong (cross-entropy 25 to
        34 on the embedded model against 10.8 for uniform) and spends its first steps
        unlearning it; at a quarter it starts near uniform and learns the step ahead sooner.
        alpha keeps the token term's share of the sum where vLLM's constants put it for
        fms-extras' initialisation (state variance share state_weight^2, token share
        1 - state_weight^2): alpha = rms(emb) * (emb_weight / state_weight) * state_weight /
        sqrt(1 - state_weight^2). With `scale_input` stage 0's input is normalised first
        (ln0(h) / sqrt(2)), so proj.0 is scaled up by sqrt(2) * rms(w) to match. Later stages
        take the same projection; their input, after gelu, is smaller, so the token's term
        weighs somewhat more there."""
        config = self.config
        vocab, width = config.vocab_size, config.width
        if config.width != config.emb_dim:
            raise SpecdecError(
                f"a speculator of inner_dim {config.inner_dim} cannot start from a target of "
                f"width {config.emb_dim}; use inner_dim 0 (the target's width)"
            )
        for name, table in (("embedding", embedding), ("output head", lm_head)):
            if tuple(table.shape) != (vocab, width):
                raise SpecdecError(
                    f"the target's {name} is {tuple(table.shape)}, the speculator needs "
                    f"{(vocab, width)}; train it for this target"
                )
        table = embedding.detach().float()
        w = final_norm.detach().float()
        ratio = config.state_weight / math.sqrt(1 - config.state_weight**2)
        alpha = float(table.pow(2).mean().sqrt()) * config.emb_weight / config.state_weight * ratio
        inverse = torch.where(w.abs() < 1e-3, torch.zeros_like(w), 1 / w)
        first = alpha * (SQRT2 * float(w.pow(2).mean().sqrt()) if config.scale_input else 1.0)
        with torch.no_grad():
            for stage in range(self.n_predict):
                self.emb[stage].weight.copy_(table)
                self.head[stage].weight.copy_(lm_head.detach().float())
                self.ln[stage].weight.copy_(w * START_NORM_SHARE)
                self.ln[stage].bias.zero_()
                scale = first if stage == 0 else alpha
                self.proj[stage].weight.copy_(torch.diag(inverse * scale))

    def vocab_tables(self) -> list[nn.Parameter]:
        """The vocabulary-sized weights (each stage's embedding and head), each once."""
        tables = {id(m.weight): m.weight for role in (self.emb, self.head) for m in role}
        return list(tables.values())

    def weights(self) -> dict[str, nn.Parameter]:
        """The stored weights by name, each once (a tied module under its first stage's name):
        what a checkpoint of this layout holds."""
        return dict(self.named_parameters())

    def first_state(self, hidden: torch.Tensor) -> torch.Tensor:
        """The chain's starting state from the target's final-norm hidden state(s)."""
        hidden = hidden.to(self.proj[0].weight.dtype)
        return self.ln0(hidden) / SQRT2 if self.ln0 is not None else hidden

    def advance(self, stage: int, state: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Stage `stage`'s new state from [..., width or emb_dim] states and the [...] tokens
        they stand on."""
        config = self.config
        z = self.emb[stage](tokens)
        state = self.proj[stage](state) + z * (config.emb_weight / config.state_weight)
        return self.activation(self.ln[stage](state))

    def step(
        self, stage: int, state: torch.Tensor, tokens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`advance`, then the new state's [..., V] logits of the token after `tokens`."""
        state = self.advance(stage, state, tokens)
        return state, self.head[stage](state)

    def forward(self, hidden: torch.Tensor, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Teacher-forced logits of every stage: `hidden` [B, T, emb_dim] (the target's state at
        positions 0..T-1), `tokens` [B, T + n_predict - 1] with tokens[:, t + i] the token stage
        i stands on at position t (the true x_{t+1+i}) -> n_predict tensors [B, T, V], stage
        i's at t predicting x_{t+2+i}."""
        width = hidden.shape[1]
        state = self.first_state(hidden)
        logits = []
        for stage in range(self.n_predict):
            state, out = self.step(stage, state, tokens[:, stage : stage + width])
            logits.append(out)
        return logits

    def untied(self) -> MLPSpeculator:
        """The same speculator in the untied layout: every stage its own copy of the shared
        weights (drafts exactly as this one does)."""
        copy = MLPSpeculator(replace(self.config, tie_weights=False))
        copy.to(self.proj[0].weight.dtype)
        state = {}
        for stage in range(self.n_predict):
            for role in ("emb", "head", "ln", "proj"):
                module = getattr(self, role)[stage]
                for name, value in module.state_dict().items():
                    state[f"{role}.{stage}.{name}"] = value.clone()
        copy.load_state_dict(state)
        return copy


def _trunc_normal(shape, std: float, generator: torch.Generator | None) -> torch.Tensor:
    """A normal of `std` truncated at ±2 (absolute, as nn.init.trunc_normal_'s defaults)."""
    out = torch.empty(shape)
    torch.nn.init.trunc_normal_(out, 0.0, std, generator=generator)
    return out
