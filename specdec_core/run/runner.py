"""Run one method on one prompt to completion: the shared path of the CLI and benchmarks.

`load_extra` loads what a method needs besides the target (a draft model, an EAGLE head) through
the `EXTRA_LOADERS` registry, so adding a method never touches the CLI; the CLI, the bench, the
sweeps and the window all load through it.

`start` is the one way a run starts, for the window's engine, `specdec generate` and the
benchmark (through `run` and `measure.run_one`) alike: the policy profile applied to the prompt
(`policy_profile.profiled_config`; the kind it picked is in the Started and summary config
under `POLICY_KIND`), the drafter built from the method registry, the decode loop's events.
It sizes EAGLE-2 trees with the forward costs and acceptance estimates it is given (their
owner: a benchmark, a sweep's measurement, an engine, a test); a run given none makes a fresh
pair of its own, so its result never depends on what ran before it in the process. `run`
runs `start` to the end and returns the summary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdec_core.control import Progress, StopFlag
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.cost_store import CostStore
from specdec_core.decoding.events import Event, Finished, RunSummary
from specdec_core.decoding.forward_costs import ForwardCosts
from specdec_core.decoding.prefix_cache import PrefixCache
from specdec_core.drafters.suffix import History
from specdec_core.drafters.tree_sizing import AcceptanceEstimates
from specdec_core.errors import SpecdecError
from specdec_core.loop.decode import generate
from specdec_core.models.loading import LoadedModel, LoadOptions, load_model
from specdec_core.resources import bundled_head, names_bundled_head, resource_path
from specdec_core.run.method_kinds import HF_METHODS
from specdec_core.run.methods import Extra, build_drafter, get_method
from specdec_core.run.policy_profile import POLICY_KIND, PolicyProfile, profiled_config

if TYPE_CHECKING:
    import torch

    from specdec_core.heads.dflash.draft import DFlashDraft
    from specdec_core.heads.eagle.head import EagleHead
    from specdec_core.heads.medusa.head import MedusaHeads
    from specdec_core.heads.mlp_speculator.head import MLPSpeculator
    from specdec_core.heads.mtp.module import MtpModule

# (spec, target, progress=None) -> the draft or head; hub downloads report through progress
ExtraLoader = Callable[
    ..., "LoadedModel | EagleHead | MedusaHeads | MLPSpeculator | MtpModule | DFlashDraft"
]


def load_draft(spec: str, target: LoadedModel, progress: Progress | None = None) -> LoadedModel:
    """`embedded` is the bundled token-level draft; anything else is a model spec, loaded
    whole on the target's input device (trusting remote code if the target was allowed to)."""
    if spec == "embedded":
        bundled = resource_path("draft")
        if not (bundled / "config.json").is_file():
            raise SpecdecError(
                "this install has no bundled draft; pass --draft smollm2 (the target itself) "
                "or a draft model directory / hub id"
            )
        spec = str(bundled)
    from specdec_core.heads.token_draft import is_partial_draft, load_draft_dir

    if is_partial_draft(Path(spec)):  # layer weights only; embedding shared with the target
        return load_draft_dir(Path(spec), target)
    options = LoadOptions(trust_remote_code=target.options.trust_remote_code)
    device, dtype = str(target.device), target.dtype_name
    return load_model(spec, device=device, dtype=dtype, progress=progress, options=options)


def load_head(
    spec: str,
    target: LoadedModel,
    dtype: torch.dtype | None = None,
    progress: Progress | None = None,
) -> EagleHead:
    """`embedded` (or `embedded-vN`, a head it replaced) is a bundled EAGLE head for the
    embedded model; else a directory / hub id.
    `dtype`: the head's own weights' dtype (default: the target's)."""
    from specdec_core.heads.eagle.formats import load_head as load_eagle_head

    if names_bundled_head(spec):
        spec = str(bundled_head(spec))
    return load_eagle_head(spec, target, dtype, progress=progress)


def load_speculator(
    spec: str, target: LoadedModel, progress: Progress | None = None
) -> MLPSpeculator:
    """`embedded` is the MLP speculator bundled for the embedded model; else a directory or
    hub id in the layout vLLM loads (mlp_speculator/formats.py)."""
    from specdec_core.heads.mlp_speculator.formats import load_speculator as load

    return load(spec, target, progress=progress)


def load_medusa(spec: str, target: LoadedModel, progress: Progress | None = None) -> MedusaHeads:
    """`embedded` is the Medusa head bundled for the embedded model; else a directory or hub
    id in FasterDecoding's or vLLM's layout (medusa/formats.py)."""
    from specdec_core.heads.medusa.formats import load_medusa as load

    return load(spec, target, progress=progress)


def load_mtp(spec: str, target: LoadedModel, progress: Progress | None = None) -> MtpModule:
    """The MTP layer shipped in the target's own checkpoint (`embedded`, the default, means
    the target's); another spec is another copy of that checkpoint (mtp/load.py)."""
    from specdec_core.heads.mtp.load import load_mtp as load

    return load(None if spec == "embedded" else spec, target, progress=progress)


def load_dflash(spec: str, target: LoadedModel, progress: Progress | None = None) -> DFlashDraft:
    """`embedded` is the DFlash drafter bundled for the embedded model; else a directory or hub
    id in z-lab's or the speculators layout (dflash/formats.py)."""
    from specdec_core.heads.dflash.formats import load_dflash as load

    return load(spec, target, progress=progress)


EXTRA_LOADERS: dict[str, ExtraLoader] = {
    "dflash": load_dflash,
    "draft": load_draft,
    "head": load_head,
    "medusa": load_medusa,
    "mtp": load_mtp,
    "speculator": load_speculator,
}


def extra_kind(method: str) -> str | None:
    """What `method` (ours or an HF baseline) loads besides the target: "head", "draft" or
    None; `hf-assisted` drafts with the classic draft."""
    if method in HF_METHODS:
        return "draft" if method == "hf-assisted" else None
    return get_method(method).needs


def extra_key(method: str, specs: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """(kind, spec) of the draft / head `method` loads with `specs` (kind -> spec, as `--draft`
    / `--head` give them; `embedded` where none is given), or None if it loads none: loaded
    once, it serves every method with the same key."""
    kind = extra_kind(method)
    if kind is None:
        return None
    return kind, (specs or {}).get(kind) or "embedded"


def load_extra(
    method: str,
    target: LoadedModel,
    specs: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> Extra:
    """Load the draft / EAGLE head `method` needs besides the target (None if it needs none),
    as `extra_key` names it. With `progress`, it says what it loads (and a hub download
    reports through it)."""
    key = extra_key(method, specs)
    if key is None:
        return None
    kind, spec = key
    loader = EXTRA_LOADERS.get(kind)
    if loader is None:
        raise SpecdecError(f"this install cannot load a {kind} yet; choose another method")
    if progress is None:
        return loader(spec, target)
    progress(f"loading {kind} '{spec}'", 0.0)
    extra = loader(spec, target, progress=progress)
    progress(f"loaded {kind} '{spec}'", 1.0)
    return extra


def start(
    target: LoadedModel,
    method: str,
    prompt_ids: list[int],
    config: DecodeConfig,
    extra: Extra = None,
    *,
    stop: StopFlag | None = None,
    prefix: PrefixCache | None = None,
    history: History | None = None,
    costs: ForwardCosts | None = None,
    acceptance: AcceptanceEstimates | None = None,
    profile: PolicyProfile | None = None,
    prompt_text: str = "",
) -> Iterator[Event]:
    """The events of a run of `method` on `prompt_ids`: with `profile`, under the policy it
    gives the kind of `prompt_text` (the words the kind is read from); with `prefix`, reusing
    and then updating a conversation's cache; a suffix method drafts from and records into
    `history` (None: an empty history of its own, so the run never depends on what ran before
    it); an EAGLE-2 method sizes its tree with `costs` and `acceptance` (None: costs of its
    own, kept from an earlier run on this machine where a check at load still fits them
    (decoding/cost_store.py), and fresh acceptance estimates)."""
    config, kind = profiled_config(profile, method, target, prompt_text, config)
    history = history if history is not None else History()
    costs = (costs if costs is not None else ForwardCosts(store=CostStore.default())).watching(stop)
    acceptance = acceptance if acceptance is not None else AcceptanceEstimates()
    drafter = build_drafter(method, target, extra, history, costs, acceptance)
    picked = {POLICY_KIND: kind} if kind else None
    events = generate(
        target, drafter, prompt_ids, config, method=method, stop=stop, started_info=picked,
        prefix=prefix,
    )  # fmt: skip
    try:
        for event in events:
            if picked and isinstance(event, Finished):  # the summary names the kind too
                summary = event.summary
                event = Finished(replace(summary, config={**summary.config, **picked}))
            yield event
    finally:
        events.close()  # a consumer that stops early: the loop saves its cache at its yield


def run(*args: Any, on_event: Callable[[Event], None] | None = None, **options: Any) -> RunSummary:
    """`start(*args, **options)` run to the end: its summary (`on_event` hears every event on
    the way)."""
    events = start(*args, **options)
    for event in events:
        if on_event is not None:
            on_event(event)
        if isinstance(event, Finished):
            return event.summary
    raise RuntimeError("the decode loop ended without a Finished event")
