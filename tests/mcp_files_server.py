"""A small MCP server for the MCP tool tests (``python -m tests.mcp_files_server``, stdio).

Tools: ``read`` and ``search`` (read-only), ``delete`` (never offered by the tests' allow-list),
``fail`` (answers with an MCP error result), ``crash`` (the server process dies mid-call),
``crash_once`` (dies the first time, answers once the file ``marker`` exists), ``hang``
(outlasts the call's timeout), ``whoami`` (over HTTP, echoes the Authorization
header). The tools named in the file ``$MCP_HIDDEN`` (when it exists) are left out of its
listings, so a test can change what a new listing would offer. tests/unit/test_mcp_http.py
serves ``server.streamable_http_app()`` on loopback.
"""

from __future__ import annotations

import os
import signal
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError


class FilesServer(MCPServer):
    async def list_tools(self):  # type: ignore[no-untyped-def]
        hidden = os.environ.get("MCP_HIDDEN", "")
        names = open(hidden).read().split() if hidden and os.path.exists(hidden) else []
        return [t for t in await super().list_tools() if t.name not in names]


server = FilesServer("files")
FILES = {"notes.txt": "buy milk", "todo.txt": "write tests"}


@server.tool()
def read(path: str) -> str:
    """Read a file by its path."""
    if path not in FILES:
        raise ToolError(f"no file named {path!r}")
    return FILES[path]


@server.tool()
def search(text: str) -> list[str]:
    """The paths of the files containing ``text``."""
    return sorted(name for name, body in FILES.items() if text in body)


@server.tool()
def delete(path: str) -> str:
    """Delete a file (never offered by the tests)."""
    FILES.pop(path, None)
    return "deleted"


@server.tool()
def fail(reason: str) -> str:
    """Always fails with an MCP error result."""
    raise ToolError(f"it failed: {reason}")


@server.tool()
def whoami(ctx: Context) -> str:
    """Over HTTP: the Authorization header the request came with (echoed, as a careless
    server might)."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None) or {}
    return f"you sent {headers.get('authorization', 'nothing')}"


@server.tool()
def crash() -> str:
    """The server process dies in the middle of this call."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


@server.tool()
def crash_once(marker: str) -> str:
    """Dies mid-call the first time (creating ``marker``), answers after."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return "done on a later attempt"


@server.tool()
def hang(seconds: float = 60.0) -> str:
    """Outlasts the call's timeout (the client gives up and stops the server)."""
    time.sleep(seconds)
    return "woke up"


if __name__ == "__main__":
    server.run()
