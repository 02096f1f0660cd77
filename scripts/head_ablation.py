"""Which training choices make a head that generalises: train variants on the same data, then
bench them all in one run against the same `ar`, per prompt file, greedy and at T = 1.

Each variant is `specdec train eagle --data DATA` plus its own flags (`VARIANTS`: training-time
test depth, input noise, draft vocabulary, the EAGLE-3 layout with and without EAGLE 3.1's
input norms, and the bundled head continued instead of a fresh start), trained on the
same tokens with one shared feature cache. Training resumes from its checkpoint and a finished
variant (its card without `partial`) is not trained again, so the script can be stopped and
rerun; it is meant to run unattended for hours (`nohup nice ... &`). Then one `specdec bench`
per temperature runs `ar`, each `--baseline` head and every variant on the first `--limit`
prompts of each evaluation file, and the table gives τ per file, its mean, the speedup, the
teacher-forced top-1 per built-in held-out kind of every head, baselines included (`specdec
validate`, 2 passes for all) and τ per kind from each card.

    nohup nice python scripts/head_ablation.py --data ~/.local/share/specdec-playground/\
training-data --tokens 3M --eval 'my-benchmarks/*.jsonl' --work ~/ablation \
        --out docs/bench/head-ablation.json > ~/ablation.log 2>&1 &
"""

from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
from pathlib import Path

CONTINUE = ["--init", "embedded"]  # the bundled head (EAGLE-1), trained on further
VARIANTS: dict[str, list[str]] = {
    "base": [],  # a fresh eagle1 head: one layer, unroll 2, noise 0.2, 8,192-token vocabulary
    "continue": CONTINUE,  # its settings as `base`, its 8,192-token vocabulary, lr 1e-3
    "continue-lr5e-4": [*CONTINUE, "--lr", "5e-4"],
    "continue-unroll4": [*CONTINUE, "--unroll", "4"],
    "continue-noise0": [*CONTINUE, "--noise", "0"],
    "continue-vocab16k": [*CONTINUE, "--draft-vocab", "16384"],  # picked anew from the data
    "continue-vocab32k": [*CONTINUE, "--draft-vocab", "32768"],
    "unroll4": ["--unroll", "4"],
    "noise0": ["--noise", "0"],
    "vocab16k": ["--draft-vocab", "16384"],
    "vocab32k": ["--draft-vocab", "32768"],
    "eagle3": ["--arch", "eagle3", "--unroll", "4"],
    "eagle3-norms": ["--arch", "eagle3", "--unroll", "4", "--input-norms"],  # EAGLE 3.1
}


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a `specdec data` work folder (or source)")
    parser.add_argument("--tokens", default="3000000", help="training tokens per variant")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="names from VARIANTS")
    parser.add_argument("--trained-only", action="store_true", help="train, bench nothing")
    parser.add_argument("--baseline", default="embedded", help="heads to compare against")
    parser.add_argument("--eval", required=True, help="evaluation prompt files (glob)")
    parser.add_argument("--limit", type=int, default=8, help="prompts per evaluation file")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--method", default="eagle2")
    parser.add_argument("--target", default="embedded")
    parser.add_argument(
        "--train-flags", default="", help="more `specdec train` flags for every variant"
    )
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args(argv)


def run(command: list[str]) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def trained(head: Path) -> bool:
    card = head / "specdec_card.json"
    return card.is_file() and "partial" not in json.loads(card.read_text())


def train(args: argparse.Namespace, name: str) -> Path:
    head = args.work / "heads" / name
    if trained(head):
        return head
    command = [sys.executable, "-m", "specdec_core.cli", "train", "eagle", "--data", args.data]
    command += ["--tokens", str(args.tokens), "--epochs", str(args.epochs), "--out", str(head)]
    command += ["--work", str(args.work / "train-work"), "--target", args.target]
    command += [*args.train_flags.split(), *VARIANTS[name]]
    run(command)
    return head


def evaluation_file(args: argparse.Namespace) -> tuple[Path, list[tuple[str, int, int]]]:
    """The first --limit prompts of every evaluation file in one JSONL; -> (it, (file, first
    index, end) per file)."""
    lines, spans = [], []
    for path in sorted(glob.glob(args.eval)):
        taken = [line for line in Path(path).read_text().splitlines() if line.strip()]
        spans.append((Path(path).stem, len(lines), len(lines) + len(taken[: args.limit])))
        lines += taken[: args.limit]
    if not lines:
        raise SystemExit(f"--eval {args.eval}: no prompt file matches")
    out = args.work / "eval.jsonl"
    out.write_text("\n".join(lines) + "\n")
    return out, spans


def bench(args, heads: dict[str, Path], prompts: Path, temperature: float) -> dict:
    """One `specdec bench` at `temperature` of `ar` and every head (a finished run with the
    same entries is read, not run again)."""
    out = args.work / f"bench-t{temperature:g}.json"
    entries = ["ar"] + [f"{args.method}@{spec}" for spec in heads.values()]
    if not out.is_file() or json.loads(out.read_text())["config"]["methods"] != entries:
        command = [
            sys.executable,
            "-m",
            "specdec_core.cli",
            "bench",
            "--methods",
            ",".join(entries),
        ]
        command += ["--prompts", str(prompts), "--max-new-tokens", str(args.max_new_tokens)]
        command += ["--temperature", str(temperature), "--device", "cpu", "--json-out", str(out)]
        command += ["--target", args.target]
        run(command)
    return json.loads(out.read_text())


def table(result: dict, heads: dict[str, Path], spans, method: str) -> dict[str, dict]:
    """Per head: τ per file and its mean, speedup vs ar, identical share."""
    rows = {}
    for name, spec in heads.items():
        entry = f"{method}@{spec}"
        per = [r for r in result["per_prompt"] if r["method"] == entry]
        by_file = {}
        for file, first, end in spans:
            taken = [r for r in per if first <= r["prompt_index"] < end]
            steps = sum(r["steps"] for r in taken)
            by_file[file] = round(sum(r["new_tokens"] for r in taken) / steps, 3) if steps else None
        summary = result["methods"][entry]
        rows[name] = {
            "tau_by_file": by_file,
            "tau_mean_over_files": round(sum(by_file.values()) / len(by_file), 3),
            "speedup_vs_ar": summary["speedup_vs_ar"],
            "identical_to_ar": summary["identical_to_ar"],
        }
    return rows


def top1_by_kind(args: argparse.Namespace, head: Path | str) -> dict[str, float]:
    """`specdec validate --no-tau` of `head`: teacher-forced top-1 per held-out kind, the mean
    of 2 passes for every head (a card's own table averages its --unroll passes)."""
    command = [sys.executable, "-m", "specdec_core.cli", "validate", "--head", str(head)]
    command += ["--target", args.target, "--unroll", "2", "--no-tau", "--json", "--device", "cpu"]
    command += ["--work", str(args.work / "train-work")]  # the held-out answers training made
    print("$", " ".join(command), flush=True)
    found = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    by_kind = json.loads(found)["by_kind"]
    return {kind: row["teacher_forced_top1"] for kind, row in by_kind.items()}


def card_table(head: Path | str) -> dict:
    """The card's `validation_by_kind` of a trained head folder ({} for a bundled name)."""
    card = Path(head) / "specdec_card.json"
    return json.loads(card.read_text()).get("validation_by_kind", {}) if card.is_file() else {}


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    heads: dict[str, Path | str] = {b: b for b in args.baseline.split(",") if b}
    for name in names:
        heads[name] = train(args, name)
    if args.trained_only:
        return 0
    prompts, spans = evaluation_file(args)
    report: dict = {"variants": {n: VARIANTS[n] for n in names}, "tokens": args.tokens}
    for temperature in (0.0, 1.0):
        result = bench(args, heads, prompts, temperature)
        report[f"t{temperature:g}"] = table(result, heads, spans, args.method)
    report["top1_by_kind"] = {name: top1_by_kind(args, spec) for name, spec in heads.items()}
    report["tau_by_kind_from_cards"] = {
        name: {kind: row.get("tau") for kind, row in card_table(h).items()}
        for name, h in heads.items()
        if card_table(h)
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for temperature in ("t0", "t1"):
        print(f"\n{temperature}: tau per file (mean) and speedup")
        for name, row in report[temperature].items():
            files = " ".join(f"{f} {t}" for f, t in row["tau_by_file"].items())
            print(f"{name:<10} {files}  mean {row['tau_mean_over_files']}  "
                  f"x{row['speedup_vs_ar']:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
