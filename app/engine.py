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
from specdec_core.events import Event

if TYPE_CHECKING:  # torch-heavy: imported by the worker threads only
    from specdec_core.methods import Extra
    from specdec_core.models import LoadedModel


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
class RunRequest:
    method: str
    prompt: str
    config: DecodeConfig
    raw: bool = False
    specs: dict[str, str] = field(default_factory=dict)  # "draft" / "head" -> spec


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

    def extra(self, method: str, specs: dict[str, str], progress: Progress) -> Extra:
        """The draft / head `method` needs with these specs (loaded once, then cached); call
        inside `exclusive()` or a run."""
        ...


class SpecdecEngine:
    """specdec_core behind the `Engine` protocol; extras (drafts, heads) cached by spec."""

    def __init__(self, target: LoadedModel | None = None) -> None:
        self._target = target  # set by load_target
        self._extras: dict[tuple[str, str], Extra] = {}
        self._lock = threading.Lock()  # one load or run touches the models at a time

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
        parameters = sum(p.numel() for p in model.model.parameters())
        config = model.model.config.to_dict()
        return TargetInfo(spec, str(model.device), model.dtype_name, parameters, config)

    def events(self, request: RunRequest, stop: StopFlag, progress: Progress) -> Iterator[Event]:
        from specdec_core.decode import generate
        from specdec_core.methods import build_drafter
        from specdec_core.prompts import encode_prompt

        with self.exclusive() as target:
            ids = encode_prompt(target.tokenizer, request.prompt, request.raw)
            extra = self.extra(request.method, request.specs, progress)
            drafter = build_drafter(request.method, target, extra)
            yield from generate(
                target, drafter, ids, request.config, method=request.method, stop=stop
            )

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
