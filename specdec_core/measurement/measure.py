"""Measurement: one method on one prompt as a typed row, rows into an aggregate.

The one place where a run becomes a number. `specdec bench`, `specdec sweep`, `--k auto` and
the GUI's sweeps and Tune all measure through these functions, so a figure means the same in
each of them:

- `warm_up(target, ids)`: one short run, so first-call allocation lands on no method;
- `run_one(method, target, ids, config, extra) -> Row`: one timed run and its target log-prob;
  with `stop` (the caller's Stop), the run checks it between decode steps and a run it cut
  short raises `MeasurementStopped`: a measurement never returns the numbers of half a run;
- `compared(row, reference) -> Row`: the row with its fidelity to the `ar` output;
- `run_distance(method, target, ids, config, extra) -> RunDistance`: how far a lossy policy's
  emitted tokens are from the target's distribution, step by step, from an untimed second run
  (`fidelity.step_distances`; 0 by construction for a lossless one);
- `explained(row, model, ids, reference) -> Row`: where a differing output parts from the
  reference, labelled float near-tie or bug (`first_difference`);
- `aggregate(rows) -> Aggregate`: tokens/s, τ, per-step draft / verify time, fidelity, and
  the steps' phases summed (`StepPhases`, for `bench --profile`: step_profile.py);
- `speedup_spread(rows, ar_rows) -> SpeedupSpread`: each prompt's speedup over the `ar` run
  of the same prompt, and a 95 % bootstrap interval of the run's speedup over the prompts.

What a method loads besides the target is runner.py's (`extra_kind`, `load_extra`).

Speed is a ratio measured in the same process (`Aggregate.speedup_vs_ar`, filled in by the
caller that also measured `ar`, with its spread over the prompts where it has one);
`to_record()` gives the JSON form that bench and sweep files
hold (the key names are the CLI contract: `docs/architecture.md`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from specdec_core.control import StopFlag
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Rates, Started, Step, StepPhases
from specdec_core.decoding.forward_costs import ForwardCosts
from specdec_core.decoding.prefix_cache import PrefixCache
from specdec_core.drafters.tree_sizing import AcceptanceEstimates
from specdec_core.loop.decode import generate, make_generator
from specdec_core.measurement.baselines import run_hf
from specdec_core.measurement.bootstrap import RESAMPLES, SEED, percentile_interval, resample
from specdec_core.measurement.fidelity import (
    PathCall,
    mean_logprob,
    prefix_agreement,
    step_distances,
    token_agreement,
)
from specdec_core.measurement.first_difference import (
    BUG,
    NEAR_TIE,
    FirstDifference,
    first_difference,
)
from specdec_core.measurement.reference_check import ReferenceCheck
from specdec_core.measurement.run_distance import RunDistance
from specdec_core.measurement.run_distance import record as distance_record
from specdec_core.measurement.sampled_tree_distance import sampled_tree_distance
from specdec_core.measurement.sweep_records import Aggregate, SpeedupSpread
from specdec_core.models.loading import LoadedModel
from specdec_core.run.method_kinds import HF_METHODS, is_tree
from specdec_core.run.methods import build_drafter
from specdec_core.run.runner import Extra, run
from specdec_core.verifiers import ChainVerifier, Verdict, make_verifier

if TYPE_CHECKING:
    from specdec_core.drafters.suffix import History


class MeasurementStopped(Exception):
    """Stop came during a measured run: the run ended within a decode step, so it has no
    numbers (a sweep keeps the points finished before it and marks this one)."""


@dataclass(frozen=True)
class Row(Rates):
    """One method (`method`: the entry as written, e.g. `ngram:threshold:tau=0.3`) on one
    prompt. Fidelity fields are None until `compared` with the reference output."""

    method: str
    token_ids: tuple[int, ...]
    new_tokens: int
    steps: int  # target forwards after the prefill
    wall_seconds: float
    draft_seconds: float | None  # None for HF baselines (not separable)
    verify_seconds: float | None
    policy: str = "lossless"
    policy_params: dict[str, float] = field(default_factory=dict)
    lossy: bool = False
    mean_logprob: float | None = None  # mean target log-prob per generated token
    tree: str | None = None  # 'tokens/depth/top-k' a tree method used
    tree_sizing: str | None = None  # why that size (measured costs)
    prompt_index: int = 0
    identical_to_ar: bool | None = None
    prefix_agreement: float | None = None
    token_agreement: float | None = None
    turn: int = 0  # in a multi-turn replay: which user turn of the conversation
    reused_tokens: int = 0  # prompt positions taken from the conversation's cache
    first_difference: FirstDifference | None = None  # where it parts from the reference
    identical_to_fp32: bool | None = None  # with an fp32 reference (`bench --reference fp32`)
    fp32_check: ReferenceCheck | None = None  # where it parts from fp32 `ar` (greedy, the same)
    phases: StepPhases | None = None  # the steps' phases summed; None for HF baselines
    distance: RunDistance | None = None  # from the target's distribution (`run_distance`)
    policy_kind: str | None = None  # the kind a policy profile gave the prompt (bench)

    def to_record(self) -> dict[str, Any]:
        """The JSON form of a bench file's `per_prompt` entry (no token ids, no phases: the
        profile is the aggregate's, `step_profile.py`); the distance as its flat fields
        (`run_distance.RunDistance.to_record`, empty where not measured)."""
        record = asdict(self)
        del record["token_ids"], record["phases"], record["distance"], record["fp32_check"]
        if self.fp32_check is not None:
            record["fp32_check"] = self.fp32_check.to_record()
        record.update(distance_record(self.distance))
        record["first_difference"] = (
            self.first_difference.to_record() if self.first_difference else None
        )
        record.update(
            mean_accept_length=self.mean_accept_length, tokens_per_second=self.tokens_per_second
        )
        return record


SPEEDUP_RESAMPLES = RESAMPLES  # bootstrap resamples of the prompts
SPEEDUP_SEED = SEED  # the same rows always give the same interval


def speedup_spread(
    rows: list[Row],
    ar_rows: list[Row],
    resamples: int = SPEEDUP_RESAMPLES,
    seed: int = SPEEDUP_SEED,
) -> SpeedupSpread | None:
    """`rows`' speedup over `ar_rows` (the same run's `ar`) on each prompt both ran (the
    turns of a conversation summed), and a percentile bootstrap (`bootstrap.py`) over those
    prompts of the run's speedup (all tokens / all time, against `ar`'s on the same resampled
    prompts), with a fixed seed. None when no prompt ran both."""
    own, reference = _by_prompt(rows), _by_prompt(ar_rows)
    pairs = [(*own[i], *reference[i]) for i in sorted(own.keys() & reference.keys())]
    if not pairs:
        return None
    interval = percentile_interval(lambda rng: _pooled(resample(rng, pairs)), resamples, seed)
    return SpeedupSpread(per_prompt=tuple(_speedup(*pair) for pair in pairs), interval=interval)


def _by_prompt(rows: list[Row]) -> dict[int, tuple[int, float]]:
    """Prompt index -> (new tokens, wall seconds) of its rows (every turn of a conversation)."""
    sums: dict[int, tuple[int, float]] = {}
    for row in rows:
        new, wall = sums.get(row.prompt_index, (0, 0.0))
        sums[row.prompt_index] = (new + row.new_tokens, wall + row.wall_seconds)
    return sums


def _pooled(pairs: list[tuple[int, float, int, float]]) -> float:
    """The speedup of these prompts together: all their tokens over all their time, against
    `ar`'s on the same prompts."""
    new, wall, ar_new, ar_wall = (sum(column) for column in zip(*pairs, strict=True))
    return _speedup(new, wall, ar_new, ar_wall)


def _speedup(new: float, wall: float, ar_new: float, ar_wall: float) -> float:
    """tokens/s over `ar`'s tokens/s (0 where either ran no time or `ar` made no token)."""
    speed = new / wall if wall else 0.0
    ar_speed = ar_new / ar_wall if ar_wall else 0.0
    return speed / ar_speed if ar_speed else 0.0


@dataclass(frozen=True)
class Measurement:
    """What a sweep's measure returns: the aggregate and each prompt's output token ids (the
    reference for the points measured against it)."""

    aggregate: Aggregate
    token_ids: tuple[tuple[int, ...], ...]


def warm_up(
    target: LoadedModel, ids: list[int], seed: int = 0, stop: StopFlag | None = None
) -> None:
    """One short run so that first-call allocation does not land on the first method."""
    summary = run(target, "ar", ids, DecodeConfig(max_new_tokens=4, seed=seed), stop=stop)
    if summary.stop_reason == "stopped":
        raise MeasurementStopped()


def run_one(
    method: str,
    target: LoadedModel,
    ids: list[int],
    config: DecodeConfig,
    extra: Extra = None,
    label: str | None = None,
    prompt_index: int = 0,
    prefix: PrefixCache | None = None,
    history: History | None = None,
    costs: ForwardCosts | None = None,
    acceptance: AcceptanceEstimates | None = None,
    stop: StopFlag | None = None,
) -> Row:
    """One timed run of `method` (ours or an HF baseline) on `ids`; `label` names the row
    (default: the method); `prefix`: a conversation's cache to reuse and update (ours only);
    `history`: the suffix history a suffix method drafts from (None: an empty one of its own);
    `costs` / `acceptance`: what sizes an EAGLE-2 tree (None: a fresh pair of the run's own).
    The target log-prob is one extra forward, after the timing. `stop`: checked between the
    run's decode steps (an HF baseline: before and after its one `generate` call); a run it
    cut short raises `MeasurementStopped`."""
    name = label or method
    _check(stop)
    if method in HF_METHODS:
        hf = run_hf(method, target, ids, config, extra)
        _check(stop)
        return Row(
            method=name,
            token_ids=tuple(hf.token_ids),
            new_tokens=len(hf.token_ids),
            steps=hf.steps,
            wall_seconds=hf.wall_seconds,
            draft_seconds=None,
            verify_seconds=None,
            mean_logprob=mean_logprob(target.model, ids, hf.token_ids),
            prompt_index=prompt_index,
        )
    summary = run(
        target, method, ids, config, extra, stop=stop, prefix=prefix, history=history,
        costs=costs, acceptance=acceptance,
    )  # fmt: skip
    if summary.stop_reason == "stopped":
        raise MeasurementStopped()
    return Row(
        method=name,
        token_ids=summary.token_ids,
        new_tokens=summary.new_tokens,
        steps=summary.steps,
        wall_seconds=summary.wall_seconds,
        draft_seconds=summary.draft_seconds,
        verify_seconds=summary.verify_seconds,
        policy=summary.policy,
        policy_params=dict(config.policy_params),
        lossy=summary.lossy,
        mean_logprob=mean_logprob(target.model, ids, summary.token_ids),
        tree=tree_label(method, summary.config),
        tree_sizing=summary.config.get("tree_sizing"),
        prompt_index=prompt_index,
        reused_tokens=summary.reused_tokens,
        phases=summary.phases,
    )


def _check(stop: StopFlag | None) -> None:
    if stop is not None and stop.is_set():
        raise MeasurementStopped()


def compared(row: Row, reference: tuple[int, ...] | list[int]) -> Row:
    """`row` with its fidelity to the `ar` output of the same prompt (`fidelity`)."""
    output, reference = list(row.token_ids), list(reference)
    return replace(
        row,
        identical_to_ar=output == reference,
        prefix_agreement=prefix_agreement(output, reference),
        token_agreement=token_agreement(output, reference),
    )


DISTANCE_SAMPLES = 64  # sampled verifications per step for a windowed rule or a tree


class _Recorder:
    """The policy, verifying as it does, keeping the step's verifications (`PathCall`)."""

    def __init__(self, policy: ChainVerifier) -> None:
        self.policy = policy
        self.name = policy.name
        self.lossy = policy.lossy
        self.needs_soft_p = policy.needs_soft_p
        self.PARAMS = policy.PARAMS
        self.calls: list[PathCall] = []
        self.accepted = 0  # the last verification's accepted count (a chain step's)

    def verify(
        self,
        draft: torch.Tensor,
        q: torch.Tensor | None,
        p: torch.Tensor,
        generator: torch.Generator | None,
        p_soft: torch.Tensor | None = None,
    ) -> Verdict:
        self.calls.append(PathCall(draft, q, p, p_soft))
        verdict = self.policy.verify(draft, q, p, generator, p_soft=p_soft)
        self.accepted = verdict.accepted
        return verdict

    def take(self) -> list[PathCall]:
        calls, self.calls = self.calls, []
        return calls


def run_distance(
    method: str,
    target: LoadedModel,
    ids: list[int],
    config: DecodeConfig,
    extra: Extra = None,
    tree: str | None = None,
    samples: int = DISTANCE_SAMPLES,
    stop: StopFlag | None = None,
) -> RunDistance:
    """The run's distance from the target's distribution (`run_distance.RunDistance`): the
    method run again, untimed, with the same seed (so the same steps as the timed run), and at
    every step the distance of each token its policy emitted (`fidelity.step_distances`, with a
    generator of its own: the run's draws are untouched; a tree drafted by sampling by
    `sampled_tree_distance`, with the root draws of the drafter's size at that step).
    `tree`: the 'tokens/depth/top-k' the timed run used (a tree method sizes no tree again).
    A suffix method drafts from an empty history here; no conversation cache is reused.
    0 by construction for a lossless policy (nothing runs)."""
    policy = make_verifier(config.policy, **config.policy_params)
    if not policy.lossy or method in HF_METHODS:
        return RunDistance.lossless()
    if tree is not None:
        tokens, depth, topk = (int(part) for part in tree.split("/"))
        config = replace(config, tree_tokens=tokens, tree_depth=depth, tree_topk=topk)
    recorder = _Recorder(policy)
    own = make_generator(config.seed + 1, target.device)  # the estimates' draws
    drafter = build_drafter(method, target, extra)
    distance = RunDistance()
    draws = None  # the root draws (top-k) of the next tree the drafter samples
    for event in generate(target, drafter, ids, config, method=method, verifier=recorder):
        _check(stop)
        if isinstance(event, Step):
            calls = recorder.take()
            if draws is not None and event.tree is not None and calls and calls[0].q is not None:
                step = [sampled_tree_distance(policy, calls, draws, own, samples)]
            else:
                step = step_distances(policy, calls, recorder.accepted, own, samples)
            if step is None:
                distance = distance.skip()
            for token in step or ():
                distance = distance.add(
                    token.total_variation, token.kl, token.samples, token.total_variation_se
                )
        if isinstance(event, Started | Step) and is_tree(method):  # the next tree's size
            draws = drafter.describe(config).get("tree_topk")
    return distance


def explained(row: Row, model, ids: list[int], reference: tuple[int, ...] | list[int]) -> Row:
    """`row` with where its output first parts from `reference` (None when identical),
    measured with `model` (the target, or its float32 copy)."""
    return replace(row, first_difference=first_difference(model, ids, row.token_ids, reference))


def aggregate(rows: list[Row]) -> Aggregate:
    """Sums over the prompts (tokens/s = all tokens / all time), prompt means of fidelity."""
    new = sum(r.new_tokens for r in rows)
    wall = sum(r.wall_seconds for r in rows)
    steps = sum(r.steps for r in rows)
    draft = [r.draft_seconds for r in rows if r.draft_seconds is not None]
    verify = [r.verify_seconds for r in rows if r.verify_seconds is not None]
    scored = [r for r in rows if r.mean_logprob is not None]
    scored_tokens = sum(r.new_tokens for r in scored)
    labels = [r.first_difference.label for r in rows if r.first_difference is not None]
    fp32 = [r.identical_to_fp32 for r in rows if r.identical_to_fp32 is not None]
    return Aggregate(
        tokens_per_second=new / wall if wall else 0.0,
        mean_accept_length=new / steps if steps else 0.0,
        identical_to_ar=sum(bool(r.identical_to_ar) for r in rows) / len(rows),
        prompts=len(rows),
        new_tokens=new,
        steps=steps,
        wall_seconds=wall,
        draft_ms_per_step=1000 * sum(draft) / steps if draft and steps else None,
        verify_ms_per_step=1000 * sum(verify) / steps if verify and steps else None,
        lossy=any(r.lossy for r in rows),
        tree=rows[-1].tree,
        prefix_agreement=_mean([r.prefix_agreement for r in rows]),
        token_agreement=_mean([r.token_agreement for r in rows]),
        mean_logprob=(
            sum(r.mean_logprob * r.new_tokens for r in scored) / scored_tokens
            if scored_tokens
            else None
        ),
        near_ties=labels.count(NEAR_TIE),
        bugs=labels.count(BUG),
        identical_to_fp32=sum(fp32) / len(fp32) if fp32 else None,
        phases=_summed([r.phases for r in rows]),
    )


def tree_label(method: str, config: dict[str, Any]) -> str | None:
    """'tokens/depth/top-k' of a tree method's run (None for chains), as chosen or given
    (a tree drafter's `describe()` puts its chosen size in the run's `config`)."""
    if not is_tree(method):
        return None
    return f"{config['tree_tokens']}/{config['tree_depth']}/{config['tree_topk']}"


def _summed(phases: list[StepPhases | None]) -> StepPhases | None:
    """The rows' phases added up; None when any row has none (an HF baseline)."""
    if not phases or None in phases:
        return None
    total = StepPhases()
    for row in phases:
        total = total + row
    return total


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None
