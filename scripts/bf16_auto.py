"""Does the best method answer faster in bfloat16 than in float32 on this CPU? The measurement
behind `--dtype auto` (docs/benchmarks.md, "bf16 by default where the CPU multiplies it").

The target is loaded twice, in float32 and in bfloat16, and `specdec bench`'s measurement
(`run_bench`: the methods interleaved per prompt, `ar` first, a warm-up) runs on each in turn,
alternating which dtype goes first every round (float32, bfloat16, then bfloat16, float32, …)
so that drift of a busy machine hits both alike. Defaults: `ar` and `eagle2-lookup` with the
bundled head, the first 6 MT-Bench prompts (first turns; evaluation prompts, never training
data), 96 new tokens, greedy, 2 rounds. The bf16 runs are also checked against float32 `ar`
(`--reference fp32`), untimed.

It prints the machine (date, CPU model, its bf16 / AMX flags, versions), then per dtype and
method: tok/s (all tokens over all time of every round), τ, the ratio over `ar` of the same
dtype, identity to that `ar`, and identity to float32 `ar`; then the best method of each dtype
and "faster for the user": bf16 best-method tok/s over float32 best-method tok/s.

    python scripts/bf16_auto.py                          # the measurement (about 10 min on 2 cores)
    python scripts/bf16_auto.py --limit 1 --rounds 1 --max-new-tokens 16   # a smoke test
    python scripts/bf16_auto.py --json-out docs/bench/dtype/bf16-auto.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec_core.decoding.config import DecodeConfig  # noqa: E402
from specdec_core.environment import current_environment  # noqa: E402
from specdec_core.files import write_atomic  # noqa: E402
from specdec_core.measurement.bench import BenchResult, run_bench, stderr_progress  # noqa: E402
from specdec_core.measurement.measure import Row, aggregate  # noqa: E402
from specdec_core.models.loading import LoadedModel, auto_dtype_reason, load_model  # noqa: E402
from specdec_core.run.prompts import read_prompt_file  # noqa: E402

DTYPES = ("float32", "bfloat16")
EXTRAS = ("draft", "head", "medusa", "mtp", "speculator", "dflash")


@dataclass(frozen=True)
class Line:
    """One method in one dtype over every round."""

    dtype: str
    method: str
    tokens_per_second: float
    tau: float
    over_ar: float  # tok/s over `ar`'s in the same dtype
    identical_to_ar: float  # share of prompts, every round
    identical_to_fp32: float | None  # share of prompts checked against float32 `ar`


def lines(dtype: str, rows: list[Row], methods: list[str]) -> list[Line]:
    ar = aggregate([row for row in rows if row.method == "ar"])
    found = []
    for method in methods:
        own = aggregate([row for row in rows if row.method == method])
        found.append(
            Line(
                dtype=dtype,
                method=method,
                tokens_per_second=own.tokens_per_second,
                tau=own.mean_accept_length,
                over_ar=own.tokens_per_second / ar.tokens_per_second,
                identical_to_ar=own.identical_to_ar,
                identical_to_fp32=own.identical_to_fp32,
            )
        )
    return found


def table(found: list[Line]) -> str:
    head = f"{'dtype':<10}{'method':<24}{'tok/s':>8}{'tau':>7}{'over ar':>9}"
    head += f"{'ident. ar':>11}{'ident. fp32 ar':>16}"
    rows = [head, "-" * len(head)]
    for line in found:
        fp32 = "-" if line.identical_to_fp32 is None else f"{line.identical_to_fp32:.2f}"
        rows.append(
            f"{line.dtype:<10}{line.method:<24}{line.tokens_per_second:>8.1f}{line.tau:>7.2f}"
            f"{line.over_ar:>8.2f}x{line.identical_to_ar:>11.2f}{fp32:>16}"
        )
    return "\n".join(rows)


def best(found: list[Line], dtype: str) -> Line:
    return max((line for line in found if line.dtype == dtype), key=lambda x: x.tokens_per_second)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--head", default="embedded", help="the EAGLE head eagle* methods use")
    parser.add_argument(
        "--methods", default="ar,eagle2-lookup", help="bench entries (ar always runs first)"
    )
    parser.add_argument("--prompts", default=str(ROOT / "resources/evaluation/mt-bench.jsonl"))
    parser.add_argument("--limit", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=2, help="each dtype once per round")
    parser.add_argument(
        "--no-fp32-check", action="store_true", help="skip checking bf16 runs against fp32 ar"
    )
    parser.add_argument("--json-out", default=None)
    args = parser.parse_args()
    methods = ["ar", *[m.strip() for m in args.methods.split(",") if m.strip() not in ("", "ar")]]
    prompts = read_prompt_file(args.prompts, args.limit)
    config = DecodeConfig(max_new_tokens=args.max_new_tokens)  # greedy, k 4, seed 0
    specs = {name: "embedded" for name in EXTRAS} | {"head": args.head}
    command = shlex.join(["python", "scripts/bf16_auto.py", *sys.argv[1:]])
    environment = current_environment("cpu", command)
    print(json.dumps(environment.to_record()), file=sys.stderr)
    print(f"[auto] {auto_dtype_reason(torch.device('cpu'))}", file=sys.stderr)
    targets: dict[str, LoadedModel] = {
        dtype: load_model(args.target, "cpu", dtype) for dtype in DTYPES
    }
    rows: dict[str, list[Row]] = {dtype: [] for dtype in DTYPES}
    for round_index in range(args.rounds):
        order = DTYPES if round_index % 2 == 0 else DTYPES[::-1]
        for dtype in order:
            print(f"\nround {round_index + 1}/{args.rounds}: {dtype}", file=sys.stderr, flush=True)
            exact = None if args.no_fp32_check or dtype == "float32" else targets["float32"]
            result: BenchResult = run_bench(
                targets[dtype], methods, prompts, config, specs, progress=stderr_progress,
                reference_model=exact,
            )  # fmt: skip
            rows[dtype].extend(result.rows)
    found = [line for dtype in DTYPES for line in lines(dtype, rows[dtype], methods)]
    fp32_best, bf16_best = best(found, "float32"), best(found, "bfloat16")
    faster = bf16_best.tokens_per_second / fp32_best.tokens_per_second
    print(
        f"date {environment.date}, machine {environment.machine}, {environment.cpu_isa}, "
        f"{environment.cpu_threads} threads, torch {environment.torch}, transformers "
        f"{environment.transformers}, python {environment.python}"
    )
    print(
        f"{len(prompts)} prompts from {Path(args.prompts).name}, {args.max_new_tokens} new "
        f"tokens, greedy, {args.rounds} round(s) alternating the dtypes"
    )
    print(table(found))
    print(
        f"best method: float32 {fp32_best.method} {fp32_best.tokens_per_second:.1f} tok/s, "
        f"bfloat16 {bf16_best.method} {bf16_best.tokens_per_second:.1f} tok/s; faster for the "
        f"user in bf16: {faster:.2f}x"
    )
    if args.json_out:
        record = {
            "environment": environment.to_record(),
            "config": {
                **config.as_dict(),
                "target": args.target,
                "head": args.head,
                "prompts": args.prompts,
                "limit": args.limit,
                "rounds": args.rounds,
            },
            "lines": [asdict(line) for line in found],
            "best": {"float32": fp32_best.method, "bfloat16": bf16_best.method},
            "faster_for_the_user": faster,
            "per_prompt": {dtype: [row.to_record() for row in rows[dtype]] for dtype in DTYPES},
        }
        write_atomic(Path(args.json_out), json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
