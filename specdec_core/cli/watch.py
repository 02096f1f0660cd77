"""`specdec watch URL`: follow a vLLM / SGLang server's speculative decoding live.

One line (or, with `--json`, one JSON object: `Interval.to_record()`) per measured interval on
stdout; baselines, restarts and an unreachable server are one line each on stderr, and
polling goes on. `--count N` stops after N measured intervals. The numbers and their
definitions: `specdec_core.serving.server_metrics`.
"""

from __future__ import annotations

import argparse
import json
import sys

from specdec_core.errors import SpecdecError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "watch",
        help="poll a vLLM / SGLang server's /metrics: tau, acceptance by position, tokens/s",
    )
    parser.add_argument("url", help="the server, e.g. http://localhost:8000 (vLLM) or :30000")
    parser.add_argument("--interval", type=float, default=2.0, metavar="S", help="seconds")
    parser.add_argument(
        "--count", type=int, default=None, metavar="N", help="stop after N measured intervals"
    )
    parser.add_argument("--timeout", type=float, default=3.0, metavar="S", help="per request")
    parser.add_argument("--json", action="store_true", help="one JSON object per interval")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from specdec_core.serving.server_metrics import MEASURED, MetricsPoller, watch

    if args.interval <= 0:
        raise SpecdecError(f"--interval must be > 0 seconds (got {args.interval})")
    if args.count is not None and args.count < 1:
        raise SpecdecError(f"--count must be at least 1 (got {args.count})")
    poller = MetricsPoller(args.url, interval=args.interval, timeout=args.timeout)
    measured, last = 0, ""
    for poll in watch(poller, args.interval):
        if poll.interval is not None and poll.state == MEASURED:
            record = poll.interval
            print(json.dumps(record.to_record()) if args.json else record.line(), flush=True)
            measured += 1
            if args.count is not None and measured >= args.count:
                return 0
        elif poll.message != last:  # a status repeats while it lasts: say it once
            print(f"# {poll.line()}", file=sys.stderr, flush=True)
        last = poll.message
    return 0
