"""``GitHubTool``: read-only research in one GitHub repository, over httpx.

Operations: ``repository``, ``file`` (a file's text or a directory's entries), ``history``
(commits, optionally of a path), ``diff`` (one commit, or ``base...head``), ``issues``, ``issue``
and ``comments`` (of an issue or pull request). Each result is ``{"repository", "operation",
"source_url", "data"}``; ``source_url`` is the github.com page the data comes from.

What keeps it to one repository and its token to itself:

* the repository is validated strictly (``owner/name``, GitHub's characters and lengths);
* every URL is built here from the API base and quoted path segments (``..`` refused): the
  model never supplies a URL, and a request hook refuses anything but HTTPS to the API host;
* redirects are not followed: a 3xx answer is an error naming the status only;
* an answer is read up to ``max_response_bytes`` (``MAX_RESPONSE_BYTES``, 8 MiB, by default):
  a longer one is not read further and is an error asking the model for less;
* ``source_url`` quotes the path it names, so a path cannot add a query or climb out of the
  repository's pages;
* the token travels in the ``Authorization`` header only, and the tool's ``repr`` leaves it out.
  One rule keeps it out of what the tool returns: every string of a result *and* of an error,
  whatever answer it came from (an error answer, or a successful one the tool could not use),
  has the token replaced with ``[redacted]`` (in ``call``, the tool's only way out). An answer
  is scrubbed as it arrives too, so a text cut short (``[... cut]``) never ends in a piece of
  it. The transport is injectable (``transport=``) for tests.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
from collections.abc import Mapping
from typing import Literal
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field

from ..base.serialization import JsonObject, JsonValue
from ..clients._http import as_object, member, members
from ..exceptions import ConfigurationError, ToolError
from .files import MAX_BYTES, ReadOnlyTool, positive_int, text_prefix
from .tool import ToolContext

_OWNER = r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}"
REPOSITORY = re.compile(rf"^{_OWNER}/[A-Za-z0-9._-]{{1,100}}$")
_REF = re.compile(r"^[A-Za-z0-9._/-]{1,200}$")
_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")
_TEXT_LIMIT = 4_000
#: The most bytes of one GitHub answer the tool reads (``max_response_bytes=``): a 1 MB file of
#: the contents API comes base64-encoded in JSON, well under it.
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
Operation = Literal["repository", "file", "history", "diff", "issues", "issue", "comments"]


class GitHubArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    operation: Operation = Field(description="What to read.")
    path: str | None = Field(None, description="file, history: a path in the repository.")
    ref: str | None = Field(None, description="file, history: a branch, tag or commit.")
    sha: str | None = Field(None, description="diff: the commit to show.")
    base: str | None = Field(None, description="diff: compare base...head (with head).")
    head: str | None = Field(None, description="diff: compare base...head (with base).")
    number: int | None = Field(None, ge=1, description="issue, comments: the issue or PR.")
    state: Literal["open", "closed", "all"] = Field("open", description="issues: which ones.")
    page: int = Field(1, ge=1, le=100, description="issues, history, comments: result page.")


class GitHubTool(ReadOnlyTool):
    """Read the configured GitHub repository: metadata, files, history, diffs, issues."""

    name = "github"
    Args = GitHubArgs

    def __init__(self, repository: str, *, token: str | None = None,
                 api_url: str = "https://api.github.com", web_url: str = "https://github.com",
                 transport: httpx.BaseTransport | None = None, timeout: float = 20.0,
                 per_page: int = 20, max_bytes: int = MAX_BYTES,
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        if not isinstance(repository, str) or not REPOSITORY.match(repository) or \
                repository.split("/")[1] in (".", ".."):
            raise ConfigurationError(f"repository {repository!r} is not 'owner/name' with "
                                     "GitHub's characters (letters, digits, - . _)")
        _check_options(token, timeout, per_page, max_bytes, max_response_bytes)
        self.repository = repository
        self.host, self.api_url = _https_base(api_url, "api_url")
        self.web_url = _https_base(web_url, "web_url")[1]
        self._token = token or None
        self._transport = transport
        self.timeout = timeout
        self.per_page = per_page
        self.max_bytes = max_bytes
        self.max_response_bytes = max_response_bytes
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self.description = (f"Read the GitHub repository {repository}: its metadata, files, "
                            "commit history, diffs, issues and comments.")

    # -- HTTP ----------------------------------------------------------------------------

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(transport=self._transport, timeout=self.timeout,
                                            follow_redirects=False,
                                            event_hooks={"request": [self._only_the_api]})
            return self._client

    def _only_the_api(self, request: httpx.Request) -> None:
        if request.url.scheme != "https" or request.url.host != self.host:
            raise ToolError(f"refused a request to {request.url.host!r}: only {self.host} is "
                            "asked, over HTTPS")

    def _get(self, segments: list[str], params: Mapping[str, str | int] | None = None
             ) -> JsonValue:
        for segment in segments:
            if segment in ("", ".", "..") or "\x00" in segment:
                raise ToolError(f"invalid path segment {segment!r}")
        path = "/".join(quote(s, safe="") for s in segments)
        url = f"{self.api_url}/repos/{self.repository}/{path}".rstrip("/")
        headers = {"Accept": "application/vnd.github+json", "User-Agent": "turnkit-django",
                   "X-GitHub-Api-Version": "2022-11-28"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        try:
            with self._http().stream("GET", url, params=params, headers=headers) as response:
                raw = self._read(response)
        except httpx.HTTPError as exc:
            error = ToolError(f"could not reach GitHub ({type(exc).__name__})")
        else:
            if response.is_success:
                try:
                    body: JsonValue = json.loads(raw)  # the boundary: GitHub's JSON
                    return self._scrub(body)
                except ValueError:
                    raise ToolError("GitHub did not answer with JSON") from None
            error = self._status_error(response, raw, "/".join(segments))
        raise error  # outside the except block: the transport error (and request) stay behind

    def _read(self, response: httpx.Response) -> bytes:
        """The answer's body, read up to ``max_response_bytes``; ToolError past them."""
        limit = self.max_response_bytes
        declared = response.headers.get("content-length", "")
        over = declared.isdigit() and int(declared) > limit
        body = bytearray()
        for chunk in () if over else response.iter_bytes():
            body += chunk
            if len(body) > limit:
                over = True
                break
        if over:
            raise ToolError(f"GitHub's answer is over {limit} bytes, more than this tool reads; "
                            "ask for less: one commit's diff rather than a comparison, a "
                            "narrower path, a smaller page")
        return bytes(body)

    def _status_error(self, response: httpx.Response, raw: bytes, what: str) -> ToolError:
        status = response.status_code
        if response.is_redirect:
            return ToolError(f"GitHub answered HTTP {status} (a redirect), which is not "
                             f"followed: only {self.host} is asked")
        try:
            body = self._scrub(json.loads(raw))
        except ValueError:
            body = {}
        message = str(body.get("message") or "")[:200] if isinstance(body, dict) else ""
        if status == 404:
            text = f"not found in {self.repository}: {what or 'the repository'}"
        elif status == 401:
            text = "GitHub refused the token (HTTP 401); check the token"
        elif status in (403, 429) and response.headers.get("x-ratelimit-remaining") == "0":
            text = f"GitHub's rate limit is used up (HTTP {status}); try again later"
        else:
            text = f"GitHub request failed with HTTP {status}" + (f": {message}" if message
                                                                   else "")
        return ToolError(text)

    def _redact(self, text: str) -> str:
        """``text`` with the token replaced, as is or as ``repr`` escapes it (``{path!r}``)."""
        if not self._token:
            return text
        escaped = self._token.replace("\\", "\\\\")
        forms = {self._token, escaped, escaped.replace("'", "\\'"),
                 escaped.replace('"', '\\"')}
        for form in sorted(forms, key=len, reverse=True):
            text = text.replace(form, "[redacted]")
        return text

    def _scrub(self, value: JsonValue) -> JsonValue:
        """``value`` with every occurrence of the token replaced, however deep."""
        if not self._token:
            return value
        if isinstance(value, str):
            return self._redact(value)
        if isinstance(value, dict):
            return {self._redact(k): self._scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._scrub(v) for v in value]
        return value

    # -- operations ----------------------------------------------------------------------

    def call(self, ctx: ToolContext, args: GitHubArgs) -> JsonObject:
        """The operation's result; every string of it, or of the error raised, token-free."""
        handler = getattr(self, f"_{args.operation}")
        try:
            data, page = handler(args)
        except Exception as exc:  # the message becomes the tool result the model reads
            text = str(exc) if isinstance(exc, ToolError) else (
                f"the GitHub tool failed ({type(exc).__name__}: {exc})")
            error = ToolError(self._redact(text))
        else:
            result: JsonObject = {"repository": self.repository, "operation": args.operation,
                                  "source_url": f"{self.web_url}/{self.repository}{page}",
                                  "data": data}
            return {key: self._scrub(value) for key, value in result.items()}
        raise error  # outside the except block: the unscrubbed error stays behind

    def _repository(self, args: GitHubArgs) -> tuple[JsonValue, str]:
        repo = as_object(self._get([]))
        keys = ("full_name", "description", "default_branch", "language", "topics",
                "stargazers_count", "forks_count", "open_issues_count", "pushed_at")
        data: JsonObject = {k: repo.get(k) for k in keys}
        data["license"] = member(repo, "license").get("spdx_id")
        return data, ""

    def _file(self, args: GitHubArgs) -> tuple[JsonValue, str]:
        path = _path(args.path or "")
        params = {"ref": _ref(args.ref)} if args.ref else None
        answer = self._get(["contents", *path.split("/")] if path else ["contents"], params)
        shown = quote(path)  # in a page's URL: no query, fragment or %2e%2e from the path
        tree = f"/tree/{args.ref or 'HEAD'}/{shown}".rstrip("/")
        if isinstance(answer, list):
            entries: list[JsonValue] = [{k: e.get(k) for k in ("name", "path", "type", "size")}
                                        for e in members(answer)]
            return {"path": path, "entries": entries}, tree
        found = as_object(answer)
        if found.get("type") != "file":
            raise ToolError(f"{path!r} is a {found.get('type')}, not a file")
        text, truncated = self._decode(found)
        return ({"path": found.get("path"), "size": found.get("size"), "sha": found.get("sha"),
                 "truncated": truncated, "content": text},
                f"/blob/{args.ref or 'HEAD'}/{shown}")

    def _decode(self, found: JsonObject) -> tuple[str, bool]:
        content = found.get("content")
        if not content:
            raise ToolError(f"{found.get('path')!r} is too large for the contents API")
        try:
            raw = base64.b64decode(content) if isinstance(content, str) else None
        except (binascii.Error, ValueError):
            raw = None
        if raw is None:
            raise ToolError("GitHub returned file content that is not base64")
        if self._token:  # before the cut, which could leave a piece of it
            raw = raw.replace(self._token.encode(), b"[redacted]")
        if b"\x00" in raw[: self.max_bytes]:
            raise ToolError(f"{found.get('path')!r} is a binary file")
        return text_prefix(raw, self.max_bytes), len(raw) > self.max_bytes

    def _history(self, args: GitHubArgs) -> tuple[JsonValue, str]:
        params: dict[str, str | int] = {"per_page": self.per_page, "page": args.page}
        if args.path:
            params["path"] = _path(args.path)
        if args.ref:
            params["sha"] = _ref(args.ref)
        commits = members(self._get(["commits"], params))
        data: list[JsonValue] = [
            {"sha": c.get("sha"), "author": member(c, "commit").get("author"),
             "message": _clip(member(c, "commit").get("message"), 500)} for c in commits]
        return data, f"/commits/{args.ref or 'HEAD'}"

    def _diff(self, args: GitHubArgs) -> tuple[JsonValue, str]:
        data: JsonObject
        if args.sha:
            if not _SHA.match(args.sha):
                raise ToolError(f"sha {args.sha!r} is not a commit hash")
            commit = as_object(self._get(["commits", args.sha]))
            data = {"sha": commit.get("sha"),
                    "message": _clip(member(commit, "commit").get("message"), 2_000),
                    "files": _files(commit.get("files"))}
            return data, f"/commit/{args.sha}"
        if args.base and args.head:
            span = f"{_ref(args.base)}...{_ref(args.head)}"
            compared = as_object(self._get(["compare", span]))
            data = {k: compared.get(k) for k in ("status", "ahead_by", "behind_by")}
            data["commits"] = [c.get("sha") for c in members(compared.get("commits"))][:100]
            data["files"] = _files(compared.get("files"))
            return data, f"/compare/{span}"
        raise ToolError("diff needs sha, or base and head")

    def _issues(self, args: GitHubArgs) -> tuple[JsonValue, str]:
        found = members(self._get(["issues"], {"state": args.state, "per_page": self.per_page,
                                               "page": args.page}))
        data: list[JsonValue] = [
            {"number": i.get("number"), "title": i.get("title"), "state": i.get("state"),
             "user": member(i, "user").get("login"), "comments": i.get("comments"),
             "labels": _labels(i), "pull_request": "pull_request" in i,
             "created_at": i.get("created_at")} for i in found]
        return data, "/issues"

    def _issue(self, args: GitHubArgs) -> tuple[JsonValue, str]:
        number = _number(args)
        issue = as_object(self._get(["issues", str(number)]))
        keys = ("number", "title", "state", "comments", "created_at", "closed_at")
        data: JsonObject = {k: issue.get(k) for k in keys}
        data.update(user=member(issue, "user").get("login"), labels=_labels(issue),
                    body=_clip(issue.get("body"), _TEXT_LIMIT))
        return data, f"/issues/{number}"

    def _comments(self, args: GitHubArgs) -> tuple[JsonValue, str]:
        number = _number(args)
        found = members(self._get(["issues", str(number), "comments"],
                                  {"per_page": self.per_page, "page": args.page}))
        data: list[JsonValue] = [
            {"user": member(c, "user").get("login"), "created_at": c.get("created_at"),
             "body": _clip(c.get("body"), _TEXT_LIMIT)} for c in found]
        return data, f"/issues/{number}"


def _check_options(token: object, timeout: object, per_page: object, max_bytes: object,
                   max_response_bytes: object) -> None:
    """Refuse options of the wrong kind; an error never shows the token."""
    if token is not None and not isinstance(token, str):
        raise ConfigurationError(f"GitHubTool token must be a str or None, got a "
                                 f"{type(token).__name__}")
    if isinstance(token, str) and any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigurationError("GitHubTool token has whitespace or control characters; pass "
                                 "the bare token (strip the newline read from a file)")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ConfigurationError(f"GitHubTool timeout must be a number of seconds above 0, got "
                                 f"{timeout!r}")
    if not positive_int(per_page) or per_page not in range(1, 101):
        raise ConfigurationError(f"GitHubTool per_page must be a whole number from 1 to 100 "
                                 f"(GitHub's page sizes), got {per_page!r}")
    for option, value in (("max_bytes", max_bytes), ("max_response_bytes", max_response_bytes)):
        if not positive_int(value):
            raise ConfigurationError(f"GitHubTool {option} must be a whole number above 0, got "
                                     f"{value!r}")


def _https_base(url: str, option: str) -> tuple[str, str]:
    if not isinstance(url, str):
        raise ConfigurationError(f"GitHubTool {option} must be a plain https:// URL, got "
                                 f"{url!r}")
    parts = urlsplit(url)
    if (parts.scheme != "https" or not parts.hostname or parts.username or parts.query
            or parts.fragment or ".." in parts.path):
        raise ConfigurationError(f"GitHubTool {option} must be a plain https:// URL, got "
                                 f"{url!r}")
    return parts.hostname, url.rstrip("/")


def _path(path: str) -> str:
    cleaned = path.strip("/")
    if any(part in ("", ".", "..") for part in cleaned.split("/")) and cleaned:
        raise ToolError(f"path {path!r} may not contain empty, '.' or '..' parts")
    return cleaned


def _ref(ref: str) -> str:
    if not _REF.match(ref) or ".." in ref or ref.startswith(("/", "-")):
        raise ToolError(f"ref {ref!r} is not a branch, tag or commit name")
    return ref


def _number(args: GitHubArgs) -> int:
    if args.number is None:
        raise ToolError(f"{args.operation} needs number, the issue or pull request number")
    return int(args.number)


def _clip(text: JsonValue, limit: int) -> str:
    value = str(text or "")
    return value if len(value) <= limit else value[:limit] + " [... cut]"


def _labels(item: JsonObject) -> list[JsonValue]:
    return [label.get("name") for label in members(item.get("labels"))]


def _files(files: JsonValue) -> list[JsonValue]:
    return [{"filename": f.get("filename"), "status": f.get("status"),
             "additions": f.get("additions"), "deletions": f.get("deletions"),
             "patch": _clip(f.get("patch"), _TEXT_LIMIT)} for f in members(files)[:50]]


__all__ = ["MAX_RESPONSE_BYTES", "REPOSITORY", "GitHubArgs", "GitHubTool"]
