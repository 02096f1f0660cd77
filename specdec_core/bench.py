"""`specdec bench`: every method on the same prompts in one process, speed as a ratio to `ar`.

Methods are interleaved per prompt (prompt 1: ar, eagle, …; prompt 2: …) so that drift of a
noisy machine hits all of them alike. `ar` always runs: it is the reference for speedup and
for `identical_to_ar`.

**Policies in one run.** A method entry may name a verification policy and its parameters:
`METHOD[:POLICY[:NAME=VALUE[/NAME=VALUE…]]]`, e.g. `ngram:threshold:tau=0.3` or
`classic:hybrid:ngram_tau=0.5/logit_tau=0.1`; `ngram,ngram:typical,ngram:ensemble:w=0.8` compares
three policies in one run. A bare `METHOD` uses `--policy` / `--policy-param`; `METHOD:POLICY`
uses that policy's defaults plus the parameters written after it. Rows and tables are keyed by
the entry as written.

**Fidelity** (`specdec_core.fidelity`): every entry also reports, against the `ar` output of
the same prompt, `prefix_agreement` (share of tokens before the first difference) and
`token_agreement` (position-wise), and `mean_logprob`, the mean target log-probability per
generated token from one extra teacher-forced target forward (not timed).
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from specdec_core.baselines import HF_METHODS, run_hf
from specdec_core.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.fidelity import mean_logprob, prefix_agreement, token_agreement
from specdec_core.models import LoadedModel
from specdec_core.prompts import encode_prompt
from specdec_core.runner import prepare_extra, run

Progress = Callable[[str], None]


@dataclass
class BenchResult:
    config: dict
    methods: dict[str, dict] = field(default_factory=dict)
    per_prompt: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"config": self.config, "methods": self.methods, "per_prompt": self.per_prompt}


def run_bench(
    target: LoadedModel,
    methods: list[str],
    prompts: list[str],
    config: DecodeConfig,
    specs: dict[str, str],
    raw: bool = False,
    progress: Progress | None = None,
) -> BenchResult:
    report = progress or (lambda message: None)
    methods = ["ar", *[m for m in methods if m != "ar"]]
    variants = {label: parse_variant(label, config) for label in methods}
    bases = {method for method, _ in variants.values()}
    extras = {m: _extra(m, target, specs) for m in bases}
    encoded = [encode_prompt(target.tokenizer, prompt, raw) for prompt in prompts]
    _warm_up(target, encoded[0], config)
    rows: list[dict] = []
    for index, ids in enumerate(encoded):
        reference: list[int] = []
        for label, (method, variant_config) in variants.items():
            report(f"prompt {index + 1}/{len(encoded)}: {label}")
            row = _run_one(method, target, ids, variant_config, extras[method])
            reference = row["token_ids"] if label == "ar" else reference
            row.update(method=label, prompt_index=index, **compare_to_reference(row, reference))
            rows.append(row)
    result = BenchResult(config={**config.as_dict(), **_describe(target, methods, specs)})
    result.per_prompt = [{k: v for k, v in row.items() if k != "token_ids"} for row in rows]
    ar_tps = _aggregate([r for r in rows if r["method"] == "ar"])["tokens_per_second"]
    for method in methods:
        summary = _aggregate([r for r in rows if r["method"] == method])
        summary["speedup_vs_ar"] = summary["tokens_per_second"] / ar_tps if ar_tps else 0.0
        result.methods[method] = summary
    return result


def parse_variant(label: str, config: DecodeConfig) -> tuple[str, DecodeConfig]:
    """`METHOD[:POLICY[:NAME=VALUE[/NAME=VALUE…]]]` -> (method, config with that policy)."""
    method, _, rest = label.partition(":")
    if not rest:
        return method, config
    policy, _, param_text = rest.partition(":")
    params: dict[str, float] = {}
    for item in filter(None, param_text.split("/")):
        name, _, value = item.partition("=")
        try:
            params[name.strip()] = float(value)
        except ValueError:
            raise SpecdecError(
                f"'{label}': policy parameters are NAME=NUMBER separated by '/'"
            ) from None
    return method, replace(config, policy=policy, policy_params=params)


def compare_to_reference(row: dict, reference: list[int]) -> dict:
    """Fidelity of a row's output to the `ar` output of the same prompt (`fidelity`)."""
    output = row["token_ids"]
    return {
        "identical_to_ar": output == reference,
        "prefix_agreement": prefix_agreement(output, reference),
        "token_agreement": token_agreement(output, reference),
    }


def _extra(method: str, target: LoadedModel, specs: dict[str, str]) -> object | None:
    if method in HF_METHODS:
        return prepare_extra("classic", target, specs) if method == "hf-assisted" else None
    return prepare_extra(method, target, specs)


def _run_one(method: str, target: LoadedModel, ids: list[int], config, extra) -> dict:
    if method in HF_METHODS:
        row = run_hf(method, target, ids, config, extra)
        return {**row, "mean_logprob": mean_logprob(target.model, ids, row["token_ids"])}
    summary = run(target, method, ids, config, extra)
    return {
        "method": method,
        "policy": summary.policy,
        "policy_params": dict(config.policy_params),
        "token_ids": list(summary.token_ids),
        "new_tokens": summary.new_tokens,
        "steps": summary.steps,
        "mean_accept_length": summary.mean_accept_length,
        "wall_seconds": summary.wall_seconds,
        "tokens_per_second": summary.tokens_per_second,
        "draft_seconds": summary.draft_seconds,
        "verify_seconds": summary.verify_seconds,
        "lossy": summary.lossy,
        "mean_logprob": mean_logprob(target.model, ids, summary.token_ids),
        "tree": tree_label(summary.config),
        "tree_sizing": summary.config.get("tree_sizing"),  # why this size (measured costs)
    }


def _aggregate(rows: list[dict]) -> dict:
    new = sum(r["new_tokens"] for r in rows)
    wall = sum(r["wall_seconds"] for r in rows)
    steps = sum(r["steps"] for r in rows)
    draft = [r["draft_seconds"] for r in rows if r["draft_seconds"] is not None]
    verify = [r["verify_seconds"] for r in rows if r["verify_seconds"] is not None]
    return {
        "tokens_per_second": new / wall if wall else 0.0,
        "mean_accept_length": new / steps if steps else 0.0,
        "identical_to_ar": sum(r["identical_to_ar"] for r in rows) / len(rows),
        "prompts": len(rows),
        "new_tokens": new,
        "steps": steps,
        "wall_seconds": wall,
        "draft_ms_per_step": 1000 * sum(draft) / steps if draft and steps else None,
        "verify_ms_per_step": 1000 * sum(verify) / steps if verify and steps else None,
        "lossy": any(r.get("lossy", False) for r in rows),
        "tree": rows[-1].get("tree"),  # the tree size a tree method chose, on the last prompt
        **_fidelity(rows),
    }


def _fidelity(rows: list[dict]) -> dict:
    """Prompt means of the agreements; log-prob per token over all generated tokens."""
    out: dict = {}
    for key in ("prefix_agreement", "token_agreement"):
        values = [r[key] for r in rows if r.get(key) is not None]
        out[key] = sum(values) / len(values) if values else None
    scored = [r for r in rows if r.get("mean_logprob") is not None]
    tokens = sum(r["new_tokens"] for r in scored)
    total = sum(r["mean_logprob"] * r["new_tokens"] for r in scored)
    out["mean_logprob"] = total / tokens if tokens else None
    return out


def _warm_up(target: LoadedModel, ids: list[int], config: DecodeConfig) -> None:
    """One short run so that first-call allocation does not land on the first method."""
    run(target, "ar", ids, DecodeConfig(max_new_tokens=4, seed=config.seed))


def _describe(target: LoadedModel, methods: list[str], specs: dict[str, str]) -> dict:
    return {
        "target": target.spec,
        "device": str(target.device),
        "dtype": str(target.dtype).removeprefix("torch."),
        "methods": methods,
        **{f"{name}_spec": spec for name, spec in specs.items()},
    }


def format_table(result: BenchResult) -> str:
    """One row per entry: speed, τ, and fidelity to `ar` (prefix / token agreement, log-prob)."""
    width = max([14, *(len(name) + 2 for name in result.methods)])
    header = f"{'method':<{width}}{'tok/s':>8}{'speedup':>9}{'tau':>7}{'draft ms':>10}"
    header += f"{'verify ms':>11}{'ident.':>8}{'prefix':>8}{'tokens':>8}{'logp':>8}  note"
    lines = [header, "-" * len(header)]
    for name, m in result.methods.items():
        cells = [
            _cell(m["draft_ms_per_step"], 10, ".1f"),
            _cell(m["verify_ms_per_step"], 11, ".1f"),
            _cell(m["identical_to_ar"], 8, ".2f"),
            _cell(m.get("prefix_agreement"), 8, ".2f"),
            _cell(m.get("token_agreement"), 8, ".2f"),
            _cell(m.get("mean_logprob"), 8, ".3f"),
        ]
        lines.append(
            f"{name:<{width}}{m['tokens_per_second']:>8.1f}{m['speedup_vs_ar']:>8.2f}x"
            f"{m['mean_accept_length']:>7.2f}{''.join(cells)}  {_note(m)}"
        )
    return "\n".join(lines)


def tree_label(config: dict) -> str | None:
    """'tokens/depth/top-k' of a tree method's run (None for chains), as chosen or given."""
    if "tree_sizing" not in config:  # set by tree drafters' describe()
        return None
    return f"{config['tree_tokens']}/{config['tree_depth']}/{config['tree_topk']}"


def _note(m: dict) -> str:
    tree = f"tree {m['tree']} (tokens/depth/top-k)" if m.get("tree") else ""
    return " ".join(filter(None, ["LOSSY" if m["lossy"] else "", tree]))


def _cell(value: float | None, width: int, spec: str) -> str:
    return f"{value:>{width}{spec}}" if value is not None else f"{'-':>{width}}"


def write_outputs(result: BenchResult, json_out: str | None, csv_out: str | None) -> None:
    if json_out:
        Path(json_out).write_text(json.dumps(result.as_dict(), indent=2))
    if csv_out:
        with open(csv_out, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(result.per_prompt[0]))
            writer.writeheader()
            writer.writerows(result.per_prompt)


def stderr_progress(message: str) -> None:
    print(f"\r\033[K{message}", end="", file=sys.stderr, flush=True)
