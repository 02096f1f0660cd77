"""`specdec serve-check`: serve a setting with vLLM (from the serving environment that
`./playground serving-env` makes) and check it against the playground on a few prompts: each
answer identical to the playground's `ar` or where it first differs, τ and acceptance by
position from the engine's /metrics beside the playground's, and both speeds. The check and
its numbers: `specdec_core.serving.serving_check`.

The table goes to stdout (`--json-out FILE` also writes `ServeCheck.to_record()`), progress to
stderr. Exit code 0 when every answer is identical to the playground's, 1 when one differs, 2
for bad input or an engine that does not start (one line saying what to do).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

from specdec_core.cli.options import (
    AUTO,
    add_decode_options,
    add_model_options,
    decode_config,
    load_target,
    model_specs,
)
from specdec_core.errors import SpecdecError


def register(sub: argparse._SubParsersAction) -> None:
    from specdec_core.serving.serving_check import served_methods

    parser = sub.add_parser(
        "serve-check",
        help="serve a setting with vLLM and check its output, tau and speed against the "
        "playground's on a few prompts",
    )
    methods = served_methods()
    parser.add_argument(
        "--method",
        default="ar",
        choices=methods,
        help="ar: vLLM without speculation; any other: served with `specdec export --serve`'s "
        "speculative config",
    )
    parser.add_argument("--prompts", required=True, metavar="FILE.jsonl", help="prompt or turns")
    parser.add_argument("--limit", type=int, default=3, metavar="N", help="first N prompts")
    parser.add_argument(
        "--serving-env",
        default=None,
        metavar="DIR",
        help="the virtual environment vLLM is installed in (default: $SPECDEC_SERVING_ENV, "
        "else .venv-serving beside this environment; ./playground serving-env makes it)",
    )
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=900.0,
        metavar="S",
        help="seconds for the engine to answer /health (vLLM on a CPU: 1-4 minutes)",
    )
    parser.add_argument(
        "--request-timeout", type=float, default=600.0, metavar="S", help="per prompt"
    )
    parser.add_argument(
        "--engine-args",
        default="",
        metavar="'FLAGS'",
        help="more vLLM flags, quoted as one argument, e.g. --engine-args '--max-model-len 4096'",
    )
    parser.add_argument(
        "--log", default=None, metavar="FILE", help="the engine's log (default: a new temp file)"
    )
    parser.add_argument("--json-out", default=None, metavar="FILE", help="the report as JSON")
    add_model_options(parser)
    add_decode_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from specdec_core.run.prompts import encode_prompt, read_prompt_file
    from specdec_core.serving.serving_check import (
        EngineOptions,
        check_setting,
        serve_argv,
        serve_check,
        served_model,
        serving_python,
    )

    if args.k == AUTO:
        raise SpecdecError("serve-check needs a number for --k (the k the engine is served with)")
    if args.limit < 1:
        raise SpecdecError(f"--limit must be at least 1 (got {args.limit})")
    if args.startup_timeout <= 0 or args.request_timeout <= 0:
        raise SpecdecError("--startup-timeout and --request-timeout must be more than 0 seconds")
    config = decode_config(args)
    check_setting(config)
    model = served_model(args.method, model_specs(args))
    serve_argv(args.method, config, args.target, model, "auto")  # a refusal before loading
    python = serving_python(args.serving_env)  # before minutes of model loading
    texts = read_prompt_file(args.prompts, args.limit)
    try:
        extra_args = tuple(shlex.split(args.engine_args))
    except ValueError as error:
        raise SpecdecError(f"--engine-args: {error}; quote it as one shell argument") from None
    options = EngineOptions(
        python=python,
        log_path=_log_path(args.log),
        startup_timeout=args.startup_timeout,
        request_timeout=args.request_timeout,
        extra_args=extra_args,
    )
    from specdec_core.run.runner import load_extra

    target = load_target(args, texts)
    prompts = [encode_prompt(target.tokenizer, text, args.raw) for text in texts]
    extra = load_extra(args.method, target, model_specs(args)) if args.method != "ar" else None
    result = serve_check(
        target,
        args.method,
        prompts,
        config,
        options,
        model=model,
        extra=extra,
        progress=lambda message: print(f"# {message}", file=sys.stderr, flush=True),
    )
    print(result.table())
    for note in result.notes:
        print(f"# {note}", file=sys.stderr)
    print(f"# engine: {result.command}", file=sys.stderr)
    print(f"# engine log: {result.log_path}", file=sys.stderr)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result.to_record(), indent=2) + "\n")
    return 0 if result.identical else 1


def _log_path(given: str | None) -> Path:
    if given:
        path = Path(given).expanduser()
        if path.is_dir():
            raise SpecdecError(f"--log {given} is a folder; give a file")
        return path
    handle, name = tempfile.mkstemp(prefix="specdec-serve-check-", suffix=".log")
    os.close(handle)
    return Path(name)
