"""A stand-in serving engine for tests: `/metrics` and `/get_server_info` from the fixture files
in tests/fixtures/serving/, served on 127.0.0.1 (a free port), switchable between polls."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "serving"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


class FixtureServer:
    """`serve("vllm_metrics_1.txt")` switches what `/metrics` returns; `then(...)` queues
    files that each following `/metrics` request moves on to (the last one stays); `stop()`
    makes the server vanish (connection refused) and `start()` brings it back on the same
    port."""

    def __init__(self, metrics: str, server_info: str | None = None) -> None:
        self.routes: dict[str, str] = {}
        self.queue: list[str] = []
        self.serve(metrics, server_info)
        self.port = 0
        self._httpd: ThreadingHTTPServer | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serve(self, metrics: str, server_info: str | None = None) -> None:
        self.routes["/metrics"] = fixture(metrics)
        if server_info is not None:
            self.routes["/get_server_info"] = fixture(server_info)

    def then(self, *metrics: str) -> None:
        self.queue.extend(fixture(name) for name in metrics)

    def start(self) -> None:
        routes, queue = self.routes, self.queue

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server name
                body = routes.get(self.path)
                if self.path == "/metrics" and queue:
                    routes["/metrics"] = queue.pop(0)  # served next time
                if body is None:
                    self.send_error(404)
                    return
                data = body.encode()
                kind = "application/json" if body.lstrip().startswith("{") else "text/plain"
                self.send_response(200)
                self.send_header("Content-Type", f"{kind}; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
