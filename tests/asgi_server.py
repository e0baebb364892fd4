"""A real ASGI server (uvicorn) in a thread of the test process, for the SSE view.

The server serves ``tests.urls`` with Django's ASGI handler over a socket on 127.0.0.1; it uses
the test database (transactional tests commit what it must see). ``serving()`` yields its base
URL and stops it, waiting for its thread, when the block ends. ``serving_wsgi()`` does the same
with Django's WSGI handler behind the standard library's threading WSGI server.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import uvicorn
from django.core.asgi import get_asgi_application
from django.core.wsgi import get_wsgi_application


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serving() -> Iterator[str]:
    port = _free_port()
    config = uvicorn.Config(get_asgi_application(), host="127.0.0.1", port=port,
                            log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start within 10 s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving_wsgi() -> Iterator[str]:
    server = make_server("127.0.0.1", 0, get_wsgi_application(),
                         server_class=_ThreadingServer, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="wsgiref", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
