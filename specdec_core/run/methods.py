"""Method name -> drafter, from a registry (not an if/elif chain).

Each entry says which extra model it needs ("draft" for a classic draft LM, "head" for an
EAGLE head, nothing for n-gram / autoregressive) so the CLI and GUI load exactly that, the
family it belongs to (`FAMILIES`, the groups of the window's method picker) with one line on
what it needs and what it drafts, and the method parameters it reads (`params`: names and
defaults, set with `--method-param NAME=VALUE` into `DecodeConfig.method_params`). A
builder is given the suffix history the run drafts from (drafters/suffix.py; None: an empty
one of its own); only the suffix methods use it. It is also given the forward costs and the
acceptance estimates that EAGLE-2's tree sizing keeps (forward_costs.py, tree_sizing.py), owned
by the caller (a run, a benchmark, an engine; None: a fresh pair for this drafter); only the
EAGLE-2 methods use them. `is_tree` answers from the torch-free
specdec_core/run/method_kinds.py, whose tree methods are the ones flagged `tree` here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from specdec_core.decoding.forward_costs import ForwardCosts
from specdec_core.drafters.autoregressive import AutoregressiveDrafter
from specdec_core.drafters.dflash import PARAMS as DFLASH_PARAMS
from specdec_core.drafters.layer_skip import PARAMS as LAYER_SKIP_PARAMS
from specdec_core.drafters.lookahead import PARAMS as LOOKAHEAD_PARAMS
from specdec_core.drafters.ngram import NgramDrafter
from specdec_core.drafters.pard import PARAMS as PARD_PARAMS
from specdec_core.drafters.suffix import History, SuffixDrafter
from specdec_core.drafters.swift import PARAMS as SWIFT_PARAMS
from specdec_core.drafters.tree_sizing import AcceptanceEstimates
from specdec_core.errors import SpecdecError
from specdec_core.loop.drafter import Drafter
from specdec_core.models.loading import LoadedModel
from specdec_core.run.method_kinds import is_tree

if TYPE_CHECKING:
    from specdec_core.heads.dflash.draft import DFlashDraft
    from specdec_core.heads.eagle.head import EagleHead
    from specdec_core.heads.medusa.head import MedusaHeads
    from specdec_core.heads.mlp_speculator.head import MLPSpeculator
    from specdec_core.heads.mtp.module import MtpModule

# what a method needs besides the target
Extra: TypeAlias = (
    "LoadedModel | EagleHead | MedusaHeads | MLPSpeculator | MtpModule | DFlashDraft | None"
)

__all__ = [
    "FAMILIES",
    "METHODS",
    "Method",
    "check_method_params",
    "build_drafter",
    "get_method",
    "is_chain",
    "is_tree",
    "uses_history",
]


# the groups of the method picker, in its order
FAMILIES = (
    "baseline",
    "EAGLE heads",
    "other heads",
    "draft model",
    "parallel drafting",
    "no training",
)


@dataclass(frozen=True)
class BuildInputs:
    """What a method's builder is given to make its drafter."""

    target: LoadedModel
    extra: Extra  # what the method needs besides the target (None: nothing)
    history: History | None  # the suffix history (None: a suffix method makes its own)
    costs: ForwardCosts  # the forward costs an EAGLE-2 tree is sized with
    acceptance: AcceptanceEstimates  # and its acceptance estimates

    def arguments(
        self,
    ) -> tuple[LoadedModel, Extra, History | None, ForwardCosts, AcceptanceEstimates]:
        """(target, extra, history, costs, acceptance): a drafter module's registry builder's
        arguments, in order."""
        return (self.target, self.extra, self.history, self.costs, self.acceptance)


# the inputs -> the drafter
Builder: TypeAlias = Callable[[BuildInputs], Drafter]


@dataclass(frozen=True)
class Method:
    name: str
    label: str  # for menus and tables
    needs: str | None  # "draft", "head" or None
    build: Builder
    tree: bool = False  # drafts a tree (tree settings apply, no chain length k to tune)
    history: bool = False  # drafts from the suffix history of earlier runs
    family: str = "baseline"  # one of FAMILIES
    summary: str = ""  # one line: what it needs, what it drafts
    params: tuple[tuple[str, float], ...] = ()  # method parameters and their defaults
    k: bool = True  # a chain method whose length is k (lookahead sizes itself by its params)


def _classic(given: BuildInputs) -> Drafter:
    """The draft's own tokens with the target's tokenizer; else drafts/cross_tokenizer.py
    (universal assisted generation at T = 0, token-level intersection at T > 0)."""
    from specdec_core.drafters.cross_tokenizer import build_classic

    return build_classic(given.target, given.extra)


def _pard(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.pard import build_pard

    return build_pard(given.target, given.extra)


def _dflash(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.dflash import DFlashDrafter

    return DFlashDrafter(given.extra)


def _ddtree(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.ddtree import DDTreeDrafter

    return DDTreeDrafter(given.extra, given.target.model, given.costs)


def _peagle(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.peagle import PEagleDrafter
    from specdec_core.heads.eagle.peagle import PEagleHead

    if not isinstance(given.extra, PEagleHead):
        raise SpecdecError(
            "method 'peagle' drafts with a P-EAGLE head (an EAGLE-3 head with mask_hidden, "
            "speculators' peagle format) and this head has none; pass --head with a P-EAGLE "
            "head (speculators trains one: --speculator-type peagle)"
        )
    return PEagleDrafter(given.extra, given.target.model.config.num_hidden_layers)


def _eagle(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.eagle import EagleDrafter

    return EagleDrafter(given.extra, given.target.model.config.num_hidden_layers)


def _eagle2(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.eagle2.drafter import Eagle2Drafter

    return Eagle2Drafter(
        given.extra, given.target.model, costs=given.costs, acceptance=given.acceptance
    )


def _eagle2_lookup(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.eagle2.lookup import Eagle2LookupDrafter

    return Eagle2LookupDrafter(given.extra, given.target.model, given.costs, given.acceptance)


def _medusa(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.medusa import build_medusa

    return build_medusa(*given.arguments())


def _mlp_speculator(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.mlp_speculator import build

    return build(given.target, given.extra)


def _mtp(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.mtp import build_chain

    return build_chain(given.target, given.extra, None, None, None)


def _mtp_tree(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.mtp import build_tree

    return build_tree(*given.arguments())


def _layer_skip(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.layer_skip import build_layer_skip

    return build_layer_skip(given.target, given.extra, None, None, None)


def _swift(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.swift import build_swift

    return build_swift(given.target, given.extra, None, None, None)


def _lookahead(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.lookahead import build_lookahead

    return build_lookahead(*given.arguments())


def vocabulary_key(target: LoadedModel) -> tuple:
    """What a suffix history is kept per: ids of one tokenizer mean nothing to another."""
    return (getattr(target.tokenizer, "name_or_path", ""), target.vocab_size)


def _eagle2_suffix(given: BuildInputs) -> Drafter:
    from specdec_core.drafters.eagle2.suffix import Eagle2SuffixDrafter

    key = vocabulary_key(given.target)
    return Eagle2SuffixDrafter(
        given.extra, given.target.model, key, given.history, given.costs, given.acceptance
    )


def _suffix(given: BuildInputs) -> Drafter:
    return SuffixDrafter(vocabulary_key(given.target), given.history)


METHODS: dict[str, Method] = {
    "ar": Method(
        "ar",
        "Autoregressive",
        None,
        lambda _: AutoregressiveDrafter(),
        summary="the target alone, one token per forward: the reference every speedup is against",
    ),
    "eagle": Method(
        "eagle",
        "EAGLE (chain)",
        "head",
        _eagle,
        family="EAGLE heads",
        summary="an EAGLE-1/3 head on the target's features drafts a chain of k tokens",
    ),
    "eagle2": Method(
        "eagle2",
        "EAGLE-2 (tree)",
        "head",
        _eagle2,
        tree=True,
        family="EAGLE heads",
        summary="the EAGLE head grows a tree by confidence, sized for this device",
    ),
    "eagle2-lookup": Method(
        "eagle2-lookup",
        "EAGLE-2 + prompt lookup",
        "head",
        _eagle2_lookup,
        tree=True,
        family="EAGLE heads",
        summary="the EAGLE-2 tree with a prompt-lookup chain merged in",
    ),
    "eagle2-suffix": Method(
        "eagle2-suffix",
        "EAGLE-2 + suffix decoding",
        "head",
        _eagle2_suffix,
        tree=True,
        history=True,
        family="EAGLE heads",
        summary="the EAGLE-2 tree with the suffix tree of earlier runs merged in",
    ),
    "medusa": Method(
        "medusa",
        "Medusa (tree)",
        "medusa",
        _medusa,
        tree=True,
        family="other heads",
        summary="Medusa-1 heads on the target's last hidden state draft a sparse tree of top-k",
    ),
    "mlp-speculator": Method(
        "mlp-speculator",
        "MLP speculator (chain)",
        "speculator",
        _mlp_speculator,
        family="other heads",
        summary="IBM's MLP speculator on the target's last hidden state drafts a chain",
    ),
    "mtp": Method(
        "mtp",
        "Native MTP (chain)",
        "mtp",
        _mtp,
        family="other heads",
        summary="the model's own MTP layer (DeepSeek-V3, GLM-4.5, Qwen3-Next, MiMo) drafts a chain",
    ),
    "mtp-tree": Method(
        "mtp-tree",
        "Native MTP (tree)",
        "mtp",
        _mtp_tree,
        tree=True,
        family="other heads",
        summary="the model's own MTP layer grows an EAGLE-2 tree sized for this device",
    ),
    "classic": Method(
        "classic",
        "Classic draft",
        "draft",
        _classic,
        family="draft model",
        summary="a small causal LM drafts a chain of k tokens, in another tokenizer too",
    ),
    "pard": Method(
        "pard",
        "PARD (parallel draft)",
        "draft",
        _pard,
        family="parallel drafting",
        summary="a PARD draft model proposes k tokens in one forward, from k - 1 mask tokens",
        params=PARD_PARAMS,
    ),
    "dflash": Method(
        "dflash",
        "DFlash (block)",
        "dflash",
        _dflash,
        family="parallel drafting",
        summary="a DFlash block drafter on the target's features drafts a whole block in one "
        "non-causal pass",
        params=DFLASH_PARAMS,
        k=False,
    ),
    "ddtree": Method(
        "ddtree",
        "DDTree (DFlash tree)",
        "dflash",
        _ddtree,
        tree=True,
        family="parallel drafting",
        summary="the best-first tree of one DFlash pass's per-position tokens, sized for this "
        "device",
        params=DFLASH_PARAMS,
    ),
    "peagle": Method(
        "peagle",
        "P-EAGLE (parallel)",
        "head",
        _peagle,
        family="parallel drafting",
        summary="a P-EAGLE head drafts a chain of k tokens in one pass, from k - 1 mask rows",
    ),
    "ngram": Method(
        "ngram",
        "N-gram lookup",
        None,
        lambda _: NgramDrafter(),
        family="no training",
        summary="copies what followed the context's last n-gram in the prompt or output",
    ),
    "suffix": Method(
        "suffix",
        "Suffix decoding (history)",
        None,
        _suffix,
        history=True,
        family="no training",
        summary="a suffix tree over this and earlier runs proposes what followed before",
    ),
    "lookahead": Method(
        "lookahead",
        "Lookahead decoding",
        None,
        _lookahead,
        family="no training",
        summary="the target guesses ahead by Jacobi iteration; the n-grams it traced are "
        "verified in the same forward",
        params=LOOKAHEAD_PARAMS,
        k=False,
    ),
    "layer-skip": Method(
        "layer-skip",
        "Layer skip (early exit)",
        None,
        _layer_skip,
        family="no training",
        summary="the target drafts with its first three quarters of layers, verifies with all",
        params=LAYER_SKIP_PARAMS,
    ),
    "swift": Method(
        "swift",
        "SWIFT (layer-skip search)",
        None,
        _swift,
        family="no training",
        summary="the target drafts skipping layers it picks on the fly from the context",
        params=SWIFT_PARAMS,
    ),
}


def is_chain(name: str) -> bool:
    """Does method `name` draft a chain with a length k? (not `ar`, trees, lookahead's
    self-sized window or HF baselines)"""
    method = METHODS.get(name)
    return method is not None and method.name != "ar" and not method.tree and method.k


def uses_history(name: str) -> bool:
    """Does method `name` draft from the suffix history? (False outside the registry.)"""
    method = METHODS.get(name)
    return method is not None and method.history


def check_method_params(names: Iterable[str], params: dict[str, float]) -> None:
    """Fail before any model loads: a parameter that none of the methods `names` reads is bad
    input (outside the registry, e.g. an HF baseline, a method reads none)."""
    known: dict[str, float] = {}
    for name in names:
        if name in METHODS:
            known.update(METHODS[name].params)
    for param in params:
        if param not in known:
            offered = ", ".join(known) if known else "none"
            raise SpecdecError(
                f"--method-param {param}: no method here reads it (their parameters: {offered})"
            )


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise SpecdecError(
            f"unknown method '{name}'; choose one of: {', '.join(METHODS)}"
        ) from None


def build_drafter(
    name: str,
    target: LoadedModel,
    extra: Extra = None,
    history: History | None = None,
    costs: ForwardCosts | None = None,
    acceptance: AcceptanceEstimates | None = None,
) -> Drafter:
    """The drafter of method `name`; a suffix method drafts from `history` (None: an empty one
    of its own); an EAGLE-2 method sizes its tree with `costs` and `acceptance` (None: a fresh
    one each)."""
    method = get_method(name)
    if method.needs and extra is None:
        raise SpecdecError(f"method '{name}' needs a {method.needs}; pass --{method.needs} SPEC")
    costs = costs if costs is not None else ForwardCosts()
    acceptance = acceptance if acceptance is not None else AcceptanceEstimates()
    return method.build(BuildInputs(target, extra, history, costs, acceptance))
