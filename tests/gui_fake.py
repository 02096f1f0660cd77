"""A fake engine for GUI tests: a synthetic event stream, no model, no torch work."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

from app.engine import (
    MethodInfo,
    PolicyInfo,
    Progress,
    Registries,
    RunRequest,
    StopFlag,
    TargetInfo,
)
from specdec_core.errors import SpecdecError
from specdec_core.events import DraftTree, Event, Finished, RunSummary, Started, Step, Token
from specdec_core.events import TokenKind as Kind

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
        return Step(index, (token(0, Kind.TARGET),), 0, 0, 0.001, 0.01)
    if method.startswith("eagle2"):
        tokens = (
            token(0, Kind.ACCEPTED_DRAFT, 1.0),
            token(1, Kind.ACCEPTED_DRAFT, 1.0),
            token(2, Kind.BONUS),
        )
        return Step(index, tokens, 5, 2, 0.002, 0.01, tree=TREE)
    accepted = index % 5
    tokens = [token(n, Kind.ACCEPTED_DRAFT, 0.8) for n in range(accepted)]
    tokens.append(token(accepted, Kind.BONUS if accepted == 4 else Kind.CORRECTION))
    rejected = () if accepted == 4 else (Token(999, " no", Kind.REJECTED_DRAFT, index, 0.0, 0.3),)
    return Step(index, tuple(tokens), 4, accepted, 0.002, 0.01, rejected=rejected)


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

    def registries(self) -> Registries:
        return Registries(METHODS, POLICIES)

    def load_target(
        self, spec: str, device: str, dtype: str, progress: Progress, stop=None, settings=None
    ) -> TargetInfo:
        progress(f"loading {spec}", 0.5)
        self.loads.append(spec)
        self.load_settings.append(settings)
        return TargetInfo(spec, "cpu", "float32", 135_000_000)

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

    def token_text(self, token_id: int) -> str:
        return f"t{token_id}"

    def close(self) -> None:
        self.closed = True

    def sweep_backend(self) -> None:
        return None

    def forget(self, conversation: str) -> None:
        self.forgotten.append(conversation)
        self.cached.pop(conversation, None)

    def exclusive(self):
        raise SpecdecError("the fake engine has no model to measure; inject a MeasureBackend")

    def extra(self, method: str, specs: dict[str, str], progress: Progress) -> None:
        return None

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
        draft_seconds=0.0,
        verify_seconds=0.0,
        prefill_seconds=0.0,
        stop_reason=reason,
    )


__all__ = ["FakeEngine", "SpecdecError", "fake_step"]
