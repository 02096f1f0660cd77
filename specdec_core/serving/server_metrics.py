"""Follow a serving engine's speculative decoding live, from its Prometheus `/metrics`.

`MetricsPoller(url).poll()` fetches `URL/metrics` (and, for SGLang, `URL/get_server_info`),
tells the engine from what it serves, and turns successive samples into typed records
(`Interval`). `watch()` polls at a fixed period; `specdec watch` and the window's Server tab
both run it. The Prometheus text format is read by `prometheus_client`'s parser.

**vLLM** exposes counters (in the text format with the `_total` suffix; labels `model_name`,
`engine`, and `position` for the last one): `vllm:spec_decode_num_drafts`,
`vllm:spec_decode_num_draft_tokens`, `vllm:spec_decode_num_accepted_tokens`,
`vllm:spec_decode_num_accepted_tokens_per_pos`. Over an interval, with Δ the counter deltas
(summed over label sets, i.e. over engines of a data-parallel server):

- τ = 1 + Δaccepted / Δdrafts: tokens per target forward, counting the bonus / correction
  token — vLLM's "mean acceptance length" and this playground's τ (new tokens ÷ target
  forwards, `RunSummary.mean_accept_length`);
- acceptance rate = Δaccepted / Δdraft tokens;
- acceptance at draft position i = Δaccepted_per_pos[i] / Δdrafts (every draft has all
  positions, so this is the playground's accepted_per_position[i] / drafted_per_position[i]);
- accepted tokens/s = Δaccepted / seconds; generated tokens/s from
  `vllm:generation_tokens` when served.

**SGLang** reports gauges, already means: `sglang:spec_accept_length` (tokens per verify
forward, the bonus token included, i.e. τ; over SGLang's last logging window) and
`sglang:spec_accept_rate` (labels `model_name`, `engine_type`, `tp_rank`, `dp_rank`, …;
averaged over ranks here). `/get_server_info` gives `avg_spec_accept_length` (top level, or
in `internal_states`), used when `/metrics` has no gauge (SGLang serves `/metrics` only with
`--enable-metrics`). Generated tokens/s comes from `sglang:generation_tokens`.

A counter that goes down means the server restarted: that sample starts a new baseline
instead of producing negative numbers; so does the first sample after the server was
unreachable (it may be a new process). Network failures never raise: they are a `Poll` whose
state is `unreachable`, and the next poll tries again.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from statistics import fmean

from prometheus_client.parser import text_string_to_metric_families

from specdec_core.errors import SpecdecError

VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
VLLM_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
VLLM_GENERATED = "vllm:generation_tokens"
SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"
SGLANG_ACCEPT_RATE = "sglang:spec_accept_rate"
SGLANG_GENERATED = "sglang:generation_tokens"
VLLM_SPEC = (VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED, VLLM_PER_POSITION)

# Poll states
BASELINE = "baseline"  # a first sample (or one after a reset / an outage): nothing to diff yet
MEASURED = "measured"  # an Interval
RESET = "reset"  # a counter went down: the server restarted; a new baseline
UNREACHABLE = "unreachable"  # no answer; the next poll retries
NO_SPECULATION = "no-speculation"  # it answers, but serves no speculative metrics

Fetch = Callable[[str, float], bytes]  # (url, timeout seconds) -> body


@dataclass(frozen=True)
class Sample:
    """One scrape: the engine's cumulative counters (vLLM) or its reported means (SGLang)."""

    engine: str  # "vllm" | "sglang"
    time: float  # the poller's clock when it arrived
    model: str = ""
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_position: tuple[float, ...] = ()
    generated: float | None = None  # generated tokens, a counter, when served
    accept_length: float | None = None  # SGLang's reported mean (τ)
    accept_rate: float | None = None
    average_accept_length: float | None = None  # SGLang's avg_spec_accept_length
    source: str = "counters"  # "counters" | "gauge" | "server_info"

    def counters(self) -> tuple[float, ...]:
        generated = () if self.generated is None else (self.generated,)
        return (self.drafts, self.draft_tokens, self.accepted, *self.accepted_per_position,
                *generated)  # fmt: skip


@dataclass(frozen=True)
class Interval:
    """What the server did between two samples (SGLang: its reported means at the second)."""

    engine: str
    model: str
    elapsed: float  # seconds since the first sample of this poller, at the interval's end
    seconds: float  # the interval's length (0 for a first SGLang sample)
    tau: float | None  # tokens per target forward, the bonus token counted; None: no drafts
    acceptance_rate: float | None  # accepted / drafted tokens
    position_rates: tuple[float, ...] = ()  # acceptance at draft position 1, 2, …
    accepted_tokens_per_second: float | None = None
    generated_tokens_per_second: float | None = None
    drafts: float = 0.0  # drafts in the interval (vLLM)
    average_tau: float | None = None  # SGLang: its avg_spec_accept_length (/get_server_info)
    source: str = "counters"  # where τ comes from: "counters", "gauge" or "server_info"

    def to_record(self) -> dict:
        return {**asdict(self), "position_rates": list(self.position_rates)}

    def line(self) -> str:
        """One line for a terminal (`specdec watch`)."""
        parts = [f"[{self.elapsed:7.1f} s] {self.engine}"]
        if self.model:
            parts.append(self.model)
        parts.append("tau -" if self.tau is None else f"tau {self.tau:.2f}")
        if self.acceptance_rate is not None:
            parts.append(f"acceptance {self.acceptance_rate:.2f}")
        if self.position_rates:
            parts.append("by position " + " ".join(f"{r:.2f}" for r in self.position_rates))
        if self.accepted_tokens_per_second is not None:
            parts.append(f"accepted {self.accepted_tokens_per_second:.1f} tok/s")
        if self.generated_tokens_per_second is not None:
            parts.append(f"generated {self.generated_tokens_per_second:.1f} tok/s")
        if self.average_tau is not None:
            parts.append(f"(server average tau {self.average_tau:.2f})")
        if self.engine == "vllm":
            parts.append(f"({self.drafts:g} drafts in {self.seconds:.1f} s)")
        return "  ".join(parts)


@dataclass(frozen=True)
class Poll:
    state: str  # BASELINE, MEASURED, RESET, UNREACHABLE or NO_SPECULATION
    message: str  # one line for a status bar
    interval: Interval | None = None
    wait: float | None = None  # after a baseline: seconds until the first numbers

    def line(self, remaining: float | None = None) -> str:
        """The status line; after a baseline with the countdown to the first numbers
        (`remaining` seconds of `wait` left, all of it when not given)."""
        if self.wait is None:
            return self.message
        left = self.wait if remaining is None else remaining
        return f"{self.message}; first numbers in {max(0, math.ceil(left))} s"


def base_url(url: str) -> str:
    """`host:port`, `http://host:port/` or `…/metrics` -> `http://host:port` (the server)."""
    text = url.strip()
    if not text:
        raise SpecdecError("give the server's URL, e.g. http://localhost:8000")
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SpecdecError(f"'{url}' is not an http(s) URL; e.g. http://localhost:8000")
    path = parts.path.rstrip("/").removesuffix("/metrics").rstrip("/")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def http_get(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - http(s) only
        return response.read()


def parse_metrics(text: str, at: float = 0.0, server_info: dict | None = None) -> Sample | None:
    """The speculative part of a `/metrics` text (and SGLang's server info) as a `Sample`;
    None when neither engine's speculative metrics are there."""
    sums: dict[str, float] = defaultdict(float)
    per_position: dict[int, float] = defaultdict(float)
    gauges: dict[str, list[float]] = defaultdict(list)
    model = ""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            name = sample.name.removesuffix("_total")
            if name in (*VLLM_SPEC, VLLM_GENERATED, SGLANG_GENERATED):
                sums[name] += sample.value
                if name == VLLM_PER_POSITION:
                    per_position[int(sample.labels.get("position", 0))] += sample.value
            elif name in (SGLANG_ACCEPT_LENGTH, SGLANG_ACCEPT_RATE):
                gauges[name].append(sample.value)
            else:
                continue
            model = model or sample.labels.get("model_name", "")
    if any(name in sums for name in VLLM_SPEC):
        positions = tuple(per_position[i] for i in range(max(per_position, default=-1) + 1))
        return Sample(
            "vllm",
            at,
            model,
            drafts=sums[VLLM_DRAFTS],
            draft_tokens=sums[VLLM_DRAFT_TOKENS],
            accepted=sums[VLLM_ACCEPTED],
            accepted_per_position=positions,
            generated=sums.get(VLLM_GENERATED),
        )
    average = _server_info_length(server_info) if server_info is not None else None
    if server_info is not None:
        model = model or str(server_info.get("served_model_name") or "")
    length, source = _mean(gauges[SGLANG_ACCEPT_LENGTH]), "gauge"
    if length is None:
        length, source = average, "server_info"
    if length is None:
        return None
    return Sample(
        "sglang",
        at,
        model,
        generated=sums.get(SGLANG_GENERATED),
        accept_length=length,
        accept_rate=_mean(gauges[SGLANG_ACCEPT_RATE]),
        average_accept_length=average,
        source=source,
    )


def interval_between(previous: Sample | None, current: Sample, start: float) -> Interval | None:
    """The record for `current` after `previous` (None: a first sample). vLLM needs two
    samples; SGLang's gauges are already means, so a first SGLang sample has its τ."""
    elapsed = current.time - start
    seconds = current.time - previous.time if previous is not None else 0.0
    generated = _rate(previous and previous.generated, current.generated, seconds)
    if current.engine == "sglang":
        return Interval(
            "sglang",
            current.model,
            elapsed,
            seconds,
            current.accept_length,
            current.accept_rate,
            generated_tokens_per_second=generated,
            average_tau=current.average_accept_length,
            source=current.source,
        )
    if previous is None:
        return None
    drafts = current.drafts - previous.drafts
    accepted = current.accepted - previous.accepted
    draft_tokens = current.draft_tokens - previous.draft_tokens
    positions = [
        now - before
        for now, before in zip(
            current.accepted_per_position, previous.accepted_per_position, strict=False
        )
    ]
    return Interval(
        "vllm",
        current.model,
        elapsed,
        seconds,
        tau=1 + accepted / drafts if drafts > 0 else None,
        acceptance_rate=accepted / draft_tokens if draft_tokens > 0 else None,
        position_rates=tuple(p / drafts for p in positions) if drafts > 0 else (),
        accepted_tokens_per_second=_rate(previous.accepted, current.accepted, seconds),
        generated_tokens_per_second=generated,
        drafts=drafts,
    )


def is_reset(previous: Sample, current: Sample) -> bool:
    """The server restarted: another engine or model, a counter went down, or the number of
    draft positions changed."""
    return (
        previous.engine != current.engine
        or previous.model != current.model
        or len(previous.accepted_per_position) != len(current.accepted_per_position)
        or (previous.generated is None) != (current.generated is None)
        or any(
            now < before
            for now, before in zip(current.counters(), previous.counters(), strict=True)
        )
    )


@dataclass
class MetricsPoller:
    """Polls one server; `interval` only words the retry message (`watch` does the timing)."""

    url: str
    interval: float = 2.0
    timeout: float = 3.0
    clock: Callable[[], float] = time.monotonic
    fetch: Fetch = http_get
    base: str = field(init=False)
    _previous: Sample | None = field(default=None, init=False, repr=False)
    _start: float | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.base = base_url(self.url)

    def poll(self) -> Poll:
        try:
            sample = self._read()
        except (OSError, http.client.HTTPException) as error:  # URLError, refused, timeout
            self._previous = None  # whoever answers next may be a new process
            reason = getattr(error, "reason", None) or error
            return Poll(
                UNREACHABLE,
                f"server unreachable ({reason}), retrying every {self.interval:g} s",
            )
        except ValueError as error:  # not the Prometheus text format
            return Poll(NO_SPECULATION, f"{self.base}/metrics is not Prometheus text ({error})")
        if sample is None:
            return Poll(
                NO_SPECULATION,
                f"{self.base} serves no speculative-decoding metrics (vLLM spec_decode "
                "counters or SGLang spec_accept_length); is speculation on? (SGLang: "
                "--enable-metrics)",
            )
        previous, self._previous = self._previous, sample
        if self._start is None:
            self._start = sample.time
        reset = previous is not None and is_reset(previous, sample)
        interval = interval_between(None if reset else previous, sample, self._start)
        if reset:
            return Poll(
                RESET,
                "counters went down (server restarted): new baseline",
                interval,
                self.interval,
            )
        if interval is None:
            message = f"{sample.engine} at {self.base}: baseline taken"
            return Poll(BASELINE, message, None, self.interval)
        if interval.tau is None:
            return Poll(MEASURED, f"{sample.engine}: no drafts in the last interval", interval)
        return Poll(MEASURED, f"{sample.engine} at {self.base}: τ {interval.tau:.2f}", interval)

    def _read(self) -> Sample | None:
        info = None
        try:
            text = self.fetch(self.base + "/metrics", self.timeout).decode("utf-8", "replace")
        except urllib.error.HTTPError:  # it answers, without /metrics: SGLang without metrics
            text = ""
        if not text or "sglang:" in text:  # SGLang: its server info too
            info = self._server_info()
        return parse_metrics(text, self.clock(), info)

    def _server_info(self) -> dict | None:
        try:
            data = json.loads(self.fetch(self.base + "/get_server_info", self.timeout))
        except (urllib.error.HTTPError, ValueError):
            return None
        return data if isinstance(data, dict) else None


def watch(
    poller: MetricsPoller,
    interval: float,
    stop: threading.Event | None = None,
    count: int | None = None,
) -> Iterator[Poll]:
    """`poller.poll()` every `interval` seconds (on a fixed schedule) until `stop` is set or
    `count` polls have been made."""
    stop = stop or threading.Event()
    start, done = time.monotonic(), 0
    while not stop.is_set():
        yield poller.poll()
        done += 1
        if count is not None and done >= count:
            return
        if stop.wait(max(0.0, start + done * interval - time.monotonic())):
            return


def _mean(values: list[float]) -> float | None:
    return fmean(values) if values else None


def _rate(before: float | None, now: float | None, seconds: float) -> float | None:
    if before is None or now is None or seconds <= 0:
        return None
    return (now - before) / seconds


def _server_info_length(info: dict) -> float | None:
    states = info.get("internal_states")
    for source in [info, *(states if isinstance(states, list) else [])]:
        value = source.get("avg_spec_accept_length") if isinstance(source, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None
