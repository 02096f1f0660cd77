"""Online adaptation by kind of prompt: adapt on one file's prompts, measure τ on others.

For each prompt file F: `specdec bench --methods eagle --adapt --save-adapted HEAD_F` on F's
first `--adapt-prompts` prompts (the head adapts after each one). Then, for each file G, one
`specdec bench` on G's next `--measure-prompts` prompts with `eagle@embedded` (the loaded
head: τ before) and `eagle@HEAD_F` for every F (τ after adapting on F), so every τ of a file
comes from the same prompts in the same run. Last, for each F, τ on F's own first prompts
again (the runs it adapted on) with the loaded and the adapted head: what a user who reruns
the same prompts gains; and τ of the adapting run's prompts 2.. (each new to a head adapted
on the prompts before it) against the loaded head's on them. Greedy; the output is the
target's either way. A rerun with the same `--work` and settings reuses every bench whose
JSON is already there (other settings are refused). Results: docs/benchmarks.md, section
"Online adaptation by kind".

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
    if out.is_file():  # finished in an earlier run with this --work
        return json.loads(out.read_text())
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
    settings = {k: str(v) for k, v in vars(args).items() if k not in ("out", "work")}
    recorded = work / "settings.json"
    if recorded.is_file() and json.loads(recorded.read_text()) != settings:
        raise SystemExit(f"{work} holds benches run with other settings; pass another --work")
    recorded.write_text(json.dumps(settings, indent=2))
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

    seen: dict[str, dict] = {}  # adapted kind -> bench on the prompts it adapted on
    for kind, (adapt, _) in slices.items():
        methods = f"eagle@embedded,eagle@{heads[kind]}"
        seen[kind] = bench(args, methods, adapt, work / f"seen-{kind}.json")
        taus = {name: row["mean_accept_length"] for name, row in seen[kind]["methods"].items()}
        table[kind]["seen_before"] = taus["eagle@embedded"]
        table[kind]["seen_after"] = taus[f"eagle@{heads[kind]}"]
        # online: each prompt met for the first time by the head adapted on the ones before it
        online = adapted[kind]["config"]["adaptation"]["methods"]["eagle"]["tau_by_prompt"][1:]
        loaded = {
            row["prompt_index"]: row["mean_accept_length"]
            for row in seen[kind]["per_prompt"]
            if row["method"] == "eagle@embedded"
        }
        table[kind]["online_before"] = sum(loaded[i] for i in range(1, first)) / (first - 1)
        table[kind]["online_after"] = sum(online) / len(online)

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
    print("\nloaded head → adapted head: on the prompts it adapted on, run again; and on prompts")
    print("2.. of the adapting run, each new to the head when it came:")
    for kind in kinds:
        row = table[kind]
        print(
            f"{kind:12} again {row['seen_before']:.2f} → {row['seen_after']:.2f}, "
            f"as they came {row['online_before']:.2f} → {row['online_after']:.2f}"
        )
    if args.out:
        report = {"settings": {k: str(v) for k, v in vars(args).items() if k != "out"}}
        report |= {"table": table, "adapted": adapted, "measured": measured, "seen": seen}
        args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
