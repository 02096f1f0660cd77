"""The GUI's view of the engine: a small facade that the worker threads call.

`Engine` is the protocol the window depends on; `SpecdecEngine` implements it on
specdec_core, and tests pass a fake that yields a synthetic event stream. Heavy modules
(torch, transformers) are imported inside the methods, which run in worker threads, so the
window opens before torch is imported.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from specdec_core.config import DecodeConfig
from specdec_core.control import Progress, StopFlag
from specdec_core.errors import SpecdecError
from specdec_core.events import Event, Finished

if TYPE_CHECKING:  # torch-heavy: imported by the worker threads only
    from app.sweep_backend import SweepBackend
    from specdec_core.adaptation import Adapter
    from specdec_core.drafters.suffix import History
    from specdec_core.methods import Extra
    from specdec_core.models import LoadedModel
    from specdec_core.prefix_cache import PrefixCache


@dataclass(frozen=True)
class MethodInfo:
    name: str
    label: str
    needs: str | None  # "draft", "head" or None
    tree: bool = False


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    lossy: bool
    params: tuple[tuple[str, float], ...] = ()  # parameter names and defaults (lossy policies)


@dataclass(frozen=True)
class Registries:
    methods: tuple[MethodInfo, ...]
    policies: tuple[PolicyInfo, ...]

    def method(self, name: str) -> MethodInfo | None:
        return next((m for m in self.methods if m.name == name), None)


@dataclass(frozen=True)
class TargetInfo:
    spec: str
    device: str
    dtype: str
    parameters: int
    config: dict = field(default_factory=dict)  # its config.json (which heads / drafts fit)


@dataclass(frozen=True)
class LoadSettings:
    """The Models panel's placement choices (specdec_core.models.LoadOptions, Qt-free)."""

    device_map: str | None = None  # auto, balanced, sequential
    max_memory: str = ""  # DEVICE=SIZE[,DEVICE=SIZE…]
    trust_remote_code: bool = False


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "user" or "assistant"
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


class Engine(Protocol):
    def registries(self) -> Registries: ...

    def load_target(
        self,
        spec: str,
        device: str,
        dtype: str,
        progress: Progress,
        stop: StopFlag | None = None,
        settings: LoadSettings | None = None,
    ) -> TargetInfo:
        """Load the target; `stop` cancels a download or load between chunks and stages."""
        ...

    def events(
        self, request: RunRequest, stop: StopFlag, progress: Progress
    ) -> Iterator[Event]: ...

    def token_text(self, token_id: int) -> str: ...

    def exclusive(self) -> AbstractContextManager[LoadedModel]:
        """The loaded target, held so that no run or load touches the models meanwhile (a
        sweep or Tune measures inside it); SpecdecError when no target is loaded."""
        ...

    def forget(self, conversation: str) -> None:
        """Drop the cache a conversation keeps between its turns."""
        ...

    def extra(self, method: str, specs: dict[str, str], progress: Progress) -> Extra:
        """The draft / head `method` needs with these specs (loaded once, then cached); call
        inside `exclusive()` or a run."""
        ...

    def close(self) -> None:
        """Release what the engine holds (its process, if it has one); the window calls it
        when it closes."""
        ...

    def sweep_backend(self) -> SweepBackend | None:
        """Where sweeps and Tune measure when the models are not in this process (None: here,
        inside `exclusive()`)."""
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


class SpecdecEngine:
    """specdec_core behind the `Engine` protocol; extras (drafts, heads) cached by spec."""

    def __init__(self, target: LoadedModel | None = None) -> None:
        self._target = target  # set by load_target
        self._extras: dict[tuple[str, str], Extra] = {}
        self._conversations: dict[str, PrefixCache] = {}  # chat caches, by conversation
        self._lock = threading.Lock()  # one load or run touches the models at a time
        self._adapt = False
        self._adapters: dict[str, Adapter] = {}  # head spec -> its adapter
        self._pending: list[tuple[str, list[int], tuple[int, ...], float]] = []  # finished runs
        self._last_adapted: str | None = None
        self._comparison: tuple[str, History] | None = None  # a Compare's id, history at its start

    def registries(self) -> Registries:
        from specdec_core.methods import METHODS
        from specdec_core.verifiers import VERIFIERS, make_verifier, policy_params

        methods = tuple(MethodInfo(m.name, m.label, m.needs, m.tree) for m in METHODS.values())
        policies = tuple(
            PolicyInfo(name, make_verifier(name).lossy, tuple(policy_params(name).items()))
            for name in VERIFIERS
        )
        return Registries(methods, policies)

    def load_target(
        self,
        spec: str,
        device: str,
        dtype: str,
        progress: Progress,
        stop: StopFlag | None = None,
        settings: LoadSettings | None = None,
    ) -> TargetInfo:
        from specdec_core.memory import parse_max_memory
        from specdec_core.models import LoadOptions, load_model

        settings = settings or LoadSettings()
        options = LoadOptions(
            device_map=settings.device_map or None,
            max_memory=parse_max_memory(settings.max_memory),
            trust_remote_code=settings.trust_remote_code,
        )
        with self._lock:
            model = load_model(spec, device, dtype, progress, options=options, stop=stop)
            self._target = model
            self._extras.clear()
            self._conversations.clear()
            self._adapters.clear()  # they adapted heads bound to the old target
            self._pending.clear()
        parameters = sum(p.numel() for p in model.model.parameters())
        config = model.model.config.to_dict()
        return TargetInfo(spec, str(model.device), model.dtype_name, parameters, config)

    def events(self, request: RunRequest, stop: StopFlag, progress: Progress) -> Iterator[Event]:
        from specdec_core.decode import generate
        from specdec_core.methods import build_drafter
        from specdec_core.prefix_cache import PrefixCache
        from specdec_core.prompts import encode_chat, encode_prompt

        with self.exclusive() as target:
            if request.messages:
                messages = [{"role": m.role, "content": m.content} for m in request.messages]
                ids = encode_chat(target.tokenizer, messages)
            else:
                ids = encode_prompt(target.tokenizer, request.prompt, request.raw)
            extra = self.extra(request.method, request.specs, progress)
            drafter = build_drafter(request.method, target, extra, self._history(request))
            prefix = None
            if request.conversation:
                prefix = self._conversations.setdefault(request.conversation, PrefixCache())
            stream = generate(
                target,
                drafter,
                ids,
                request.config,
                method=request.method,
                stop=stop,
                prefix=prefix,
            )
            adapter = self._adapter_for(request, target, extra) if self._adapt else None
            if adapter is None:
                yield from stream
                return
            with adapter.during_run():  # no adaptation while it runs
                for event in stream:
                    if isinstance(event, Finished):  # kept for the next `adapt`
                        summary = event.summary
                        run = (adapter.source, ids, summary.token_ids, summary.mean_accept_length)
                        self._pending.append(run)
                    yield event

    def _history(self, request: RunRequest) -> History | None:
        """The suffix history a run drafts from: the process's (None), or in a Compare a
        copy of the history as the Compare began, its own (drafters/suffix.py)."""
        if not request.comparison:
            return None
        from specdec_core.drafters.suffix import HISTORY

        if self._comparison is None or self._comparison[0] != request.comparison:
            self._comparison = (request.comparison, HISTORY.snapshot())
        return self._comparison[1].snapshot()

    def _adapter_for(self, request: RunRequest, target: LoadedModel, extra) -> Adapter | None:
        """The adapter of the head this run drafts with (None for a method without a head)."""
        from specdec_core.adaptation import Adapter
        from specdec_core.methods import get_method

        if get_method(request.method).needs != "head":
            return None
        spec = request.specs.get("head") or "embedded"
        if spec not in self._adapters:
            self._adapters[spec] = Adapter(extra, target, source=spec)
        return self._adapters[spec]

    def set_adapt(self, on: bool) -> None:
        self._adapt = on

    def adapt(self, budget_seconds: float, progress: Progress) -> str:
        with self.exclusive():
            pending, self._pending = self._pending, []
            for spec, ids, token_ids, tau in pending:
                progress("adapting the head: reading the run", 0.0)
                self._adapters[spec].add_run(ids, list(token_ids), tau)
            for spec in dict.fromkeys(spec for spec, *_ in pending):
                self._adapters[spec].adapt(budget_seconds)
                self._last_adapted = spec
            progress("adapted the head", 1.0)
            adapter = self._adapters.get(self._last_adapted or "")
            return adapter.tau_line() if adapter is not None else ""

    def reset_adaptation(self) -> str:
        with self.exclusive():
            for adapter in self._adapters.values():
                adapter.reset()
            self._pending.clear()
        return "the head is back to the loaded one"

    def save_adapted(self, directory: str) -> str:
        with self.exclusive():
            adapter = self._adapters.get(self._last_adapted or "")
            if adapter is None or not adapter.steps:
                raise SpecdecError(
                    "no head has adapted yet; turn on Adapt and run an EAGLE method first"
                )
            path = adapter.save(directory)
        return f"saved the adapted head to {path}; load it with --head {path}"

    def forget(self, conversation: str) -> None:
        """Drop a conversation's cache (Clear; an edited turn reuses what still matches)."""
        with self._lock:
            self._conversations.pop(conversation, None)

    def close(self) -> None:
        """Nothing to release: the models live in this process."""

    def sweep_backend(self) -> None:
        """None: sweeps measure here, inside `exclusive()`."""
        return None

    def token_text(self, token_id: int) -> str:
        target = self._target
        if target is None:
            return str(token_id)
        try:
            return target.tokenizer.decode([token_id])
        except Exception:  # a label is not worth an error; the id says enough
            return str(token_id)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[LoadedModel]:
        with self._lock:
            if self._target is None:
                raise SpecdecError("no target model is loaded; press Load in the Models panel")
            yield self._target

    def extra(self, method: str, specs: dict[str, str], progress: Progress) -> Extra:
        from specdec_core.methods import get_method
        from specdec_core.runner import EXTRA_LOADERS

        needs = get_method(method).needs
        if needs is None:
            return None
        spec = specs.get(needs) or "embedded"
        key = (needs, spec)
        if key not in self._extras:
            loader = EXTRA_LOADERS.get(needs)
            if loader is None:
                raise SpecdecError(f"this install cannot load a {needs} yet; choose another method")
            progress(f"loading {needs} '{spec}'", 0.0)
            self._extras[key] = loader(spec, self._target, progress=progress)
            progress(f"loaded {needs} '{spec}'", 1.0)
        return self._extras[key]
