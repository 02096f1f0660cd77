"""The one boundary between the window and the engine: the records they exchange and the
`Engine` protocol.

Every engine the window runs on fulfils the whole protocol: `SpecdecEngine` (app/engine.py,
the models in this process), `ProcessEngine` (app/process_engine.py, the models in a child
process) and the tests' fake (tests/gui_fake.py). Nothing here imports torch or Qt, and every
record is a frozen dataclass that pickles, so the same values cross the process boundary.

Three parameter names are the same wherever they appear: `progress` (a status line and how
far along), `on_point` (one measured sweep point) and `stop` (checked between steps or
points). They stay in the caller's process; every other argument is a value.
`COMMANDS` (each method's name and signature, in declaration order) is read from the protocol
itself, so what the engine process answers is defined here once.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from specdec_core.control import Progress, StopFlag
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Event, RunSummary
from specdec_core.measurement.run_distance import RunDistance
from specdec_core.measurement.sweep_records import Grid, SweepProgress, SweepResult, TuneResult
from specdec_core.run.policy_profile import (
    POLICY_KIND,  # the config key of the kind a profile picked
)
from specdec_core.serving.serve import ServeCommand
from specdec_core.serving.serving_check import ServeCheck

__all__ = [
    "COMMANDS",
    "ENDED",
    "ChatMessage",
    "Engine",
    "HeadExportRequest",
    "LoadSettings",
    "TargetRequest",
    "MethodInfo",
    "OnPoint",
    "POLICY_KIND",
    "PolicyInfo",
    "Progress",
    "Registries",
    "RunRequest",
    "ServeCheckRequest",
    "StopFlag",
    "SweepRequest",
    "TargetInfo",
    "TuneRequest",
    "engine_ended",
    "no_head",
]

OnPoint = Callable[[SweepProgress], None]

ENDED = "the engine process ended unexpectedly"  # how every engine death is reported


def engine_ended(message: str) -> bool:
    """Does an error's message report the engine's death (so whatever it had loaded is
    gone, and Restart engine brings it back)?"""
    return ENDED in message


# what a method drafts with that Export to server… can write as an engine loads it
HEAD_KINDS = ("head", "medusa", "speculator")


@dataclass(frozen=True)
class MethodInfo:
    name: str
    label: str
    needs: str | None  # "draft", "head" or None
    tree: bool = False
    family: str = "baseline"  # the method picker's group
    summary: str = ""  # one line: what it needs, what it drafts
    params: tuple[tuple[str, float], ...] = ()  # method parameters and their defaults
    k: bool = True  # a chain length k applies (not to trees, nor to lookahead's own window)


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    lossy: bool
    params: tuple[tuple[str, float], ...] = ()  # parameter names and defaults (lossy policies)


@dataclass(frozen=True)
class Registries:
    methods: tuple[MethodInfo, ...]
    policies: tuple[PolicyInfo, ...]
    families: tuple[str, ...] = ()  # the method picker's groups, in order

    def method(self, name: str) -> MethodInfo | None:
        return next((m for m in self.methods if m.name == name), None)

    def grouped(self) -> list[tuple[str, tuple[MethodInfo, ...]]]:
        """The methods by family, families in their order (a family the engine did not name
        comes last); without families, one unnamed group in the registry's order."""
        if not self.families:
            return [("", self.methods)]
        order = [*self.families, *(m.family for m in self.methods if m.family not in self.families)]
        groups = [
            (f, tuple(m for m in self.methods if m.family == f)) for f in dict.fromkeys(order)
        ]
        return [(family, methods) for family, methods in groups if methods]


@dataclass(frozen=True)
class TargetInfo:
    spec: str
    device: str
    dtype: str
    parameters: int
    config: dict = field(default_factory=dict)  # its config.json (which heads / drafts fit)
    dtype_reason: str = ""  # why this dtype, one line (specdec_core.models.loading.choose_dtype)


@dataclass(frozen=True)
class LoadSettings:
    """The Models panel's placement choices (specdec_core.models.loading.LoadOptions, Qt-free)."""

    device_map: str | None = None  # auto, balanced, sequential
    max_memory: str = ""  # DEVICE=SIZE[,DEVICE=SIZE…]
    trust_remote_code: bool = False


@dataclass(frozen=True)
class TargetRequest:
    """A target to load: its spec (embedded, a hub id, a folder or a .gguf), the device and
    dtype, and the Models panel's placement choices."""

    spec: str
    device: str = "auto"
    dtype: str = "auto"
    settings: LoadSettings = field(default_factory=LoadSettings)


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system", "user" or "assistant"
    content: str


@dataclass(frozen=True)
class RunRequest:
    method: str
    prompt: str
    config: DecodeConfig
    raw: bool = False
    specs: dict[str, str] = field(default_factory=dict)  # "draft" / "head" -> spec
    # a chat turn: the whole conversation, the template applied over it (`prompt` is then
    # the last user message), and the name of the conversation whose cache it reuses
    messages: tuple[ChatMessage, ...] = ()
    conversation: str = ""
    # the Compare this run is part of (an id): a suffix method drafts from the suffix history
    # as it was when the Compare began and adds nothing to it, so no method of the Compare
    # drafts from another's output of the same prompt ("": the window's history, recorded)
    comparison: str = ""
    # a policy profile file (`specdec tune-policy`, specdec_core/run/policy_profile.py): the engine
    # reads it, picks the prompt's kind and runs with that kind's policy instead of
    # `config.policy` ("": none; an `ar` run drafts nothing and ignores it)
    policy_profile: str = ""


@dataclass(frozen=True)
class SweepRequest:
    """Measure `method` at every point of `grid` on `prompts`, all else as in `base`."""

    method: str
    grid: Grid
    base: DecodeConfig
    prompts: tuple[str, ...]
    specs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TuneRequest:
    """Measure `method`'s k (a tree method: its size in tokens) and pick the fastest."""

    method: str
    config: DecodeConfig
    specs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HeadExportRequest:
    """Write the EAGLE head `method` drafts with (`specs["head"]`, "embedded" when empty) into
    `folder` as `engine` ("vllm" or "sglang") loads it, and serve that folder: the server
    command for `target` at `config`, in `dtype` on `tensor_parallel_size` GPUs."""

    engine: str
    folder: str
    method: str
    config: DecodeConfig
    target: str
    specs: dict[str, str] = field(default_factory=dict)
    dtype: str = "auto"
    tensor_parallel_size: int = 1


@dataclass(frozen=True)
class ServeCheckRequest:
    """Serve `method` at `config` (greedy, lossless) with vLLM from the serving environment
    and check it against the playground on `prompt` (File ▸ Export to server… ▸ Check with
    vLLM): `specdec_core.serving.serving_check.serve_check` on the loaded target, as `specdec
    serve-check` runs it. `serving_env` "": $SPECDEC_SERVING_ENV, else .venv-serving beside
    the playground's environment."""

    method: str
    config: DecodeConfig
    prompt: str
    specs: dict[str, str] = field(default_factory=dict)
    raw: bool = False
    serving_env: str = ""


def no_head(label: str) -> str:
    """Why a method has no head to write for a server, `label` as the Method box names it."""
    return f"{label} drafts without an EAGLE head: choose an EAGLE method to export one"


class Engine(Protocol):
    """What the window asks of an engine. A method may block (a load, a run, a sweep): the
    window calls them from worker threads, never from the GUI thread."""

    def registries(self) -> Registries:
        """The methods and verification policies this engine offers."""
        ...

    def load_target(
        self, target: TargetRequest, progress: Progress, stop: StopFlag | None = None
    ) -> TargetInfo:
        """Load `target`; `stop` cancels a download or load between chunks and stages. The
        model loaded before stays until the new one has loaded."""
        ...

    def events(self, request: RunRequest, stop: StopFlag, progress: Progress) -> Iterator[Event]:
        """One run: Started, a Step per target forward, Finished (specdec_core.decoding.events)."""
        ...

    def distance(
        self, request: RunRequest, summary: RunSummary, stop: StopFlag
    ) -> RunDistance | None:
        """A finished run's distance from the target's distribution (total variation and KL
        per emitted token, `measure.run_distance`): a lossy run decoded once more, untimed,
        with the same seed; 0 by construction for a lossless one; None when `stop` ends it."""
        ...

    def token_text(self, token_id: int) -> str:
        """A token's label; called per drawn token, so it answers at once."""
        ...

    def forget(self, conversation: str) -> None:
        """Drop the cache a conversation keeps between its turns."""
        ...

    def sweep(self, request: SweepRequest, on_point: OnPoint, stop: StopFlag) -> SweepResult:
        """Measure a grid on the loaded models (no run or load meanwhile); `stop` ends it
        after the point being measured."""
        ...

    def tune(self, request: TuneRequest, on_point: OnPoint, stop: StopFlag) -> TuneResult:
        """Tune k (or a tree's size); `stop` ends it after the point being measured
        (`TuneResult.stopped`)."""
        ...

    def set_adapt(self, on: bool) -> None:
        """Adapt EAGLE heads to the runs from now on (runs are kept; `adapt` trains)."""
        ...

    def adapt(self, budget_seconds: float, progress: Progress) -> str:
        """Between runs: take the runs kept since the last call, fine-tune the head on them
        for about `budget_seconds`; -> the τ line (before adaptation against the latest)."""
        ...

    def reset_adaptation(self) -> str:
        """Every adapted head back to the loaded one; -> a note for the user."""
        ...

    def save_adapted(self, directory: str) -> str:
        """Write the last adapted head to a new directory; -> a note for the user."""
        ...

    def export_head(self, request: HeadExportRequest) -> ServeCommand:
        """Write the head for a serving engine (File ▸ Export to server…); -> the command that
        serves the written folder, the export's notes first. `SpecdecError`, one line: a
        method that drafts without a head, what the engine cannot carry, a folder that cannot
        take the head."""
        ...

    def serve_check(
        self, request: ServeCheckRequest, progress: Progress, stop: StopFlag
    ) -> ServeCheck:
        """Serve the setting with vLLM and check it against the playground (the models held
        meanwhile; minutes: the engine's start); `stop` ends it between prompts and while the
        engine starts, the engine stopped with it (`serving_check.CheckStopped`). One-line
        `SpecdecError`s: no serving environment, a method vLLM does not serve, an engine that
        does not start."""
        ...

    def close(self) -> None:
        """Release what the engine holds (its process, if it has one); the window calls it
        when it closes."""
        ...


def _commands() -> dict[str, inspect.Signature]:
    """The protocol's methods by name, each with its signature without `self`."""
    found: dict[str, inspect.Signature] = {}
    for name, member in vars(Engine).items():
        if inspect.isfunction(member) and not name.startswith("_"):
            signature = inspect.signature(member)
            found[name] = signature.replace(parameters=list(signature.parameters.values())[1:])
    return found


COMMANDS: Mapping[str, inspect.Signature] = MappingProxyType(_commands())
