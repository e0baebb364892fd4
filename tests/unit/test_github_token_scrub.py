"""The GitHub tool scrubs its token from every string it returns: an error it built from a
*successful* answer (a file that is not a file, a binary file, a file too large for the
contents API) named what the answer said as is, so an answer echoing the
token put it into the tool result, the stored transcript and the events."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from turnkit_django import ToolError
from turnkit_django.models import Event, Message, ToolExecution
from turnkit_django.specialists import librarian
from turnkit_django.testing import ScriptedClient, call, reply
from turnkit_django.tools.github import GitHubTool

MODEL = "claude-sonnet-5-5"
TOKEN = "ghp_scrubTestToken0123456789abcdefABCDEF"

#: 200 answers the tool turns into an error, each echoing the token.
ECHOING_ANSWERS = {
    "not a file": {"type": f"symlink to {TOKEN}", "path": "README"},
    "too large": {"type": "file", "path": f"README-{TOKEN}", "content": ""},
    "binary": {"type": "file", "path": f"bin-{TOKEN}",
               "content": base64.b64encode(b"\x00\x01").decode()},
}


def github(answer: Any, token: str = TOKEN) -> GitHubTool:
    return GitHubTool("django/django", token=token, transport=httpx.MockTransport(
        lambda request: httpx.Response(200, json=answer)))


def ask(tool_: GitHubTool, **arguments: Any) -> Any:
    return tool_.call(None, tool_.validate(arguments))  # type: ignore[arg-type]


@pytest.mark.parametrize("answer", ECHOING_ANSWERS.values(), ids=ECHOING_ANSWERS.keys())
def test_an_error_built_from_a_successful_answer_never_shows_the_token(answer: Any) -> None:
    with pytest.raises(ToolError) as raised:
        ask(github(answer), operation="file", path="README")
    assert TOKEN not in str(raised.value) and TOKEN not in repr(raised.value.args)
    assert raised.value.__context__ is None, "the unscrubbed error is not chained to it"


def test_a_token_that_repr_escapes_is_scrubbed_in_its_escaped_form_too() -> None:
    token = "ghp_back\\slash'quote\"0123"  # printable, no whitespace: a token the tool takes
    with pytest.raises(ToolError) as raised:
        ask(github({"type": "file", "path": f"x{token}", "content": ""}, token),
            operation="file", path="README")
    assert "slash" not in str(raised.value), str(raised.value)


@pytest.mark.django_db
@pytest.mark.parametrize("answer", ECHOING_ANSWERS.values(), ids=ECHOING_ANSWERS.keys())
def test_the_token_reaches_neither_the_transcript_nor_the_events(registered: Any,
                                                                 answer: Any) -> None:
    client = ScriptedClient([call("github", operation="file", path="README"),
                             reply("Could not read it.")])
    research = registered(librarian(
        model=MODEL, repository="django/django", token=TOKEN, client=client,
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json=answer))))
    run = research.run("Read the README")
    assert run.status == "completed"
    [execution] = ToolExecution.objects.filter(tool_name="github")
    assert execution.status == "failed" and "[redacted]" in json.dumps(execution.error)
    stored = json.dumps([list(model.objects.values()) for model in (Message, ToolExecution,
                                                                    Event)], default=str)
    assert TOKEN not in stored
    assert TOKEN not in json.dumps(client.requests[-1], default=str)  # what the model read


def test_results_are_still_scrubbed_and_other_errors_unchanged() -> None:
    answer = {"type": "file", "path": "README", "size": 5,
              "content": base64.b64encode(f"x {TOKEN}".encode()).decode()}
    result = ask(github(answer), operation="file", path="README")
    assert TOKEN not in json.dumps(result) and result["data"]["content"] == "x [redacted]"
    with pytest.raises(ToolError, match=r"^'README' is a dir, not a file$"):
        ask(github({"type": "dir", "path": "README"}), operation="file", path="README")


def test_a_text_cut_short_never_ends_in_a_piece_of_the_token() -> None:
    issue = {"number": 7, "title": "t", "body": "x" * 3_990 + TOKEN, "user": {}, "labels": []}
    result = ask(github(issue), operation="issue", number=7)
    assert TOKEN[:10] not in json.dumps(result), "scrubbed before the 4,000-character cut"
    content = base64.b64encode(b"y" * 95 + TOKEN.encode()).decode()
    answer = {"type": "file", "path": "README", "size": 130, "content": content}
    tool_ = GitHubTool("django/django", token=TOKEN, max_bytes=100, transport=httpx.MockTransport(
        lambda request: httpx.Response(200, json=answer)))
    result = ask(tool_, operation="file", path="README")
    assert TOKEN[:10] not in json.dumps(result) and result["data"]["truncated"]


def test_an_unexpected_failure_is_a_scrubbed_tool_error(monkeypatch: pytest.MonkeyPatch) -> None:
    tool_ = github({})

    def broken(args: Any) -> Any:
        raise KeyError(f"no {TOKEN}")

    monkeypatch.setattr(tool_, "_repository", broken)
    with pytest.raises(ToolError, match=r"failed \(KeyError: .*\[redacted\]") as raised:
        ask(tool_, operation="repository")
    assert TOKEN not in str(raised.value)
