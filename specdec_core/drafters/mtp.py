"""Drafting with a model's native MTP layer: EAGLE-1's chain and EAGLE-2's tree, unchanged.

An MTP layer is an EAGLE-1 step with its norms placed differently (mtp/module.py speaks the
EAGLE head's stepping API): the head's cache holds one row per committed pair (h_t, x_{t+1}),
drafting feeds the layer's own state back, commit replaces the guesses by the target's rows.
The one difference is what the target hands over: `MtpModule.from_target` turns the target's
last hidden state (after its final norm) into the state the family's engine passes (MiMo:
before the final norm), for `begin` and `commit` alike; drafted states feed back as they are.

- `MtpDrafter` (method `mtp`): a chain of k tokens, q = the layer's distribution under the
  run's temperature and top-p (drafters/eagle.py).
- `MtpTreeDrafter` (method `mtp-tree`): the EAGLE-2 tree, greedy beam and rerank at T = 0,
  i.i.d. draws at T > 0, sized for this device (drafters/eagle2/drafter.py).
Both are verified losslessly by the decode loop (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import replace

from specdec_core.decoding.forward_costs import ForwardCosts
from specdec_core.decoding.target import TargetOutput
from specdec_core.drafters.eagle import EagleDrafter
from specdec_core.drafters.eagle2.drafter import Eagle2Drafter
from specdec_core.drafters.tree_sizing import AcceptanceEstimates
from specdec_core.heads.mtp.module import MtpModule
from specdec_core.loop.drafter import Drafter
from specdec_core.models.loading import LoadedModel


def handed_over(module: MtpModule, features: TargetOutput) -> TargetOutput:
    """The target's rows with their hidden states as the MTP layer's engine passes them."""
    return replace(features, hidden=module.from_target(features.hidden))


class MtpDrafter(EagleDrafter):
    name = "mtp"

    def __init__(self, module: MtpModule, target_layers: int) -> None:
        super().__init__(module, target_layers)

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        super().begin(ids, handed_over(self.head, features))

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        super().commit(ids, accepted, handed_over(self.head, features))


class MtpTreeDrafter(Eagle2Drafter):
    name = "mtp-tree"

    def __init__(
        self,
        module: MtpModule,
        target_model,
        costs: ForwardCosts | None = None,
        acceptance: AcceptanceEstimates | None = None,
    ) -> None:
        super().__init__(module, target_model, costs=costs, acceptance=acceptance)

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        super().begin(ids, handed_over(self.head, features))

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        super().commit(ids, accepted, handed_over(self.head, features))


def build_chain(target: LoadedModel, module, history, costs, acceptance) -> Drafter:
    """The registry's builder for method `mtp` (`module`: mtp.load.load_mtp's)."""
    layers = target.model.config.get_text_config(decoder=True).num_hidden_layers
    return MtpDrafter(module, int(layers))


def build_tree(
    target: LoadedModel,
    module,
    history,
    costs: ForwardCosts,
    acceptance: AcceptanceEstimates,
) -> Drafter:
    """The registry's builder for method `mtp-tree`."""
    return MtpTreeDrafter(module, target.model, costs, acceptance)
