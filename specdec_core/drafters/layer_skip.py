"""Self-speculative drafting by layer skipping: the target drafts with a subset of its own layers.

Two fixed choices of the layers (a `SkipSet`, layer_subset.py):

- early exit at layer E: layers [0, E), then the final norm and the lm_head (LayerSkip,
  Elhoushi et al. 2024; transformers' `assistant_early_exit`);
- an explicit list of skipped layers (Draft & Verify, Zhang et al. 2024).

Neither given: an exit three quarters of the way up (`default_exit`).

SWIFT (drafters/swift.py) searches the list during the generation instead. No extra weights:
one copy of the model and one KV cache.

Drafting (`draft_chain`, shared with SWIFT). Between steps the target's cache holds every
committed token but the pending one, `s = len(ids) - 1` positions. A draft of k tokens feeds
[pending, d1, .., d_{k-1}], one token per forward, at positions s, s + 1, .. through the kept
layers, which read the committed entries that full forwards wrote (as Draft & Verify and SWIFT
do) and append their own; every layer of the cache is then cropped back to `s` before
`propose` returns (`layer_subset.restore`, also on an error), so the verify forward writes
every layer's entries for the drafted tokens and the cache is bit-identical to before.
Positions and masks come from `s`, not from the cache (layer_subset.py), so any layer may be
skipped.

Stop: after k tokens (`config.k`), or after a token whose draft confidence — the largest
probability of the draft's softmax at temperature 1, whatever the sampling temperature — is
below `confidence`: that token is still proposed (its distribution is already paid for) but
ends the draft, as SWIFT's drafting loop does. `CONFIDENCE` is the default; 0 never stops
early.

Method parameters (`PARAMS`, `config.method_params`): `exit_layer` (0: the drafter's own
choice) and `confidence`. `status()` names the skipped layers on every `Step`.

Sampling: at T = 0 the argmax (a deterministic proposal, q = None); at T > 0 each token is
drawn from q = sampling.probs(draft logits, T, top_p) and the q rows are returned, so the
lossless chain verifier reproduces the target's distribution exactly. The draft's stop rule
depends only on the draft's own state, so it changes how many tokens are proposed, never the
output's distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import DrafterStatus, SkippedLayers
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.sampling import probs, sample
from specdec_core.decoding.target import Target, TargetOutput
from specdec_core.drafters.layer_subset import SkipSet, check, forward_subset, restore
from specdec_core.errors import SpecdecError
from specdec_core.loop.drafter import Drafter
from specdec_core.models.loading import LoadedModel

CONFIDENCE = 0.8  # default stop threshold on the draft's top probability (SWIFT's; 0: never)
# method parameters (`--method-param NAME=VALUE`) and their defaults; exit_layer 0 keeps the
# drafter's own choice (the registry's: `default_exit`)
PARAMS: tuple[tuple[str, float], ...] = (("exit_layer", 0.0), ("confidence", CONFIDENCE))


@torch.inference_mode()
def draft_chain(
    target: Target,
    ids: list[int],
    skip: SkipSet,
    config: DecodeConfig,
    generator: torch.Generator,
    confidence: float,
) -> Proposal:
    """Up to `config.k` tokens drafted through the sublayers `skip` leaves (module docstring);
    the target's cache is as it was when this returns."""
    start = len(ids) - 1  # the cache holds ids[:-1]
    tokens: list[int] = []
    rows: list[torch.Tensor] = []
    feed = ids[-1]
    try:
        for _ in range(config.k):
            logits = forward_subset(target, [feed], start + len(tokens), skip)[0]  # [V]
            if config.greedy:
                token = int(logits.argmax())
            else:
                q = probs(logits, config.temperature, config.top_p)
                token = sample(q, generator)
                rows.append(q)
            tokens.append(token)
            if confidence > 0 and float(torch.softmax(logits, -1).max()) < confidence:
                break
            feed = token
    finally:
        restore(target.cache, start)
    return Proposal(tokens=tokens, q=torch.stack(rows) if rows else None)


def parse_layers(text: str, where: str = "--skip-layers") -> tuple[int, ...]:
    """`4,6,8-12` -> (4, 6, 8, 9, 10, 11, 12); `where` names the setting in the error."""
    layers: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        first, dash, last = part.partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise SpecdecError(
                f"{where} expects layer numbers and ranges like 4,6,8-12 (got '{text}')"
            ) from None
        if high < low:
            raise SpecdecError(f"{where}: the range {part} is empty; write it low-high")
        layers.extend(range(low, high + 1))
    return tuple(sorted(set(layers)))


def default_exit(num_layers: int) -> int:
    """The exit layer when none is given: three quarters of the way up (at least layer 1)."""
    return max(1, num_layers * 3 // 4)


def fixed_skip(
    num_layers: int, exit_layer: int | None = None, skip_layers: Sequence[int] | None = None
) -> SkipSet:
    """The skip set of an early exit at `exit_layer` or of the list `skip_layers` (one of
    them; neither: `default_exit(num_layers)`)."""
    if exit_layer is not None and skip_layers is not None:
        raise SpecdecError("give an exit layer or a list of skipped layers, not both")
    if skip_layers is not None:
        odd = [i for i in skip_layers if not 0 <= i < num_layers]
        if odd:
            raise SpecdecError(
                f"layer {odd[0]} does not exist: the model has layers 0..{num_layers - 1}; "
                "choose skipped layers in that range"
            )
        if len(set(skip_layers)) >= num_layers:
            raise SpecdecError("the draft would skip every layer; keep at least one")
        return SkipSet.layers(skip_layers)
    exit_layer = default_exit(num_layers) if exit_layer is None else exit_layer
    if not 1 <= exit_layer < num_layers:
        raise SpecdecError(
            f"the exit layer must be in 1..{num_layers - 1} for a model of {num_layers} "
            f"layers (got {exit_layer}); at {num_layers} the draft would be the target itself"
        )
    return SkipSet.early_exit(exit_layer, num_layers)


@dataclass(frozen=True)
class LayerChoice:
    """The layers a fixed drafter skips and when its draft stops."""

    skip: SkipSet
    exit_layer: int | None  # None: an explicit skip list
    confidence: float

    def record(self) -> dict[str, Any]:
        return {
            "exit_layer": self.exit_layer,
            **self.skip.record(),
            "draft_confidence": self.confidence,
        }


def skipped_layers(skip: SkipSet, num_layers: int) -> SkippedLayers:
    """`skip` as a step's `DrafterStatus` shows it."""
    return SkippedLayers(num_layers, skip.whole, skip.attention_only, skip.mlp_only)


def check_confidence(confidence: float) -> None:
    if not 0.0 <= confidence <= 1.0:
        raise SpecdecError(
            f"--method-param confidence={confidence:g}: the draft confidence is a "
            "probability; choose it in [0, 1] (0 never stops a draft early)"
        )


class LayerSkipDrafter(Drafter):
    """Drafts with a fixed early exit or skip list (module docstring). The constructor's
    choice is the default; `config.method_params` `exit_layer` (non-zero) and `confidence`
    override it for a generation."""

    name = "layer-skip"

    def __init__(
        self,
        num_layers: int,
        exit_layer: int | None = None,
        skip_layers: Sequence[int] | None = None,
        confidence: float = CONFIDENCE,
    ) -> None:
        check_confidence(confidence)
        skip = fixed_skip(num_layers, exit_layer, skip_layers)
        if skip_layers is None and exit_layer is None:
            exit_layer = default_exit(num_layers)
        self.num_layers = num_layers
        self.defaults = LayerChoice(skip, exit_layer, confidence)
        self.current = self.defaults  # the choice of the latest `propose`
        self.target: Target | None = None

    def choice(self, config: DecodeConfig) -> LayerChoice:
        """The constructor's choice as `config.method_params` overrides it."""
        exit_layer = config.method_int("exit_layer", 0, "layer-skip")
        confidence = config.method_param("confidence", self.defaults.confidence)
        check_confidence(confidence)
        if not exit_layer:
            return replace(self.defaults, confidence=confidence)
        skip = fixed_skip(self.num_layers, exit_layer=exit_layer)
        return LayerChoice(skip, exit_layer, confidence)

    def describe(self, config: DecodeConfig) -> dict[str, Any]:
        return self.choice(config).record()

    def status(self) -> DrafterStatus:
        """The layers this generation's drafts skip, for each step's `Step.status`."""
        return DrafterStatus(skipped=skipped_layers(self.current.skip, self.num_layers))

    def attach(self, target: Target) -> None:
        check(target.model, self.defaults.skip)
        self.target = target

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        if self.target is None:
            raise SpecdecError("layer skipping drafts through the target: attach it first")

    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        if config.k <= 0:
            return EMPTY
        choice = self.current = self.choice(config)
        return draft_chain(self.target, ids, choice.skip, config, generator, choice.confidence)

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        pass  # nothing of its own: the target's cache was restored in `propose`


def build_layer_skip(target: LoadedModel, extra, history, costs, acceptance) -> Drafter:
    """The registry's builder: the default exit layer and confidence."""
    return LayerSkipDrafter(target.model.config.get_text_config(decoder=True).num_hidden_layers)
