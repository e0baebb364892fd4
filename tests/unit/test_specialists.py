"""Specialists: the oracle stays in its root and reads only, the librarian stays on the GitHub
API host and keeps its token, the painter generates nothing the application's gate refuses."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from turnkit_django import Agent, Skill, ToolError, tool
from turnkit_django.exceptions import ConfigurationError
from turnkit_django.messages import ImagePart, load_parts
from turnkit_django.models import Message
from turnkit_django.specialists import librarian, oracle, painter
from turnkit_django.testing import PNG, FunctionMediaClient, ScriptedClient, call, reply
from turnkit_django.tools import ReadFile, launch_agent
from turnkit_django.tools.github import GitHubTool

MODEL = "claude-sonnet-5-5"
TOKEN = "ghp_unitTestToken0123456789abcdefABCDEF"


def tool_results(run: Any) -> list[dict[str, Any]]:
    return [p for m in run.messages().filter(role="tool") for p in m.content]


# --------------------------------------------------------------------------- oracle


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A root with a doc, a nested doc, a symlink inside and two that point out of it."""
    root = tmp_path / "docs"
    (root / "guides").mkdir(parents=True)
    (root / "intro.md").write_text("Welcome to the docs.")
    (root / "guides" / "deploy.md").write_text("Run migrations first.")
    (tmp_path / "secret.txt").write_text("TOP SECRET")
    (root / "alias.md").symlink_to(root / "intro.md")
    (root / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (root / "outside").symlink_to(tmp_path)
    return root


@pytest.mark.parametrize("path", ["../secret.txt", "guides/../../secret.txt", "leak.txt",
                                  "outside/secret.txt", "outside", "/etc/passwd", "..",
                                  "intro.md\x00.txt"])
def test_read_file_never_leaves_its_root(tree: Path, path: str) -> None:
    reader = ReadFile(tree)
    with pytest.raises(ToolError, match=r"outside the readable root|NUL"):
        reader.call(None, reader.validate({"path": path}))  # type: ignore[arg-type]


def test_read_file_reads_inside_its_root_with_symlinks_resolved(tree: Path) -> None:
    reader = ReadFile(tree)
    read = reader.call(None, reader.validate({"path": "guides/./deploy.md"}))  # type: ignore
    assert read == {"path": "guides/deploy.md", "size": 21, "truncated": False,
                    "content": "Run migrations first."}
    alias = reader.call(None, reader.validate({"path": "alias.md"}))  # type: ignore[arg-type]
    assert (alias["path"], alias["content"]) == ("intro.md", "Welcome to the docs.")
    listing = reader.call(None, reader.validate({}))  # type: ignore[arg-type]
    assert [(e["name"], e["type"]) for e in listing["entries"]] == [
        ("alias.md", "link"), ("guides", "directory"), ("intro.md", "file"),
        ("leak.txt", "link"), ("outside", "link")]


def test_read_file_caps_what_it_returns_and_refuses_binary_files(tree: Path) -> None:
    (tree / "big.txt").write_text("x" * 100_001)
    (tree / "image.png").write_bytes(PNG)
    reader = ReadFile(tree)
    big = reader.call(None, reader.validate({"path": "big.txt"}))  # type: ignore[arg-type]
    assert (big["size"], big["truncated"], len(big["content"])) == (100_001, True, 100_000)
    with pytest.raises(ToolError, match="binary file"):
        reader.call(None, reader.validate({"path": "image.png"}))  # type: ignore[arg-type]


@pytest.mark.django_db
def test_the_oracle_reads_only_within_its_root_end_to_end(tree: Path, registered: Any) -> None:
    client = ScriptedClient([call("read_file", path="../secret.txt"),
                             call("read_file", path="intro.md"), reply("Start at the intro.")])
    advisor = registered(oracle(model=MODEL, root=tree, client=client))
    run = advisor.run("Where do I start?")
    assert run.status == "completed" and run.output_text == "Start at the intro."
    escaped, read = tool_results(run)
    assert escaped["is_error"] and "outside the readable root" in escaped["content"]["message"]
    assert read["content"]["content"] == "Welcome to the docs."
    assert "TOP SECRET" not in json.dumps(list(run.messages().values_list("content",
                                                                          flat=True)))
    [reader] = advisor.tools
    assert (reader.tool_name, reader.read_only, reader.replay_safe) == ("read_file", True, True)
    assert (advisor.model, list(advisor.skills), advisor.context_contributors) == (MODEL, [], ())


def test_the_oracle_refuses_tools_that_do_not_declare_themselves_read_only(tree: Path) -> None:
    @tool
    def delete_page(path: str) -> str:
        """Delete a page."""
        return path

    @tool(read_only=True)
    def search(query: str) -> list[str]:
        """Search the docs."""
        return []

    with pytest.raises(ConfigurationError, match="'delete_page' is not read-only"):
        oracle(model=MODEL, root=tree, tools=[delete_page])
    with pytest.raises(ConfigurationError, match="'launch_agent' is not read-only"):
        oracle(model=MODEL, tools=[launch_agent])
    writer_skill = Skill(key="editing", content="Edit pages.", tools=[delete_page])
    with pytest.raises(ConfigurationError, match="'delete_page' is not read-only"):
        oracle(model=MODEL, skills=[writer_skill])
    with pytest.raises(ConfigurationError, match="takes no sub_agents="):
        oracle(model=MODEL, sub_agents=[Agent("helper")])
    with pytest.raises(ConfigurationError, match="explicit model="):
        oracle(model="", root=tree)
    assert [t.tool_name for t in oracle(model=MODEL, root=tree, tools=[search]).tools] == [
        "read_file", "search"]


# --------------------------------------------------------------------------- librarian


class GitHubFake:
    """The GitHub API at the HTTP edge: answers by path, records every request."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.routes.get(request.url.path)
        if answer is None:
            return httpx.Response(404, json={"message": "Not Found"})
        if isinstance(answer, httpx.Response):
            return answer
        return httpx.Response(200, json=answer)


def github(routes: dict[str, Any], **options: Any) -> tuple[GitHubTool, GitHubFake]:
    fake = GitHubFake(routes)
    return GitHubTool("django/django", token=TOKEN, transport=httpx.MockTransport(fake),
                      **options), fake


def ask(tool_: GitHubTool, **arguments: Any) -> Any:
    return tool_.call(None, tool_.validate(arguments))  # type: ignore[arg-type]


@pytest.mark.parametrize("repository", ["django", "django/django/extra", "../django",
                                        "-dj/django", "dj-/django", "dj--x/y" * 10, "django/..",
                                        "django/na me", "django/x?y", "https://github.com/a/b"])
def test_the_librarian_validates_its_repository_strictly(repository: str) -> None:
    with pytest.raises(ConfigurationError, match="is not 'owner/name'"):
        librarian(model=MODEL, repository=repository)


def test_the_librarian_reads_a_file_with_its_token_in_a_header_only() -> None:
    content = base64.b64encode(b"# Django\nThe web framework.\n").decode()
    tool_, fake = github({"/repos/django/django/contents/docs/README.rst": {
        "type": "file", "path": "docs/README.rst", "size": 28, "sha": "a1b2", "content": content,
        "encoding": "base64"}})
    result = ask(tool_, operation="file", path="docs/README.rst", ref="main")
    assert result == {"repository": "django/django", "operation": "file",
                      "source_url": "https://github.com/django/django/blob/main/docs/README.rst",
                      "data": {"path": "docs/README.rst", "size": 28, "sha": "a1b2",
                               "truncated": False, "content": "# Django\nThe web framework.\n"}}
    [sent] = fake.requests
    assert str(sent.url) == ("https://api.github.com/repos/django/django/contents/docs/README.rst"
                             "?ref=main")
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert sent.headers["accept"] == "application/vnd.github+json"
    assert TOKEN not in str(sent.url)


def test_the_librarian_operations_carry_repository_operation_and_source() -> None:
    issue = {"number": 7, "title": "Crash", "state": "open", "user": {"login": "ada"},
             "labels": [{"name": "bug"}], "comments": 1, "body": "It breaks.",
             "created_at": "2026-11-01T00:00:00Z", "closed_at": None}
    tool_, fake = github({
        "/repos/django/django": {"full_name": "django/django", "default_branch": "main",
                                 "license": {"spdx_id": "BSD-3-Clause"}},
        "/repos/django/django/issues": [issue, {**issue, "number": 8, "pull_request": {}}],
        "/repos/django/django/issues/7": issue,
        "/repos/django/django/issues/7/comments": [{"user": {"login": "bob"}, "body": "Same.",
                                                    "created_at": "2026-11-02T00:00:00Z"}],
        "/repos/django/django/commits": [{"sha": "abc1234", "commit": {
            "author": {"name": "Ada"}, "message": "Fix the crash"}}],
        "/repos/django/django/commits/abc1234": {"sha": "abc1234", "commit": {
            "message": "Fix"}, "files": [{"filename": "a.py", "status": "modified",
                                          "additions": 1, "deletions": 1, "patch": "@@ -1 +1 @@"}]},
        "/repos/django/django/compare/4.2...main": {"status": "ahead", "ahead_by": 3,
                                                    "behind_by": 0, "commits": [], "files": []},
    })
    sources = {op: ask(tool_, **args)["source_url"] for op, args in {
        "repository": {"operation": "repository"},
        "issues": {"operation": "issues", "state": "all"},
        "issue": {"operation": "issue", "number": 7},
        "comments": {"operation": "comments", "number": 7},
        "history": {"operation": "history", "path": "django/db", "ref": "main"},
        "diff": {"operation": "diff", "sha": "abc1234"},
        "compare": {"operation": "diff", "base": "4.2", "head": "main"},
    }.items()}
    web = "https://github.com/django/django"
    assert sources == {"repository": web, "issues": f"{web}/issues", "issue": f"{web}/issues/7",
                       "comments": f"{web}/issues/7", "history": f"{web}/commits/main",
                       "diff": f"{web}/commit/abc1234", "compare": f"{web}/compare/4.2...main"}
    issues = ask(tool_, operation="issues")["data"]
    assert [(i["number"], i["pull_request"], i["labels"]) for i in issues] == [
        (7, False, ["bug"]), (8, True, ["bug"])]
    assert {r.url.host for r in fake.requests} == {"api.github.com"}
    assert fake.requests[1].url.params["state"] == "all"


def test_the_librarian_refuses_redirects_and_foreign_hosts() -> None:
    moved = httpx.Response(301, headers={"Location": "https://evil.example/steal"})
    tool_, fake = github({"/repos/django/django": moved})
    with pytest.raises(ToolError, match=r"redirect.*not followed") as info:
        ask(tool_, operation="repository")
    assert "evil.example" not in str(info.value)
    assert [r.url.host for r in fake.requests] == ["api.github.com"], "nothing else was asked"
    with pytest.raises(ToolError, match=r"only api\.github\.com is asked"):
        tool_._http().get("https://evil.example/x")
    with pytest.raises(ToolError, match=r"only api\.github\.com is asked"):
        tool_._http().get("http://api.github.com/repos/django/django")
    assert len(fake.requests) == 1
    with pytest.raises(ConfigurationError, match="plain https:// URL"):
        GitHubTool("django/django", api_url="http://api.github.com")


@pytest.mark.parametrize("arguments", [
    {"operation": "file", "path": "../../orgs/django"},
    {"operation": "file", "path": "docs/../../../x"},
    {"operation": "history", "ref": "main/../../x"},
    {"operation": "history", "ref": "-o"},
    {"operation": "diff", "sha": "not-a-sha"},
    {"operation": "diff"},
    {"operation": "issue"},
])
def test_the_librarian_refuses_arguments_that_would_leave_the_repository(
        arguments: dict[str, Any]) -> None:
    tool_, fake = github({})
    with pytest.raises(ToolError):
        ask(tool_, **arguments)
    assert fake.requests == []


def test_the_librarian_never_returns_its_token() -> None:
    echoed = {"number": 9, "title": f"leaked {TOKEN}", "body": f"token={TOKEN}",
              "user": {"login": "x"}, "labels": []}
    tool_, _ = github({"/repos/django/django/issues/9": echoed,
                       "/repos/django/django/issues/10": httpx.Response(
                           422, json={"message": f"Validation failed for {TOKEN}"})})
    result = ask(tool_, operation="issue", number=9)
    assert TOKEN not in json.dumps(result) and "[redacted]" in result["data"]["body"]
    with pytest.raises(ToolError, match="HTTP 422") as info:
        ask(tool_, operation="issue", number=10)
    assert TOKEN not in str(info.value) and TOKEN not in repr(tool_)
    assert TOKEN not in repr(vars(librarian(model=MODEL, repository="django/django",
                                            token=TOKEN)))


@pytest.mark.django_db
def test_the_librarian_agent_has_its_github_tool_only(registered: Any) -> None:
    tool_, fake = github({"/repos/django/django": {"full_name": "django/django"}})
    client = ScriptedClient([call("github", operation="repository"), reply("It is Django.")])
    research = registered(librarian(model=MODEL, repository="django/django", token=TOKEN,
                                    transport=httpx.MockTransport(fake), client=client))
    run = research.run("What is this repository?")
    assert run.status == "completed"
    [result] = tool_results(run)
    assert result["content"]["source_url"] == "https://github.com/django/django"
    assert [t.tool_name for t in research.tools] == ["github"]
    assert research.tools[0].read_only and "django/django" in research.instructions
    with pytest.raises(ConfigurationError, match="takes no tools="):
        librarian(model=MODEL, repository="django/django", tools=[tool_])


# --------------------------------------------------------------------------- painter


def painting(registered: Any, gate: Any, images: FunctionMediaClient, *script: Any,
             **options: Any) -> Agent:
    client = ScriptedClient(list(script) or [call("paint_image", prompt="A teapot"),
                                             reply("Could not paint.")])
    return registered(painter(model=MODEL, image_model="gpt-image-1", gate=gate,
                              image_client=images, client=client, **options))


@pytest.mark.django_db
@pytest.mark.parametrize("answer", ["yes", 1, None, False, {"ok": True}, RuntimeError("down")])
def test_the_painter_generates_nothing_unless_the_gate_returns_true(
        registered: Any, media_root: Path, answer: Any) -> None:
    asked: list[dict[str, Any]] = []

    def gate(**request: Any) -> Any:
        asked.append(request)
        if isinstance(answer, Exception):
            raise answer
        return answer

    images = FunctionMediaClient()
    run = painting(registered, gate, images).run("Draw a teapot", principal={"user": 7})

    assert images.requests == [], "no paid generation"
    assert not Message.objects.filter(kind="image").exists()
    [result] = tool_results(run)
    assert result["is_error"]
    assert run.status == "completed" and run.output_text == "Could not paint."
    [request] = asked
    assert request["prompt"] == "A teapot" and request["principal"] == {"user": 7}
    assert request["conversation_id"] == run.row.conversation_id
    assert request["model"] == "gpt-image-1" and request["reference_images"] == []


@pytest.mark.django_db
def test_an_allowed_painting_ends_the_turn_with_ids_and_no_bytes(registered: Any,
                                                                media_root: Path) -> None:
    images = FunctionMediaClient()
    run = painting(registered, lambda **kw: True, images).run("Draw a teapot")

    assert run.status == "completed"
    [result] = tool_results(run)
    message = Message.objects.get(kind="image")
    [part] = load_parts(message.content)
    assert result["content"] == {
        "conversation_id": run.row.conversation_id, "image_message_id": message.pk,
        "images": [{"id": part.id, "mime_type": "image/png", "revised_prompt": None}],
        "model": "gpt-image-1", "size": None}
    assert run.output_text == f"Generated image {part.id} (message {message.pk})."
    assert "storage" not in json.dumps(result) and base64.b64encode(PNG).decode() not in (
        json.dumps(list(run.messages().values_list("content", flat=True))))


@pytest.mark.django_db
def test_the_painter_edits_an_earlier_image_by_id_within_its_cap(registered: Any,
                                                                media_root: Path) -> None:
    images = FunctionMediaClient()
    agent = painting(registered, lambda **kw: True, images,
                     call("paint_image", prompt="A teapot"), max_reference_images=1)
    conversation = agent.conversation()
    first = conversation.ask("Draw a teapot")
    [part] = load_parts(Message.objects.get(turn_id=first.id, kind="image").content)
    assert isinstance(part, ImagePart)
    agent.client.add(call("paint_image", prompt="Make it blue", reference_images=[part.id]),
                     call("paint_image", prompt="Both", reference_images=[part.id, part.id]),
                     reply("too many"),
                     call("paint_image", prompt="Other", reference_images=["img_unknown"]),
                     reply("unknown"))
    conversation.ask("Make it blue")
    assert images.requests[-1].input_images[0].data == PNG
    assert images.requests[-1].prompt == "Make it blue"
    paid = len(images.requests)
    refused = conversation.ask("Use it twice")
    assert "at most 1 reference images" in tool_results(refused)[-1]["content"]["message"]
    unknown = conversation.ask("Another conversation's image")
    assert "no image 'img_unknown' in this conversation" in (
        tool_results(unknown)[-1]["content"]["message"])
    assert len(images.requests) == paid


def test_the_painter_needs_a_gate_an_image_model_and_no_foreign_tools() -> None:
    with pytest.raises(ConfigurationError, match="needs gate="):
        painter(model=MODEL, image_model="gpt-image-1", gate=None)
    with pytest.raises(ConfigurationError, match="explicit image_model="):
        painter(model=MODEL, image_model="", gate=lambda **kw: True)
    with pytest.raises(ConfigurationError, match="takes no tools="):
        painter(model=MODEL, image_model="gpt-image-1", gate=lambda **kw: True,
                tools=[launch_agent])
    artist = painter(model=MODEL, image_model="gpt-image-1", gate=lambda **kw: True)
    [paint] = artist.tools
    assert (paint.tool_name, bool(paint.terminal), paint.replay_safe) == (
        "paint_image", True, False)
