"""Take docs/server-tab.png: the Server tab following a stand-in vLLM server, beside a real
EAGLE run of the embedded model in the playground.

    xvfb-run -s "-screen 0 1600x1000x24" python scripts/server_screenshot.py

The stand-in is the test suite's fixture server (tests/serving_server.py) on 127.0.0.1; what
it serves is vLLM's exposition of its spec-decode counters, written by `prometheus_client`
with vLLM's metric names and labels and advanced between polls by a simulated load: the
acceptance by position of the playground run, drifting up and down by a quarter (as when the
prompt mix changes). The server's numbers are simulated; the playground's are measured.
Settings go to a temporary config dir, so the user's own settings are untouched.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.screenshot import _wait, open_window, save_grab  # noqa: E402

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
K = 3


class SimulatedVllm:
    """vLLM's spec-decode counters (and generation tokens) in a registry of their own."""

    def __init__(self, rates: list[float]) -> None:
        from prometheus_client import CollectorRegistry, Counter

        os.environ["PROMETHEUS_DISABLE_CREATED_SERIES"] = "True"
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]

        def counter(name: str, help: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, help, [*labels, *extra], registry=self.registry)

        self.drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.")
        self.draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.")
        self.accepted = counter("vllm:spec_decode_num_accepted_tokens", "Accepted tokens.")
        self.per_pos = counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted per position.", ("position",)
        )
        self.generated = counter("vllm:generation_tokens", "Number of generation tokens.")
        self.rates = rates
        self.tick = 0

    def advance(self) -> str:
        """One interval of load; returns the text `/metrics` serves now."""
        from prometheus_client import generate_latest

        self.tick += 1
        drift = 1 + 0.25 * math.sin(self.tick / 2.5)  # the prompt mix changes
        drafts = 380 + 40 * (self.tick % 3)
        accepted = [round(drafts * min(1.0, rate * drift)) for rate in self.rates]
        labels = {"model_name": MODEL, "engine": "0"}
        self.drafts.labels(**labels).inc(drafts)
        self.draft_tokens.labels(**labels).inc(drafts * len(self.rates))
        self.accepted.labels(**labels).inc(sum(accepted))
        for position, value in enumerate(accepted):
            self.per_pos.labels(**labels, position=str(position)).inc(value)
        self.generated.labels(**labels).inc(drafts + sum(accepted))
        return generate_latest(self.registry).decode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "server-tab.png"))
    parser.add_argument("--polls", type=int, default=14)
    parser.add_argument("--size", default="1600x1000")
    args = parser.parse_args()
    app, window = open_window(args.size)

    from tests.serving_server import FixtureServer

    window.decoding.apply({**window.decoding.values(), "method": "eagle", "k": K})
    window.decoding.max_new_tokens.setValue(64)
    window.generate()  # the playground's own measurement of the setting
    _wait(app, lambda: not window.controller.running, 600)
    if window.last_error:
        print("error:", window.last_error, file=sys.stderr)
        return 1

    run = window.server.view.playground  # the EAGLE run (not its ar reference)
    rates = [
        a / d for a, d in zip(run.accepted_per_position, run.drafted_per_position, strict=True)
    ]
    vllm = SimulatedVllm(rates)
    server = FixtureServer("vllm_metrics_1.txt")
    server.routes["/metrics"] = vllm.advance()
    period = 0.5
    view = window.server.view
    window.tabs.setCurrentWidget(view)
    view.url.setText(server.url)
    view.period.setValue(period)
    window.server.start()
    for poll in range(args.polls):
        _wait(app, lambda n=poll: window.server.polls > n, 30)
        server.routes["/metrics"] = vllm.advance()
    _wait(app, lambda: window.server.polls > args.polls, 30)
    save_grab(app, window, Path(args.out))
    window.server.stop()
    _wait(app, lambda: not window.server.running, 30)
    server.stop()
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
