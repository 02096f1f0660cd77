"""A stand-in vLLM OpenAI server for `specdec serve-check`'s tests, run as a subprocess in
place of `python -m vllm.entrypoints.openai.api_server`: it takes the same flags (`--port`,
`--served-model-name`, `--speculative-config`; the others and `-m MODULE` are ignored) and
serves, on 127.0.0.1:

- `/health`: 200 (503 for the first `health_after` seconds);
- `/v1/completions`: the canned answer for the request's `prompt` (token ids), cut at
  `max_tokens`, with `token_ids` when `return_token_ids` is asked for (and not `omit_token_ids`);
  finish_reason "length" when cut or as long as `max_tokens`, else "stop";
- `/metrics`: vLLM's counters in the Prometheus text format: generated tokens always; with a
  speculative config, drafts, draft tokens, accepted tokens and accepted per position, each
  answer adding `drafts` and `accepted_per_position` (draft tokens: drafts × the config's
  num_speculative_tokens).

What it does comes from the JSON file named by $FAKE_ENGINE (`script(path, ...)` writes one):
`answers` (a list of {"prompt": [ids], "ids": [ids]}), `default` (ids for any other prompt;
without it an unknown prompt is HTTP 400), `drafts`, `accepted_per_position`, `health_after`,
`exit_code` (print a line and exit with it at once), `ignore_sigterm`, `omit_token_ids`.

    python tests/fake_engine.py [-m vllm.entrypoints.openai.api_server] --port P ...
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SCRIPT = Path(__file__).resolve()
VARIABLE = "FAKE_ENGINE"


def script(
    path: Path, answers: dict[tuple[int, ...], Sequence[int]] | None = None, **settings
) -> Path:
    """Write the fake's behaviour to `path` (prompt ids -> answer ids, and `settings` as the
    module docstring names them); -> path."""
    records = [{"prompt": list(p), "ids": list(ids)} for p, ids in (answers or {}).items()]
    path.write_text(json.dumps({"answers": records, **settings}), encoding="utf-8")
    return path


def argv_for(engine_argv: Sequence[str]) -> list[str]:
    """`PYTHON -m vllm.entrypoints.openai.api_server FLAGS` as this script with FLAGS."""
    assert list(engine_argv[1:3]) == ["-m", "vllm.entrypoints.openai.api_server"], engine_argv
    return [sys.executable, str(SCRIPT), *engine_argv[3:]]


class State:
    def __init__(self, settings: dict, spec_tokens: int, name: str) -> None:
        self.settings = settings
        self.answers = {tuple(a["prompt"]): list(a["ids"]) for a in settings.get("answers", [])}
        self.spec_tokens = spec_tokens
        self.name = name
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.generated = 0
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted = [0] * spec_tokens

    def answer(self, prompt: tuple[int, ...]) -> list[int] | None:
        found = self.answers.get(prompt)
        return list(found) if found is not None else self.settings.get("default")

    def count(self, tokens: int) -> None:
        with self.lock:
            self.generated += tokens
            if self.spec_tokens:
                drafts = int(self.settings.get("drafts", 0))
                self.drafts += drafts
                self.draft_tokens += drafts * self.spec_tokens
                per_position = self.settings.get("accepted_per_position", [])
                for position, accepted in enumerate(per_position[: self.spec_tokens]):
                    self.accepted[position] += int(accepted)

    def metrics(self) -> str:
        labels = f'engine="0",model_name="{self.name}"'
        lines = [
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{labels}}} {self.generated}.0",
        ]
        if self.spec_tokens:
            for name, value in (
                ("num_drafts", self.drafts),
                ("num_draft_tokens", self.draft_tokens),
                ("num_accepted_tokens", sum(self.accepted)),
            ):
                lines.append(f"# TYPE vllm:spec_decode_{name}_total counter")
                lines.append(f"vllm:spec_decode_{name}_total{{{labels}}} {value}.0")
            lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
            for position, value in enumerate(self.accepted):
                lines.append(
                    "vllm:spec_decode_num_accepted_tokens_per_pos_total"
                    f'{{{labels},position="{position}"}} {value}.0'
                )
        return "\n".join(lines) + "\n"


def handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            if self.path == "/health":
                ready = time.monotonic() - state.started >= state.settings.get("health_after", 0)
                self._send(200 if ready else 503, "", "text/plain")
            elif self.path == "/metrics":
                with state.lock:
                    self._send(200, state.metrics(), "text/plain; version=0.0.4")
            else:
                self._send(404, json.dumps({"error": {"message": "not found"}}))

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/v1/completions":
                self._send(404, json.dumps({"error": {"message": "not found"}}))
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            ids = state.answer(tuple(body["prompt"]))
            if ids is None:
                message = f"no canned answer for prompt {body['prompt']}"
                self._send(400, json.dumps({"error": {"message": message}}))
                return
            limit = int(body.get("max_tokens", 16))
            cut = ids[:limit]
            state.count(len(cut))
            choice = {
                "index": 0,
                "text": " ".join(f"t{token}" for token in cut),
                "finish_reason": "length" if len(cut) >= limit else "stop",
            }
            if body.get("return_token_ids") and not state.settings.get("omit_token_ids"):
                choice.update(token_ids=cut, prompt_token_ids=body["prompt"])
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(cut)}
            self._send(200, json.dumps({"model": state.name, "choices": [choice], "usage": usage}))

        def _send(self, code: int, text: str, kind: str = "application/json") -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    return Handler


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", dest="module", default=None)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default="fake")
    parser.add_argument("--speculative-config", default=None)
    args, _ = parser.parse_known_args(argv)
    settings = json.loads(Path(os.environ[VARIABLE]).read_text(encoding="utf-8"))
    print(f"fake engine: {' '.join(argv)}", flush=True)
    if settings.get("exit_code") is not None:
        print("fake engine: RuntimeError: could not load the model", flush=True)
        return int(settings["exit_code"])
    if settings.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    spec = json.loads(args.speculative_config) if args.speculative_config else {}
    state = State(settings, int(spec.get("num_speculative_tokens", 0)), args.served_model_name)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(state))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
