"""Live speculative metrics of a serving engine: τ, per-position acceptance and tokens/s from
vLLM's counters and SGLang's gauges, over a real HTTP server serving recorded metrics text.

The fixtures (tests/fixtures/serving/) use the documented names and labels. vLLM, from
vllm_metrics_1.txt to vllm_metrics_2.txt: drafts 1000 -> 1400, draft tokens 3000 -> 4200,
accepted per position (800, 600, 400) -> (1120, 840, 560), generated 2800 -> 3920.
"""

from __future__ import annotations

import json

import pytest

from specdec_core.cli import main
from specdec_core.errors import SpecdecError
from specdec_core.serving.server_metrics import (
    BASELINE,
    MEASURED,
    NO_SPECULATION,
    RESET,
    UNREACHABLE,
    MetricsPoller,
    base_url,
    parse_metrics,
    watch,
)
from tests.serving_server import FixtureServer, fixture


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(name="server")
def server_fixture():
    server = FixtureServer("vllm_metrics_1.txt")
    yield server
    server.stop()


def test_vllm_counter_deltas_give_tau_position_rates_and_tokens_per_second(server):
    clock = Clock()
    poller = MetricsPoller(server.url, interval=2.0, clock=clock)
    first = poller.poll()
    assert first.state == BASELINE and first.interval is None
    server.serve("vllm_metrics_2.txt")
    clock.now += 8.0
    poll = poller.poll()
    assert poll.state == MEASURED
    interval = poll.interval
    assert interval.engine == "vllm" and interval.model == "meta-llama/Llama-3.1-8B-Instruct"
    drafts, accepted = 1400 - 1000, (1120 + 840 + 560) - (800 + 600 + 400)
    assert interval.drafts == drafts
    assert interval.tau == pytest.approx(1 + accepted / drafts)  # 2.8, the bonus counted
    assert interval.acceptance_rate == pytest.approx(accepted / (4200 - 3000))
    assert interval.position_rates == pytest.approx(
        ((1120 - 800) / drafts, (840 - 600) / drafts, (560 - 400) / drafts)
    )
    assert interval.accepted_tokens_per_second == pytest.approx(accepted / 8.0)
    assert interval.generated_tokens_per_second == pytest.approx((3920 - 2800) / 8.0)
    assert (interval.seconds, interval.elapsed) == (8.0, 8.0)
    clock.now += 2.0
    idle = poller.poll()  # nothing new: no drafts, no τ, zero throughput
    assert idle.state == MEASURED and idle.interval.tau is None
    assert idle.interval.accepted_tokens_per_second == 0.0


def test_sglang_reports_its_own_means_and_the_server_info_average():
    server = FixtureServer("sglang_metrics_1.txt", "sglang_server_info.json")
    try:
        clock = Clock()
        poller = MetricsPoller(server.url, clock=clock)
        first = poller.poll()
        assert first.state == MEASURED  # gauges are means already: no baseline needed
        assert first.interval.engine == "sglang"
        assert first.interval.tau == pytest.approx((2.8 + 3.0) / 2)  # the ranks' mean
        assert first.interval.acceptance_rate == pytest.approx((0.6 + 0.66) / 2)
        assert first.interval.average_tau == pytest.approx(3.05)
        assert first.interval.generated_tokens_per_second is None
        server.serve("sglang_metrics_2.txt")
        clock.now += 5.0
        second = poller.poll().interval
        assert second.tau == pytest.approx(3.2) and second.source == "gauge"
        assert second.generated_tokens_per_second == pytest.approx((13000 - 10000) / 5.0)
        assert second.position_rates == ()  # SGLang does not report per position
    finally:
        server.stop()


def test_sglang_without_metrics_enabled_falls_back_to_server_info():
    server = FixtureServer("sglang_metrics_1.txt", "sglang_server_info.json")
    del server.routes["/metrics"]  # 404, as SGLang without --enable-metrics
    try:
        interval = MetricsPoller(server.url).poll().interval
        assert interval.engine == "sglang" and interval.source == "server_info"
        assert interval.tau == pytest.approx(3.05)
    finally:
        server.stop()


def test_a_vanishing_server_is_retried_and_a_counter_reset_starts_a_new_baseline(server):
    clock = Clock()
    poller = MetricsPoller(server.url, interval=1.5, clock=clock)
    assert poller.poll().state == BASELINE
    server.stop()
    down = poller.poll()
    assert down.state == UNREACHABLE and down.interval is None
    assert "unreachable" in down.message and "retrying every 1.5 s" in down.message
    assert poller.poll().state == UNREACHABLE  # still down: same state, no exception
    server.serve("vllm_metrics_2.txt")
    server.start()  # back on the same port, maybe a new process: a new baseline
    clock.now += 3.0
    assert poller.poll().state == BASELINE
    server.serve("vllm_metrics_3.txt")  # restarted: every counter lower than before
    clock.now += 3.0
    reset = poller.poll()
    assert reset.state == RESET and reset.interval is None
    server.serve("vllm_metrics_2.txt")
    clock.now += 4.0
    resumed = poller.poll().interval
    assert resumed.tau == pytest.approx(1 + (2520 - 150) / (1400 - 100))
    assert all(rate >= 0 for rate in resumed.position_rates)
    assert resumed.accepted_tokens_per_second == pytest.approx((2520 - 150) / 4.0)


def test_what_is_not_a_speculating_server_says_so(server):
    server.routes["/metrics"] = "# TYPE vllm:num_requests_running gauge\n"
    server.routes["/metrics"] += 'vllm:num_requests_running{model_name="m"} 1.0\n'
    poll = MetricsPoller(server.url).poll()
    assert poll.state == NO_SPECULATION and "speculative" in poll.message
    assert parse_metrics(fixture("vllm_metrics_1.txt")).accepted_per_position == (800, 600, 400)


def test_urls_are_normalised_and_bad_ones_refused():
    assert base_url("localhost:8000") == "http://localhost:8000"
    assert base_url("http://h:30000/metrics") == "http://h:30000"
    assert base_url("https://h/v1/") == "https://h/v1"
    with pytest.raises(SpecdecError):
        base_url("ftp://h")


def test_watch_polls_until_stopped_or_counted(server):
    server.then("vllm_metrics_2.txt")
    polls = list(watch(MetricsPoller(server.url), interval=0.01, count=3))
    assert [p.state for p in polls] == [BASELINE, MEASURED, MEASURED]


def test_a_baseline_says_how_long_until_the_first_numbers(server):
    poll = MetricsPoller(server.url, interval=30.0).poll()
    assert poll.state == BASELINE and poll.wait == 30.0
    assert poll.line().endswith("baseline taken; first numbers in 30 s")
    assert poll.line(remaining=12.2).endswith("first numbers in 13 s")
    assert poll.line(remaining=-1).endswith("first numbers in 0 s")


def test_cli_watch_prints_one_line_per_interval(server, capsys):
    server.then("vllm_metrics_2.txt")  # the second poll sees the second recording
    argv = ["watch", server.url, "--interval", "0.2", "--count", "1", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    record = json.loads(captured.out.strip().splitlines()[-1])
    assert record["engine"] == "vllm"
    assert record["tau"] == pytest.approx(2.8)
    assert record["position_rates"] == pytest.approx([0.8, 0.6, 0.4])
    assert "baseline taken; first numbers in 1 s" in captured.err  # 0.2 s, rounded up
    sglang = FixtureServer("sglang_metrics_2.txt", "sglang_server_info.json")
    try:
        assert main(["watch", sglang.url, "--count", "1"]) == 0
        line = capsys.readouterr().out
        assert "sglang" in line and "tau 3.20" in line and "acceptance 0.70" in line
    finally:
        sglang.stop()
    assert main(["watch", server.url, "--interval", "0"]) == 2
    assert main(["watch", "ftp://x"]) == 2
