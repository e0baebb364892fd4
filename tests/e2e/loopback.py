"""A model provider on loopback for e2e tests: an HTTP server in a thread of the test process
whose subclasses say how to answer each POSTed chat request (workers reach it by its URL)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # every turn may connect at once
    daemon_threads = True


class LoopbackProvider:
    """Serves until the test process exits; :meth:`answer` writes each response."""

    def __init__(self) -> None:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                try:
                    provider.answer(self, body)
                except OSError:  # the worker reading it was killed
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """An OpenAI-compatible base URL (``.../v1``)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        raise NotImplementedError
