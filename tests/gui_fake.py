"""A fake engine for GUI tests: the whole `Engine` protocol on a synthetic event stream and a
synthetic measurement, no model, no torch work."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.engine_api import (
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
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import (
    DraftTree,
    Event,
    Finished,
    RunSummary,
    Started,
    Step,
    StepPhases,
    Token,
)
from specdec_core.decoding.events import TokenKind as Kind
from specdec_core.errors import SpecdecError
from specdec_core.measurement.run_distance import RunDistance
from specdec_core.measurement.sweep_records import SweepResult, TuneResult

if TYPE_CHECKING:
    from specdec_core.measurement.measure import Measurement
    from specdec_core.serving.serve import ServeCommand
    from specdec_core.serving.serving_check import ServeCheck

METHODS = (
    MethodInfo("ar", "Autoregressive", None),
    MethodInfo("classic", "Classic draft", "draft"),
    MethodInfo("eagle", "EAGLE", "head"),
    MethodInfo("eagle2", "EAGLE-2", "head", tree=True),
    MethodInfo("eagle2-lookup", "EAGLE-2 + lookup", "head", tree=True),
)
POLICIES = (PolicyInfo("lossless", False), PolicyInfo("threshold", True, (("tau", 0.3),)))
TREE = DraftTree(
    tokens=(11, 12, 13, 14, 15), parents=(-1, -1, 0, 0, 2), scores=(0.0,) * 5, accepted=(0, 2)
)


def fake_step(index: int, method: str) -> Step:
    """ar: one target token; classic: k=4 drafts, index % 5 accepted; eagle2: a fixed tree."""

    def token(n: int, kind: Kind, q: float | None = None) -> Token:
        return Token(100 + n, f" w{index}.{n}", kind, index, 0.5, q)

    if method == "ar":
        return Step(
            index, (token(0, Kind.TARGET),), 0, 0, phases=StepPhases(draft=0.001, target=0.01)
        )
    if method.startswith("eagle2"):
        tokens = (
            token(0, Kind.ACCEPTED_DRAFT, 1.0),
            token(1, Kind.ACCEPTED_DRAFT, 1.0),
            token(2, Kind.BONUS),
        )
        return Step(index, tokens, 5, 2, tree=TREE, phases=StepPhases(draft=0.002, target=0.01))
    accepted = index % 5
    tokens = [token(n, Kind.ACCEPTED_DRAFT, 0.8) for n in range(accepted)]
    tokens.append(token(accepted, Kind.BONUS if accepted == 4 else Kind.CORRECTION))
    rejected = () if accepted == 4 else (Token(999, " no", Kind.REJECTED_DRAFT, index, 0.0, 0.3),)
    timed = StepPhases(draft=0.002, target=0.01)
    return Step(index, tuple(tokens), 4, accepted, rejected=rejected, phases=timed)


# speedup of the fake measurement: best at k=3, and higher at lower temperature
SPEEDUP = {1: 1.2, 2: 1.5, 3: 1.9, 4: 1.7, 6: 1.4, 8: 1.1}


class FakeMeasure:
    """Tokens/s by k (or tree size), temperature and threshold, without a model; `gate`
    holds a measurement until it is set (to stop or close mid-sweep)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, method: str, config: DecodeConfig, reference) -> Measurement:
        from specdec_core.measurement.measure import Measurement  # torch: only when measuring
        from specdec_core.measurement.sweep_records import Aggregate

        self.gate.wait(5)
        self.calls.append((method, config.as_dict()))
        if method == "ar":
            tps = 100.0
        else:
            size = config.tree_tokens if config.tree_tokens else config.k
            tps = 100.0 * SPEEDUP.get(size, 1.0 + size / 100) * (1 - 0.1 * config.temperature)
        tau = config.policy_params.get("tau", 0.0)
        aggregate = Aggregate(
            tokens_per_second=tps, mean_accept_length=2.0 + tau, token_agreement=1.0 - tau
        )
        return Measurement(aggregate, ((1, 2),))


class FakeEngine:
    def __init__(self, steps: int = 12, delay: float = 0.0, honour_stop: bool = True) -> None:
        self.steps = steps
        self.delay = delay
        self.honour_stop = honour_stop
        self.fail_next: Exception | None = None
        self.fail_methods: dict[str, Exception] = {}
        self.loads: list[str] = []
        self.load_settings: list = []  # the LoadSettings of each load
        self.requests: list[RunRequest] = []
        self.summaries: list[RunSummary] = []  # of the finished runs, in order
        self.forgotten: list[str] = []  # conversations whose cache was dropped
        self.cached: dict[str, int] = {}  # conversation -> tokens its cache holds
        self.produced = 0  # steps yielded by the current/last run
        self.after_stop = 0  # of those, steps yielded once the stop flag was set
        self.step_event = threading.Event()  # set at each yielded step
        self.measure = FakeMeasure()  # what sweeps and Tune measure
        self.sweeps: list[SweepRequest] = []
        self.head_exports: list[HeadExportRequest] = []
        self.export_gate = threading.Event()  # holds a head export until set (set by default)
        self.export_gate.set()
        self.serve_checks: list[ServeCheckRequest] = []
        self.check_seconds = 0.2  # how long a serving check takes here
        self.check_tau = 1.5
        self.closed = False
        self.token_distance = 0.1  # each emitted token's total variation under a lossy policy
        self.distances: list[RunRequest] = []  # the runs whose distance was asked for

    def registries(self) -> Registries:
        return Registries(METHODS, POLICIES)

    def load_target(
        self, target: TargetRequest, progress: Progress, stop: StopFlag | None = None
    ) -> TargetInfo:
        progress(f"loading {target.spec}", 0.5)
        self.loads.append(target.spec)
        self.load_settings.append(target.settings)
        return TargetInfo(target.spec, "cpu", "float32", 135_000_000)

    def events(self, request: RunRequest, stop: StopFlag, progress: Progress) -> Iterator[Event]:
        self.requests.append(request)
        if request.method in self.fail_methods:
            raise self.fail_methods[request.method]
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        self.produced = 0
        self.after_stop = 0
        yield Started(5, request.method, request.config.as_dict())
        ids: list[int] = []
        index = 0
        while index < self.steps:
            if self.honour_stop and stop.is_set():
                break
            time.sleep(self.delay)
            step = fake_step(index, request.method)
            ids.extend(t.id for t in step.tokens)
            self.produced += 1
            self.after_stop += stop.is_set()
            self.step_event.set()
            yield step
            index += 1
        reason = "stopped" if stop.is_set() else "max_tokens"
        summary = _summary(request, ids, index, reason)
        if request.messages:  # a chat turn: 5 prompt tokens a message, earlier turns cached
            prompt = 5 * len(request.messages)
            reused = self.cached.get(request.conversation, 0)
            summary = replace(summary, prompt_tokens=prompt, reused_tokens=reused)
            self.cached[request.conversation] = prompt + len(ids) - 1
        self.summaries.append(summary)
        yield Finished(summary)

    def distance(
        self, request: RunRequest, summary: RunSummary, stop: StopFlag
    ) -> RunDistance | None:
        """A lossy run: each emitted token at `token_distance` (KL 0), one `delay` a token,
        None once `stop` is set; a lossless run: 0 by construction."""
        self.distances.append(request)
        if not summary.lossy:
            return RunDistance.lossless()
        distance = RunDistance()
        for _ in range(summary.new_tokens):
            if stop.is_set():
                return None
            time.sleep(self.delay)
            distance = distance.add(self.token_distance, 0.0)
        return distance

    def token_text(self, token_id: int) -> str:
        return f"t{token_id}"

    def close(self) -> None:
        self.closed = True

    def forget(self, conversation: str) -> None:
        self.forgotten.append(conversation)
        self.cached.pop(conversation, None)

    def sweep(self, request: SweepRequest, on_point: OnPoint, stop: StopFlag) -> SweepResult:
        from specdec_core.tuning.sweep import run_sweep

        self.sweeps.append(request)
        header = {"prompts": len(request.prompts), "source": "gui"}
        return run_sweep(
            request.method,
            request.grid,
            request.base,
            self.measure,
            header=header,
            progress=on_point,
            stop=stop,
        )

    def tune(self, request: TuneRequest, on_point: OnPoint, stop: StopFlag) -> TuneResult:
        from specdec_core.tuning.autotune import autotune_k

        return autotune_k(request.method, request.config, self.measure, None, on_point, stop)

    def serve_check(
        self, request: ServeCheckRequest, progress: Progress, stop: StopFlag
    ) -> ServeCheck:
        """Says it starts vLLM, waits `check_seconds` (stop honoured every 20 ms, as the
        real check between prompts), then reports vLLM's answer identical to the playground's
        ar with `check_tau` on both sides. `fail_next` fails it instead."""
        from specdec_core.serving.serving_check import CheckStopped, PromptCheck, ServeCheck

        self.serve_checks.append(request)
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        progress("starting vLLM on port 8000 (log: /tmp/fake.log)", 0.0)
        deadline = time.monotonic() + self.check_seconds
        while time.monotonic() < deadline:
            if stop.is_set():
                raise CheckStopped()
            time.sleep(0.02)
        progress("engine: prompt 1/1", 0.0)
        tau = self.check_tau
        row = PromptCheck(
            index=1, prompt_tokens=12, engine_tokens=24, reference_tokens=24, identical=True,
            first_difference=None, engine_token=None, reference_token=None,
            engine_finish="length", engine_tau=tau, engine_position_rates=(0.5,),
            engine_drafts=10.0, engine_tokens_per_second=30.0, playground_tau=tau,
            playground_position_rates=(0.5,), playground_mean_accept_length=tau,
            playground_tokens_per_second=20.0, reference_tokens_per_second=15.0,
        )  # fmt: skip
        return ServeCheck(
            method=request.method, model="/models/fake", command="python -m vllm …",
            log_path="/tmp/fake.log", max_new_tokens=request.config.max_new_tokens,
            startup_seconds=1.0, rows=(row,), engine_tau=tau, engine_position_rates=(0.5,),
            playground_tau=tau, playground_position_rates=(0.5,),
        )  # fmt: skip

    def export_head(self, request: HeadExportRequest) -> ServeCommand:
        """Writes a config.json naming the head into the folder (no weights), then serves the
        folder with the real `serve_command`."""
        from specdec_core.serving.serve import serve_command

        self.export_gate.wait(5)
        self.head_exports.append(request)
        info = Registries(METHODS, POLICIES).method(request.method)
        if info is None or info.needs != "head":
            raise SpecdecError(no_head(info.label if info else request.method))
        folder = Path(request.folder)
        folder.mkdir(parents=True, exist_ok=True)
        head = request.specs.get("head") or "embedded"
        config = {"architectures": ["LlamaForCausalLMEagle"], "exported_from": head}
        (folder / "config.json").write_text(json.dumps(config))
        return serve_command(
            request.engine,
            request.method,
            request.config,
            request.target,
            str(folder),
            request.dtype,
            request.tensor_parallel_size,
        )

    # adaptation: records what was asked, and whether a run was under way meanwhile
    adapting = False
    adapt_calls: list[bool] = []  # per call: was a run in progress?

    def set_adapt(self, on: bool) -> None:
        self.adapting = on

    def adapt(self, budget_seconds: float, progress: Progress) -> str:
        self.adapt_calls = [*self.adapt_calls, self.produced < self.steps]
        return f"τ 2.00 before adaptation → 2.50 in the latest run ({len(self.adapt_calls)})"

    def reset_adaptation(self) -> str:
        self.adapt_calls = []
        return "the head is back to the loaded one"

    def save_adapted(self, directory: str) -> str:
        return f"saved the adapted head to {directory}"


def _summary(request: RunRequest, ids: list[int], steps: int, reason: str) -> RunSummary:
    return RunSummary(
        method=request.method,
        policy=request.config.policy,
        lossy=request.config.policy != "lossless",
        prompt_tokens=5,
        new_tokens=len(ids),
        token_ids=tuple(ids),
        text="".join(f" t{i}" for i in ids),
        steps=steps,
        wall_seconds=0.01 * max(steps, 1),
        prefill_seconds=0.0,
        stop_reason=reason,
    )


__all__ = ["FakeEngine", "SpecdecError", "fake_step"]
