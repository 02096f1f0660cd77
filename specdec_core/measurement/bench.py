"""`specdec bench`: every method on the same prompts in one process, speed as a ratio to `ar`.

Methods are interleaved per prompt (prompt 1: ar, eagle, …; prompt 2: …) so that drift of a
noisy machine hits all of them alike. `ar` always runs: it is the reference for speedup and
for `identical_to_ar`.

**Entries.** Each `--methods` entry is written `METHOD[@SPEC][:POLICY[:NAME=VALUE[/…]]]`
(bench_entries.py): a method with its own head or draft and / or its own policy. Each distinct
(kind, spec) loads once and is shared by the entries naming it, so
`eagle@OLD,eagle@NEW,eagle2@NEW` compares two heads (two loads) as ratios against the same `ar`
on the same prompts; `ngram,ngram:typical,ngram:ensemble:w=0.8` compares three policies in one
run. Rows and tables are keyed by the entry as written.

**Speedup spread** (`measure.speedup_spread`). Each entry's speedup comes with its speedup on
each prompt (its tokens/s over `ar`'s on the same prompt, run back to back) and a 95 %
percentile bootstrap interval of the run's speedup over the prompts (2000 resamples, fixed
seed): the table shows `1.62x (1.48-1.77)`, the JSON `speedup_interval` and
`speedup_per_prompt`. It measures how much the speedup depends on the prompts drawn, not the
timing's noise; a speedup above τ is still flagged (speedup_bound.py).

**Fidelity** (`specdec_core.measurement.fidelity`): every entry also reports, against the `ar`
output of the same prompt, `prefix_agreement` (share of tokens before the first difference) and
`token_agreement` (position-wise), and `mean_logprob`, the mean target log-probability per
generated token from one extra teacher-forced target forward (not timed).

**Distance** (`measure.run_distance`, `run_distance.py`): every lossy entry reports how far
what its policy emits is from the target's distribution, at any temperature: `total_variation`
and `kl` (KL(P ‖ p) in nats), per emitted token (each with the rule that decided it at its
row), averaged over the tokens of all prompts, from one extra untimed run of the entry with the
same seed; `kl` is null where a token's KL is infinite (`kl_infinite_tokens` counts them: at T = 0,
any chance of a non-argmax token). Lossless entries (`ar`, every lossless method, the HF
baselines) report 0 for both, exact by construction, with the note saying so; nothing is run
for them.

**Policy profile** (`--policy-profile FILE`, `policy_profile.py`): every entry written without
its own `:POLICY` (but `ar` and the HF baselines) takes, for each user turn, the policy and
parameter the profile gives the turn's kind (the nearest kind by the target's mean input
embedding of the turn); each row records its `policy_kind`, `policy` and `policy_params`.

**Differences explained.** At temperature 0, for every prompt whose output differs from
`ar`'s, the row records its `first_difference` (`specdec_core.measurement.first_difference`): the
position, the target's logit margin there in a one-token and a multi-row forward, and the
label float near-tie or bug; the aggregate counts both. With `reference_model` (`--reference
fp32`: the target again in float32) `ar` also runs once per prompt in float32 (not timed),
every row records `identical_to_fp32`, and the margins are measured in float32: a
half-precision run checked against exact arithmetic.
At T > 0 every output is a draw and differs from `ar`'s by design (lossless there means the
same distribution, which the chi-square tests prove), so no difference is explained or
counted; `identical_to_ar` and the agreements stay in the record.

**Suffix history** (`suffix`, `eagle2-suffix`: drafters/suffix.py). By default (`own`) every
entry drafts from a history of its own, empty when the bench begins: its runs of the earlier
prompts (turns), as a user of that method alone would have, never another entry's output of
the same prompt. `shared` (`--suffix-history shared`) keeps one history for all entries, the
agent-loop case where one method's output is the next one's input: a suffix entry then also
drafts from the entries run before it on the same prompt, which flatters it. The mode is in
the JSON `config` and in every suffix entry's record and table note.

**Step profile** (`--profile`: step_profile.py). Every step's phases are timed anyway
(`events.StepPhases`); the profile prints, after the table, each entry's ms per step by phase
(draft, target forward, acceptance, cache keep, commit, loop) and the same in `ar` steps of
this run, and adds them to each entry's JSON record (`profile`, `profile_ar_steps`,
`draft_parts`, `step_cost_ar_steps`).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.forward_costs import ForwardCosts
from specdec_core.decoding.prefix_cache import PrefixCache
from specdec_core.drafters.suffix import History
from specdec_core.drafters.tree_sizing import AcceptanceEstimates
from specdec_core.errors import SpecdecError
from specdec_core.files import write_atomic
from specdec_core.measurement.bench_entries import Entry, entry_method, parse_entry
from specdec_core.measurement.measure import (
    Aggregate,
    Row,
    aggregate,
    compared,
    explained,
    run_distance,
    run_one,
    speedup_spread,
    warm_up,
)
from specdec_core.measurement.reference_check import check, reference_output
from specdec_core.measurement.run_distance import RunDistance, pooled
from specdec_core.measurement.run_distance import record as distance_record
from specdec_core.measurement.speedup_bound import MeasuredSpeedup
from specdec_core.measurement.step_profile import profiles
from specdec_core.models.loading import LoadedModel
from specdec_core.run.methods import uses_history
from specdec_core.run.policy_profile import PolicyProfile, profiled_config
from specdec_core.run.prompts import encode_chat_turn, encode_prompt
from specdec_core.run.runner import extra_key, load_extra

Report = Callable[[str], None]  # a progress line
SUFFIX_HISTORIES = ("own", "shared")  # one suffix history per entry, or one for all entries
SUFFIX_NOTES = {
    "own": "own suffix history (its earlier prompts)",
    "shared": "SHARED suffix history (drafts from earlier entries' output of the same prompt)",
}


@dataclass
class BenchResult:
    """Per entry (as written): the aggregate with its speedup vs `ar`; every row in order."""

    config: dict[str, Any]
    methods: dict[str, Aggregate] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)

    def as_dict(self, profile: bool = False) -> dict[str, Any]:
        """The bench JSON file: `config`, `methods` (entry -> aggregate; a suffix entry also
        names its `suffix_history`; with `profile`, each entry's step by phase:
        `StepProfile.to_record()`), `per_prompt`."""
        found = profiles(self.methods) if profile else {}
        methods = {}
        for name, m in self.methods.items():
            step = found.get(name)
            methods[name] = {**self._record(name, m), **(step.to_record() if step else {})}
        return {
            "config": self.config,
            "methods": methods,
            "per_prompt": [row.to_record() for row in self.rows],
        }

    def suffix_history(self, name: str) -> str | None:
        """The suffix history mode entry `name` drafted with (None: it drafts from none)."""
        if not uses_history(entry_method(name)):
            return None
        return self.config.get("suffix_history", "own")

    def distance(self, name: str) -> RunDistance | None:
        """Entry `name`'s distance from the target's distribution over all its prompts (None:
        its rows carry none, e.g. a result built from rows of an earlier version)."""
        return pooled(row.distance for row in self.rows if row.method == name)

    def _record(self, name: str, aggregate: Aggregate) -> dict[str, Any]:
        record = {**aggregate.to_record(), **distance_record(self.distance(name))}
        if _bound(aggregate).disturbed:  # above τ: not a speedup (speedup_bound.py)
            record["speedup_disturbed"] = True
        mode = self.suffix_history(name)
        return record if mode is None else {**record, "suffix_history": mode}


def _bound(m: Aggregate) -> MeasuredSpeedup:
    return MeasuredSpeedup(m.speedup_vs_ar or 0.0, m.mean_accept_length, m.lossy)


class _Dialogue:
    """One entry's side of a conversation in a multi-turn replay: the messages so far (its
    own replies as the assistant turns) and its conversation cache."""

    def __init__(self) -> None:
        self.messages: list[dict[str, str]] = []
        self.prefix = PrefixCache()

    def encode(self, tokenizer, user: str) -> list[int]:
        self.messages.append({"role": "user", "content": user})
        return encode_chat_turn(tokenizer, self.messages)

    def reply(self, tokenizer, token_ids: tuple[int, ...]) -> None:
        text = tokenizer.decode(list(token_ids), skip_special_tokens=True)
        self.messages.append({"role": "assistant", "content": text})


def run_bench(
    target: LoadedModel,
    methods: list[str],
    prompts: list[str] | list[list[str]],
    config: DecodeConfig,
    specs: dict[str, str],
    raw: bool = False,
    progress: Report | None = None,
    reference_model: LoadedModel | None = None,
    multi_turn: bool = False,
    after_prompt: Callable[[list[int], list[Row], dict], None] | None = None,
    suffix_history: str = "own",
    profile: PolicyProfile | None = None,
) -> BenchResult:
    """`prompts`: one prompt each; with `multi_turn`, each is a conversation's user turns,
    replayed turn after turn: every entry answers with its own replies as the history and
    keeps its conversation cache between turns (`RunSummary.reused_tokens`).
    `suffix_history`: 'own' or 'shared' (module docstring). `profile`: every entry without a
    `:POLICY` of its own runs with the policy the profile gives the kind of each user turn."""
    report = progress or (lambda message: None)
    methods = ["ar", *[m for m in methods if m != "ar"]]
    entries = [parse_entry(label, config) for label in methods]
    histories = suffix_histories(entries, suffix_history)
    # tree sizing's owners for this bench: each model timed once, each head's acceptance
    # learned over its prompts (shared by the entries, as one measurement)
    costs, acceptance = ForwardCosts(), AcceptanceEstimates()
    extras = load_extras(entries, target, specs)
    conversations = prompts if multi_turn else [[prompt] for prompt in prompts]
    first = conversations[0][0]
    warm_up(target, encode_prompt(target.tokenizer, first, raw), config.seed)
    rows: list[Row] = []
    judge = reference_model or target  # whose logits explain a difference
    for index, turns in enumerate(conversations):
        dialogues = {entry.label: _Dialogue() for entry in entries}
        for turn, user in enumerate(turns):
            reference: tuple[int, ...] = ()
            exact = None
            for entry in entries:
                label = entry.label
                where = f" turn {turn + 1}/{len(turns)}" if multi_turn else ""
                report(f"prompt {index + 1}/{len(conversations)}{where}: {label}")
                dialogue = dialogues[label]
                if multi_turn:
                    ids = dialogue.encode(target.tokenizer, user)
                else:
                    ids = encode_prompt(target.tokenizer, user, raw)
                prefix = dialogue.prefix if multi_turn else None
                own = profile if ":" not in entry.label else None  # an entry's own :POLICY
                config_used, kind = profiled_config(own, entry.method, target, user, entry.config)
                row = run_one(
                    entry.method,
                    target,
                    ids,
                    config_used,
                    extras[label],
                    label,
                    index,
                    prefix,
                    histories[label],
                    costs,
                    acceptance,
                )
                distance = _distance(entry.method, target, ids, row, config_used, extras[label])
                row = replace(row, turn=turn, distance=distance, policy_kind=kind)
                dialogue.reply(target.tokenizer, row.token_ids)
                if label == "ar" and reference_model is not None:
                    exact = reference_output(reference_model, ids, config)
                if label == "ar":
                    reference = row.token_ids
                row = compared(row, reference)
                if config.greedy:  # sampled outputs part from ar's by design: nothing to explain
                    row = explained(row, judge.model, ids, reference)
                if exact is not None:
                    row = replace(row, identical_to_fp32=row.token_ids == exact)
                if exact is not None and config.greedy:  # where it parts from fp32 ar
                    found = check(reference_model, ids, row.token_ids, exact, target.dtype)
                    row = replace(row, fp32_check=found)
                rows.append(row)
        if after_prompt is not None:  # between prompts, untimed (e.g. adapting a head)
            after_prompt(ids, [r for r in rows if r.prompt_index == index], extras)
    result = BenchResult(config={**config.as_dict(), **_describe(target, methods, specs)})
    result.config["reference"] = reference_model.dtype_name if reference_model else "same"
    result.config["suffix_history"] = suffix_history
    result.rows = rows
    ar_rows = [r for r in rows if r.method == "ar"]
    ar = aggregate(ar_rows)
    for method in methods:
        own = [r for r in rows if r.method == method]
        spread = speedup_spread(own, ar_rows)
        result.methods[method] = aggregate(own).against(ar.tokens_per_second, spread)
    return result


def _distance(
    method: str, target: LoadedModel, ids: list[int], row: Row, config: DecodeConfig, extra
) -> RunDistance:
    """The row's distance from the target's distribution: measured (untimed) for a lossy
    run, 0 by construction for a lossless one."""
    if not row.lossy:
        return RunDistance.lossless()
    return run_distance(method, target, ids, config, extra, row.tree)


def suffix_histories(entries: list[Entry], mode: str) -> dict[str, History]:
    """Entry label -> the suffix history it drafts from: one each ('own') or one for all
    ('shared'); empty when the bench begins, whatever ran before in this process."""
    if mode not in SUFFIX_HISTORIES:
        raise SpecdecError(
            f"unknown suffix history '{mode}'; choose one of: {', '.join(SUFFIX_HISTORIES)}"
        )
    shared = History()
    return {entry.label: shared if mode == "shared" else History() for entry in entries}


def load_extras(entries: list[Entry], target: LoadedModel, specs: dict[str, str]) -> dict:
    """Entry label -> the draft / head it runs with (its `@SPEC`, else `specs`); each
    (kind, spec) loaded once and shared by the entries naming it."""
    loaded: dict[tuple[str, str], Any] = {}
    extras: dict[str, Any] = {}
    for entry in entries:
        own = entry.specs(specs)
        key = extra_key(entry.method, own)
        if key is not None and key not in loaded:
            loaded[key] = load_extra(entry.method, target, own)
        extras[entry.label] = loaded[key] if key is not None else None
    return extras


def _describe(target: LoadedModel, methods: list[str], specs: dict[str, str]) -> dict:
    return {
        "target": target.spec,
        "device": str(target.device),
        "dtype": target.dtype_name,
        "methods": methods,
        **{f"{name}_spec": spec for name, spec in specs.items()},
    }


def format_table(result: BenchResult) -> str:
    """One row per entry: speed, τ, fidelity to `ar` (prefix / token agreement, log-prob) and
    the distance from the target's distribution (TV, KL per token: `run_distance`; 0 for a
    lossless entry, `inf` where a step's KL is, `-` where not measured). The speedup has its
    95 % interval over the prompts after it, `1.62x (1.48-1.77)`."""
    width = max([14, *(len(name) + 2 for name in result.methods)])
    header = f"{'method':<{width}}{'tok/s':>8}{'speedup (95%)':>19}{'tau':>7}{'draft ms':>10}"
    header += f"{'verify ms':>11}{'ident.':>8}{'prefix':>8}{'tokens':>8}{'logp':>8}"
    header += f"{'TV':>7}{'KL':>7}  note"
    lines = [header, "-" * len(header)]
    for name, m in result.methods.items():
        cells = [
            _cell(m.draft_ms_per_step, 10, ".1f"),
            _cell(m.verify_ms_per_step, 11, ".1f"),
            _cell(m.identical_to_ar, 8, ".2f"),
            _cell(m.prefix_agreement, 8, ".2f"),
            _cell(m.token_agreement, 8, ".2f"),
            _cell(m.mean_logprob, 8, ".3f"),
            *_distance_cells(result.distance(name)),
        ]
        own = [row for row in result.rows if row.method == name]
        note = _note(m, result.suffix_history(name), _fp32_parted(own))
        bound = _bound(m)
        speedup = f"{'disturbed' if bound.disturbed else _speedup_cell(m):>19}"
        if bound.disturbed:
            note = " ".join(filter(None, [f"speedup x{bound.ratio:.2f} above tau: timing "
                                          "disturbed, run again", note]))  # fmt: skip
        lines.append(
            f"{name:<{width}}{m.tokens_per_second:>8.1f}{speedup}"
            f"{m.mean_accept_length:>7.2f}{''.join(cells)}  {note}"
        )
    return "\n".join(lines)


def _speedup_cell(m: Aggregate) -> str:
    """'1.62x (1.48-1.77)'; the ratio alone where the interval is a point (ar itself, one
    prompt) or there is none."""
    ratio = f"{m.speedup_vs_ar or 0.0:.2f}x"
    if m.speedup_interval is None or m.speedup_interval[0] == m.speedup_interval[1]:
        return ratio
    low, high = m.speedup_interval
    return f"{ratio} ({low:.2f}-{high:.2f})"


def _note(m: Aggregate, suffix_history: str | None = None, fp32_parted: str = "") -> str:
    tree = f"tree {m.tree} (tokens/depth/top-k)" if m.tree else ""
    ties = f"{m.near_ties} float near-tie(s)" if m.near_ties else ""
    bugs = f"{m.bugs} DIFFERENCE(S) NOT EXPLAINED BY ROUNDING" if m.bugs and not m.lossy else ""
    exact = (
        f"identical to fp32 ar {m.identical_to_fp32:.2f}{fp32_parted}"
        if m.identical_to_fp32 is not None
        else ""
    )
    history = SUFFIX_NOTES[suffix_history] if suffix_history else ""
    notes = ["LOSSY" if m.lossy else "", tree, ties, bugs, exact, history]
    return " ".join(filter(None, notes))


def _fp32_parted(rows: list[Row]) -> str:
    """' (elsewhere 12-57 tokens agree before the first difference)': how far the rows that
    part from fp32 `ar` follow it ('' where none does, or none was checked)."""
    agreeing = sorted(
        row.fp32_check.agreeing
        for row in rows
        if row.fp32_check is not None and not row.fp32_check.identical
    )
    if not agreeing:
        return ""
    low, high = agreeing[0], agreeing[-1]
    span = str(low) if low == high else f"{low}-{high}"
    return f" (elsewhere {span} tokens agree before the first difference)"


def _distance_cells(distance: RunDistance | None) -> list[str]:
    """The TV and KL cells: '-' where not measured, 'inf' where a step's KL is infinite."""
    if distance is None:
        return [_cell(None, 7, ".3f"), _cell(None, 7, ".3f")]
    return [_cell(distance.total_variation, 7, ".3f"), _cell(distance.kl, 7, ".3f")]


def _cell(value: float | None, width: int, spec: str) -> str:
    return f"{value:>{width}{spec}}" if value is not None else f"{'-':>{width}}"


def write_outputs(
    result: BenchResult, json_out: str | None, csv_out: str | None, profile: bool = False
) -> None:
    """Write atomically: an interrupt mid-write leaves an earlier file as it was. With
    `profile`, each entry's JSON record has its step profile (step_profile.py)."""
    if json_out:
        write_atomic(Path(json_out), json.dumps(result.as_dict(profile), indent=2))
    if csv_out:
        records = result.as_dict()["per_prompt"]
        buffer = io.StringIO(newline="")
        writer = csv.DictWriter(buffer, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
        write_atomic(Path(csv_out), buffer.getvalue())


def stderr_progress(message: str) -> None:
    print(f"\r\033[K{message}", end="", file=sys.stderr, flush=True)
