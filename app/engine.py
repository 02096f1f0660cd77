"""The engine in the window's process: `SpecdecEngine`, specdec_core behind the `Engine`
protocol (app/engine_api.py).

Heavy modules (torch, transformers) are imported inside the methods, which run in worker
threads, so the window opens before torch is imported. One lock keeps a load, a run, a sweep
or an adaptation from touching the models while another does. The records of the protocol
live in app/engine_api.py, where the window and the tests take them from.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from app.engine_api import (
    HEAD_KINDS,
    ChatMessage,
    HeadExportRequest,
    MethodInfo,
    OnPoint,
    PolicyInfo,
    Progress,
    Registries,
    RunRequest,
    ServeCheckRequest,
    StopFlag,
    SweepRequest,
    TargetInfo,
    TargetRequest,
    TuneRequest,
    no_head,
)
from specdec_core.decoding.events import Event, Finished, RunSummary
from specdec_core.errors import SpecdecError
from specdec_core.measurement.run_distance import RunDistance
from specdec_core.serving.serve import ServeCommand
from specdec_core.serving.serving_check import ServeCheck

END_LABEL = "⟨end⟩"  # the label of the end-of-text / end-of-turn token in the draft tree
SPECIAL_LABEL = "⟨special⟩"  # of any other special token
AUTOREGRESSIVE = "ar"  # drafts nothing: it loads nothing besides the target

if TYPE_CHECKING:  # torch-heavy: imported by the worker threads only
    from specdec_core.decoding.forward_costs import ForwardCosts
    from specdec_core.decoding.prefix_cache import PrefixCache
    from specdec_core.drafters.suffix import History
    from specdec_core.drafters.tree_sizing import AcceptanceEstimates
    from specdec_core.measurement.sweep_records import SweepResult, TuneResult
    from specdec_core.models.loading import LoadedModel
    from specdec_core.run.methods import Extra
    from specdec_core.run.policy_profile import PolicyProfile
    from specdec_core.training.adaptation import Adapter

__all__ = ["ChatMessage", "Registries", "RunRequest", "SpecdecEngine", "TargetInfo"]


def _quiet(message: str, fraction: float) -> None:
    """Progress nobody shows (a draft loading for a sweep reports through its points)."""


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
        self._suffix_history: History | None = None  # what this engine's runs leave (lazy)
        self._comparison: tuple[str, History] | None = None  # a Compare's id, history at its start
        # EAGLE-2 tree sizing: costs measured once and acceptance learned across this engine's runs
        self._sizing: tuple[ForwardCosts, AcceptanceEstimates] | None = None

    def registries(self) -> Registries:
        from specdec_core.run.methods import FAMILIES, METHODS
        from specdec_core.verifiers import VERIFIERS, make_verifier, policy_params

        methods = tuple(
            MethodInfo(m.name, m.label, m.needs, m.tree, m.family, m.summary, m.params, m.k)
            for m in METHODS.values()
        )
        policies = tuple(
            PolicyInfo(name, make_verifier(name).lossy, tuple(policy_params(name).items()))
            for name in VERIFIERS
        )
        return Registries(methods, policies, FAMILIES)

    def load_target(
        self, target: TargetRequest, progress: Progress, stop: StopFlag | None = None
    ) -> TargetInfo:
        from specdec_core.models.loading import LoadOptions, load_model
        from specdec_core.models.memory import parse_max_memory

        spec, settings = target.spec, target.settings
        options = LoadOptions(
            device_map=settings.device_map or None,
            max_memory=parse_max_memory(settings.max_memory),
            trust_remote_code=settings.trust_remote_code,
        )
        with self._lock:
            model = load_model(
                spec, target.device, target.dtype, progress, options=options, stop=stop
            )
            self._target = model
            self._extras.clear()
            self._conversations.clear()
            self._adapters.clear()  # they adapted heads bound to the old target
            self._pending.clear()
        parameters = sum(p.numel() for p in model.model.parameters())
        config = model.model.config.to_dict()
        return TargetInfo(
            spec, str(model.device), model.dtype_name, parameters, config, model.dtype_reason
        )

    def events(self, request: RunRequest, stop: StopFlag, progress: Progress) -> Iterator[Event]:
        from specdec_core.decoding.prefix_cache import PrefixCache
        from specdec_core.run.runner import start

        with self._held() as target:
            profile = _profile(request)
            ids = _prompt_ids(target, request)
            extra = self.extra(request.method, request.specs, progress)
            costs, acceptance = self._tree_sizing()
            prefix = None
            if request.conversation:
                prefix = self._conversations.setdefault(request.conversation, PrefixCache())
            stream = start(
                target,
                request.method,
                ids,
                request.config,
                extra,
                stop=stop,  # also ends a first tree run's timing of forwards
                prefix=prefix,
                history=self._history(request),
                costs=costs,
                acceptance=acceptance,
                profile=profile,
                prompt_text=request.prompt,
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

    def distance(
        self, request: RunRequest, summary: RunSummary, stop: StopFlag
    ) -> RunDistance | None:
        """`measure.run_distance` of the run: its prompt decoded again from scratch (a chat
        turn's cache is not reused), the tree at the size the run used."""
        from specdec_core.measurement.measure import MeasurementStopped, run_distance, tree_label
        from specdec_core.run.policy_profile import profiled_config

        if not summary.lossy:
            return RunDistance.lossless()
        with self._held() as target:
            config, _ = profiled_config(  # the policy the run had
                _profile(request), request.method, target, request.prompt, request.config
            )
            ids = _prompt_ids(target, request)
            extra = self.extra(request.method, request.specs)
            tree = tree_label(request.method, summary.config)
            try:
                return run_distance(request.method, target, ids, config, extra, tree, stop=stop)
            except MeasurementStopped:
                return None

    def _tree_sizing(self) -> tuple[ForwardCosts, AcceptanceEstimates]:
        """This engine's forward costs and acceptance estimates, which its runs share (created
        at the first run: torch is imported by the worker threads only)."""
        if self._sizing is None:
            from specdec_core.decoding.cost_store import CostStore
            from specdec_core.decoding.forward_costs import ForwardCosts
            from specdec_core.drafters.tree_sizing import AcceptanceEstimates

            self._sizing = (ForwardCosts(store=CostStore.default()), AcceptanceEstimates())
        return self._sizing

    @property
    def suffix_history(self) -> History:
        """The suffix history this engine's runs draft from and record into (one per engine,
        so two engines never share one)."""
        if self._suffix_history is None:
            from specdec_core.drafters.suffix import History

            self._suffix_history = History()
        return self._suffix_history

    def _history(self, request: RunRequest) -> History:
        """The suffix history a run drafts from: the engine's, or in a Compare a copy of it as
        the Compare began, the run's own (drafters/suffix.py)."""
        if not request.comparison:
            return self.suffix_history
        if self._comparison is None or self._comparison[0] != request.comparison:
            self._comparison = (request.comparison, self.suffix_history.snapshot())
        return self._comparison[1].snapshot()

    def _adapter_for(self, request: RunRequest, target: LoadedModel, extra) -> Adapter | None:
        """The adapter of the head this run drafts with (None for a method without a head)."""
        from specdec_core.run.methods import get_method
        from specdec_core.training.adaptation import Adapter

        if get_method(request.method).needs != "head":
            return None
        spec = request.specs.get("head") or "embedded"
        if spec not in self._adapters:
            self._adapters[spec] = Adapter(extra, target, source=spec)
        return self._adapters[spec]

    def set_adapt(self, on: bool) -> None:
        self._adapt = on

    def adapt(self, budget_seconds: float, progress: Progress) -> str:
        with self._held():
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
        with self._held():
            for adapter in self._adapters.values():
                adapter.reset()
            self._pending.clear()
        return "the head is back to the loaded one"

    def save_adapted(self, directory: str) -> str:
        with self._held():
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

    def export_head(self, request: HeadExportRequest) -> ServeCommand:
        """`head_export.export_head` into the folder, then `serve_command` on it (the export's
        notes, then the command's). Reads the head from its files, not the models loaded, so
        it holds no lock."""
        from specdec_core.run.methods import get_method
        from specdec_core.serving.head_export import export_for_method
        from specdec_core.serving.serve import serve_command

        method = get_method(request.method)
        if method.needs not in HEAD_KINDS:
            raise SpecdecError(no_head(method.label))
        folder = request.folder
        spec = request.specs.get(method.needs) or "embedded"
        try:
            written = export_for_method(
                request.engine, request.method, spec, folder, request.config
            )
        except OSError as error:  # a full disk, a folder of another user, a read-only mount
            reason = error.strerror or str(error)
            raise SpecdecError(
                f"could not write the head into {folder} ({reason}); choose a folder you can "
                "write to"
            ) from None
        command = serve_command(
            request.engine,
            request.method,
            request.config,
            request.target,
            str(written.directory),
            request.dtype,
            request.tensor_parallel_size,
        )
        return replace(command, notes=[*written.notes, *command.notes])

    def serve_check(
        self, request: ServeCheckRequest, progress: Progress, stop: StopFlag
    ) -> ServeCheck:
        """`serving_check.serve_check` on the loaded target and the method's cached draft /
        head, the engine's log in a new temporary file. What can be checked is checked before
        the models are taken: the setting, the method, the serving environment."""
        import tempfile
        from pathlib import Path

        from specdec_core.run.prompts import encode_prompt
        from specdec_core.serving.serving_check import (
            EngineOptions,
            check_setting,
            serve_check,
            served_model,
            serving_python,
        )

        check_setting(request.config)
        model = served_model(request.method, request.specs)
        python = serving_python(request.serving_env or None)
        with self._held() as target:
            ids = encode_prompt(target.tokenizer, request.prompt, request.raw)
            extra = None
            if request.method != AUTOREGRESSIVE:
                extra = self.extra(request.method, request.specs, progress)
            handle, log = tempfile.mkstemp(prefix="specdec-serve-check-", suffix=".log")
            os.close(handle)
            return serve_check(
                target,
                request.method,
                [ids],
                request.config,
                EngineOptions(python=python, log_path=Path(log)),
                model,
                extra,
                progress=lambda message: progress(message, 0.0),
                stop=stop,
            )

    def sweep(self, request: SweepRequest, on_point: OnPoint, stop: StopFlag) -> SweepResult:
        """The benchmark's measurement on the loaded target and its cached draft / head."""
        from specdec_core.run.method_kinds import HF_METHODS
        from specdec_core.tuning.sweep import BenchMeasure, run_sweep

        method, specs = request.method, request.specs
        with self._held() as target:
            # the HF baselines are not engine methods: the benchmark loads what they need
            extras = None if method in HF_METHODS else {method: self.extra(method, specs)}
            measure = BenchMeasure(target, request.prompts, specs, raw=False, extras=extras)
            header = {"prompts": len(request.prompts), "source": "gui"}
            grid, base = request.grid, request.base
            return run_sweep(
                method, grid, base, measure, header=header, progress=on_point, stop=stop
            )

    def tune(self, request: TuneRequest, on_point: OnPoint, stop: StopFlag) -> TuneResult:
        """Short runs on the tuning prompts; a tree method tunes its size in tokens."""
        from specdec_core.tuning.autotune import tune_on_device

        method, specs = request.method, request.specs
        with self._held() as target:
            extra = self.extra(method, specs)
            return tune_on_device(
                target,
                method,
                request.config,
                specs,
                progress=on_point,
                extra=extra,
                stop=stop,
                trees=True,
            )

    def token_text(self, token_id: int) -> str:
        target = self._target
        if target is None:
            return str(token_id)
        tokenizer = target.tokenizer
        if token_id in tokenizer.all_special_ids:  # a plain label, not the raw `<|im_end|>`
            return END_LABEL if token_id == tokenizer.eos_token_id else SPECIAL_LABEL
        try:
            return tokenizer.decode([token_id])
        except Exception:  # a label is not worth an error; the id says enough
            return str(token_id)

    def token_texts(self) -> list[str]:
        """The label of every token id the loaded target can emit (the engine process sends
        them to the window once per load, so that labels never wait for it)."""
        with self._held() as target:
            size = max(len(target.tokenizer), target.vocab_size)
        return [self.token_text(token_id) for token_id in range(size)]

    @contextlib.contextmanager
    def _held(self) -> Iterator[LoadedModel]:
        """The loaded target, held so that no run or load touches the models meanwhile."""
        with self._lock:
            if self._target is None:
                raise SpecdecError("no target model is loaded; press Load in the Models panel")
            yield self._target

    def extra(self, method: str, specs: dict[str, str], progress: Progress = _quiet) -> Extra:
        """The draft / head `method` needs with these specs (loaded once, then cached); called
        with the models held (a run, a sweep, Tune). Not part of the `Engine` protocol: the
        window never holds a draft or a head."""
        from specdec_core.run.methods import get_method
        from specdec_core.run.runner import EXTRA_LOADERS

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
            self._extras[key] = extra = loader(spec, self._target, progress=progress)
            progress(f"loaded {needs} '{spec}'{_pairing(needs, self._target, extra)}", 1.0)
        return self._extras[key]


def _pairing(needs: str, target: LoadedModel, extra: Extra) -> str:
    """For a draft model: how it drafts for this target (its tokenizer's or another's), as the
    load's last progress line says it; nothing for a head."""
    if needs != "draft":
        return ""
    from specdec_core.drafters.cross_tokenizer import draft_pairing
    from specdec_core.models.loading import LoadedModel

    if not isinstance(extra, LoadedModel):
        return ""
    return f" ({draft_pairing(target.tokenizer, extra.tokenizer)})"


def _profile(request: RunRequest) -> PolicyProfile | None:
    """The run's policy profile (`RunRequest.policy_profile`), read; None without one. The
    engine's `start` applies it to the prompt, as `specdec generate --policy-profile` does."""
    if not request.policy_profile:
        return None
    from specdec_core.run.policy_profile import load_profile

    return load_profile(request.policy_profile)


def _prompt_ids(target: LoadedModel, request: RunRequest) -> list[int]:
    """The run's prompt as token ids: a chat turn's whole conversation under its template."""
    from specdec_core.run.prompts import encode_chat_turn, encode_prompt

    if request.messages:
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        return encode_chat_turn(target.tokenizer, messages)
    return encode_prompt(target.tokenizer, request.prompt, request.raw)
