"""Online adaptation by kind of prompt: adapt on one file's prompts, measure τ on others.

For each prompt file F: `specdec bench --methods eagle --adapt --save-adapted HEAD_F` on F's
first `--adapt-prompts` prompts (the head adapts after each one). Then, for each file G, one
`specdec bench` on G's next `--measure-prompts` prompts with `eagle@embedded` (the loaded
head: τ before) and `eagle@HEAD_F` for every F (τ after adapting on F), so every τ of a file
comes from the same prompts in the same run. Greedy; the output is the target's either way.
Results: docs/benchmarks.md, section "Online adaptation by kind".

    python scripts/adaptation_bench.py --data ../shared/data \
        --out docs/bench/adaptation-by-kind.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="folder of *.jsonl prompt files")
    parser.add_argument("--adapt-prompts", type=int, default=10)
    parser.add_argument("--measure-prompts", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--adapt-seconds", type=float, default=0.5)
    parser.add_argument("--work", type=Path, help="adapted heads and prompt slices (default: temp)")
    parser.add_argument("--out", type=Path, help="write the table and every bench as JSON")
    return parser.parse_args(argv)


def bench(args: argparse.Namespace, methods: str, prompts: Path, out: Path, *extra: str) -> dict:
    command = [sys.executable, "-m", "specdec_core.cli", "bench", "--methods", methods]
    command += ["--prompts", str(prompts), "--max-new-tokens", str(args.max_new_tokens)]
    command += ["--k", str(args.k), "--temperature", "0", "--device", "cpu"]
    command += ["--dtype", "float32", "--json-out", str(out), *extra]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="adaptation-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    files = sorted(args.data.glob("*.jsonl"))
    if not files:
        raise SystemExit(f"no *.jsonl prompt files in {args.data}")
    first, then = args.adapt_prompts, args.adapt_prompts + args.measure_prompts
    slices: dict[str, tuple[Path, Path]] = {}
    for path in files:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        if len(lines) < then:
            raise SystemExit(f"{path} has {len(lines)} prompts; {then} are needed")
        adapt, measure = work / f"{path.stem}-adapt.jsonl", work / f"{path.stem}-measure.jsonl"
        adapt.write_text("\n".join(lines[:first]) + "\n")
        measure.write_text("\n".join(lines[first:then]) + "\n")
        slices[path.stem] = (adapt, measure)

    adapted: dict[str, dict] = {}
    for kind, (adapt, _) in slices.items():
        head = work / f"head-{kind}"
        extra = ["--adapt", "--adapt-seconds", str(args.adapt_seconds)]
        if not (head / "specdec_card.json").is_file():
            extra += ["--save-adapted", str(head)]
        adapted[kind] = bench(args, "eagle", adapt, work / f"adapt-{kind}.json", *extra)

    heads = {kind: work / f"head-{kind}" for kind in slices}
    methods = ",".join(["eagle@embedded", *(f"eagle@{head}" for head in heads.values())])
    measured: dict[str, dict] = {}
    table: dict[str, dict[str, float]] = {}  # measured kind -> {"before", adapted kind: tau}
    for kind, (_, measure) in slices.items():
        result = bench(args, methods, measure, work / f"measure-{kind}.json")
        measured[kind] = result
        taus = {name: row["mean_accept_length"] for name, row in result["methods"].items()}
        row = {"before": taus["eagle@embedded"]}
        row |= {other: taus[f"eagle@{head}"] for other, head in heads.items()}
        table[kind] = row

    kinds = list(slices)
    print("\nτ on each file's measured prompts (rows), before and after adapting on (columns):")
    print(f"{'measured on':12} {'before':>7} " + " ".join(f"{k:>10}" for k in kinds))
    for kind in kinds:
        row = table[kind]
        cells = " ".join(f"{row[k] - row['before']:+10.2f}" for k in kinds)
        print(f"{kind:12} {row['before']:7.2f} {cells}")
    same = [table[k][k] - table[k]["before"] for k in kinds]
    others = [table[g][f] - table[g]["before"] for f in kinds for g in kinds if g != f]
    print(f"same kind: mean {sum(same) / len(same):+.3f} τ, min {min(same):+.3f}")
    print(f"other kinds: mean {sum(others) / len(others):+.3f} τ, min {min(others):+.3f}")
    if args.out:
        report = {"settings": {k: str(v) for k, v in vars(args).items() if k != "out"}}
        report |= {"table": table, "adapted": adapted, "measured": measured}
        args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
