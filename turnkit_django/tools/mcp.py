"""``MCPServer``: the tools of a Model Context Protocol server, as a tool source of an agent.

``MCPServer.stdio(argv, ...)`` starts the server as a subprocess for each listing and each call;
``MCPServer.http(url, headers=...)`` talks streamable HTTP. Options:

* ``allow=``: the names (as the server calls them) of the tools offered to the model; others are
  never offered nor callable. None offers every tool the server lists.
* ``prefix=``: put before each offered name (``prefix="files_"`` offers ``files_read``); none by
  default. A listed tool whose name collides with another tool of the agent is not offered.
* ``timeout=``: seconds one call may take; past it the call is a tool error the model reads.
* ``recovery=``: as for ``@tool``: ``"replay_safe"`` when calling a tool again after a worker
  died mid-call is harmless; else such a call is "outcome unknown".
* ``retries=``, ``backoff=``: with ``recovery="replay_safe"`` only, a call the server failed to
  answer (it died, hung or could not be reached) is tried again as ``@tool(retries=)`` does,
  durably; an error result the server answered is never retried.
* ``name=``: the source's name in the turn's record (default: from the command or the host).

The list is asked when a turn starts and recorded with the turn (runtime.sources). An MCP error
result, a timeout, an exception or a server that died is a tool error the model reads; for a
server not declared replay-safe, a failure mid-call also tells the model the call may have taken
effect. The
values of secret-looking headers (``Authorization``, ``*-Key``, ``*-Token``...) and of the URL's
credentials are replaced with ``[redacted]`` in everything a call returns or reports, and the
source's ``repr`` shows neither headers nor URL credentials.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..base.serialization import JsonObject, JsonValue
from ..clients._http import client_secrets, redact, safe_url
from ..clients.protocol import ToolSpec
from ..exceptions import ConfigurationError, ToolError
from . import mcp_session
from .sources import ToolSource
from .tool import NAME_LENGTH, Recovery, Tool, ToolContext

logger = logging.getLogger("turnkit_django.tools")
_NAME = re.compile(rf"^[a-zA-Z][a-zA-Z0-9_-]{{0,{NAME_LENGTH - 1}}}$")
_PREFIX = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]*$")
#: Seconds the runtime waits past a call's own timeout before it stops waiting for the call.
GRACE = 10.0


class MCPArguments(BaseModel):
    """The arguments of an MCP tool call: any object (the server validates it)."""

    model_config = ConfigDict(extra="allow")


class MCPServerFailed(ToolError):
    """The server failed to answer a call (it died, hung or could not be reached), as opposed
    to answering with an error result: what ``retries=`` of a replay-safe server tries again."""


class MCPTool(Tool):
    """One tool of an :class:`MCPServer`, as recorded in a turn's listing."""

    Args = MCPArguments

    def __init__(self, source: MCPServer, entry: Mapping[str, Any]) -> None:
        self.source = source
        self.name = str(entry["name"])
        self.remote = str(entry.get("remote") or entry["name"])
        self.description = str(entry.get("description") or "") or self.name
        self.schema: JsonObject = dict(entry.get("schema") or {"type": "object"})
        self.recovery = source.recovery
        self.timeout = source.timeout + GRACE  # the call's own deadline passes first
        self.retries, self.backoff = source.retries, source.backoff
        self.retry_on = (MCPServerFailed,)  # never an error result the server answered

    def spec(self) -> ToolSpec:
        schema = dict(self.schema)
        schema.setdefault("properties", {})
        return ToolSpec(self.name, self.description, schema)

    def call(self, ctx: ToolContext, args: MCPArguments) -> object:
        return self.source.call(self.remote, dict(args.model_extra or {}))


class MCPServer(ToolSource):
    """An MCP server's tools (see the module's documentation)."""

    def __init__(self, endpoint: mcp_session.Endpoint, *, name: str,
                 allow: Sequence[str] | None = None, prefix: str = "", timeout: float = 60.0,
                 recovery: Recovery = "unknown", list_timeout: float = 30.0,
                 retries: int = 0, backoff: float = 1.0) -> None:
        self.endpoint = endpoint
        self.name = name
        self.allow = None if allow is None else tuple(allow)
        self.prefix = prefix
        self.timeout = timeout
        self.recovery = recovery
        self.list_timeout = list_timeout
        self.retries, self.backoff = retries, backoff
        self.secrets = client_secrets(None, endpoint.headers, endpoint.url)
        self.check()

    @classmethod
    def stdio(cls, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: str | None = None, name: str | None = None, **options: Any) -> MCPServer:
        """A server started as ``argv`` (with ``env`` added to a minimal environment)."""
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
            raise ConfigurationError(
                f"MCPServer.stdio: argv must be a non-empty list of strings such as "
                f"['python', '-m', 'files_server'], got {argv!r}")
        default = re.sub(r"[^A-Za-z0-9_-]", "_", argv[-1].rsplit("/", 1)[-1].rsplit(".", 1)[0])
        return cls(mcp_session.Endpoint(argv=tuple(argv), env=env, cwd=cwd),
                   name=name or default or "mcp", **options)

    @classmethod
    def http(cls, url: str, *, headers: Mapping[str, str] | None = None,
             name: str | None = None, **options: Any) -> MCPServer:
        """A server at ``url`` over streamable HTTP, sent ``headers`` with each request."""
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"MCPServer.http: url must be an http(s) URL, got "
                                     f"{safe_url(url) if isinstance(url, str) else url!r}")
        if headers is not None and not (isinstance(headers, Mapping) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in headers.items())):
            raise ConfigurationError("MCPServer.http: headers must map names to strings")
        host = safe_url(url).split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
        return cls(mcp_session.Endpoint(url=url, headers=dict(headers or {})),
                   name=name or re.sub(r"[^A-Za-z0-9_-]", "_", host) or "mcp", **options)

    def check(self) -> None:
        where = f"MCP server {self.name!r}"
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigurationError(f"{where}: name must match {_NAME.pattern}; pass name=")
        if self.allow is not None and not all(isinstance(a, str) and a for a in self.allow):
            raise ConfigurationError(f"{where}: allow must be a list of tool names (as the "
                                     f"server names them) or None, got {self.allow!r}")
        if self.prefix and not (isinstance(self.prefix, str) and _PREFIX.fullmatch(self.prefix)):
            raise ConfigurationError(f"{where}: prefix must start with a letter and hold only "
                                     f"letters, digits, '_' or '-', got {self.prefix!r}")
        if self.recovery not in ("unknown", "replay_safe"):
            raise ConfigurationError(f"{where}: recovery must be 'unknown' or 'replay_safe'")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or (
                self.retries < 0):
            raise ConfigurationError(f"{where}: retries must be a non-negative whole number "
                                     f"(calls tried again after the server failed), got "
                                     f"{self.retries!r}")
        if self.retries and self.recovery != "replay_safe":
            raise ConfigurationError(
                f"{where}: retries={self.retries} needs recovery='replay_safe': a server that "
                "died mid-call may have done the call's effect, which a retry would repeat")
        if isinstance(self.backoff, bool) or not isinstance(self.backoff, int | float) or not (
                0 <= self.backoff < float("inf")):
            raise ConfigurationError(f"{where}: backoff must be a non-negative number of "
                                     f"seconds, got {self.backoff!r}")
        for option in ("timeout", "list_timeout"):
            value = getattr(self, option)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ConfigurationError(f"{where}: {option} must be a positive number of "
                                         f"seconds, got {value!r}")

    # -- listing and calling (I/O; the runtime holds no database session) ---------------

    def list_tools(self) -> list[JsonObject]:
        try:
            found = mcp_session.list_tools(self.endpoint, float(self.list_timeout))
        except Exception as exc:
            raise ToolError(self._failure("listing its tools", exc, self.list_timeout)) from None
        offered: list[JsonObject] = []
        for entry in found:
            remote = str(entry["name"])
            if self.allow is not None and remote not in self.allow:
                continue
            name = self.prefix + remote
            if not _NAME.fullmatch(name):
                logger.warning("MCP server %r: tool %r is not offered: its name does not match "
                               "%s", self.name, name[:80], _NAME.pattern)
                continue
            offered.append(self._scrubbed({**entry, "name": name, "remote": remote}))
        return offered

    def tools(self, listed: Sequence[JsonObject]) -> list[Tool]:
        return [MCPTool(self, entry) for entry in listed]

    def call(self, remote: str, arguments: JsonObject) -> JsonValue:
        """Call the server's tool ``remote``; a failure of any kind raises ToolError."""
        try:
            is_error, content = mcp_session.call_tool(self.endpoint, remote, arguments,
                                                      float(self.timeout))
        except Exception as exc:
            text = self._failure(f"calling {remote!r}", exc, self.timeout)
            if self.recovery != "replay_safe":
                text += (" The call may have taken effect before the server stopped: check "
                         "before calling it again.")
            raise MCPServerFailed(text) from None
        content = self._scrubbed(content)
        if is_error:
            raise ToolError(content if isinstance(content, str) else str(content))
        return content

    def _failure(self, doing: str, exc: Exception, timeout: float) -> str:
        cause = mcp_session.leaf(exc)
        if isinstance(cause, TimeoutError):
            text = f"The MCP server {self.name!r} did not finish {doing} within {timeout:g}s."
        else:
            detail = str(cause).strip() or "no detail"
            text = (f"The MCP server {self.name!r} failed while {doing} "
                    f"({type(cause).__name__}: {detail[:500]}).")
        return redact(text, self.secrets)

    def _scrubbed(self, value: Any) -> Any:
        """``value`` with every secret of the endpoint replaced, in every string it holds."""
        if isinstance(value, str):
            return redact(value, self.secrets)
        if isinstance(value, dict):
            return {k: self._scrubbed(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._scrubbed(v) for v in value]
        return value

    def __repr__(self) -> str:
        where = safe_url(self.endpoint.url) if self.endpoint.url else " ".join(
            self.endpoint.argv)
        return f"<MCPServer {self.name!r} {where}>"


__all__ = ["MCPArguments", "MCPServer", "MCPServerFailed", "MCPTool"]
