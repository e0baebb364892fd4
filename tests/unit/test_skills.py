"""Skills: loading from files, always-loaded skills, and load_skill activation across crashes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import crash_and_resume
from turnkit_django import Agent, ConfigurationError, Skill, tool
from turnkit_django.models import ToolExecution
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = pytest.mark.django_db

EXAMPLE_SKILLS = Path(__file__).resolve().parents[2] / "example_project" / "skills"


@tool
def web_search(query: str) -> list[str]:
    """Search the web."""
    return [f"result for {query}"]


@tool
def cite(source: str) -> str:
    """Format a citation."""
    return f"[{source}]"


RESEARCH = """---
name: Research
description: How to research a question
tools: [web_search]
---
Search first, then answer with sources.
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def research(tmp_path: Path) -> Skill:
    return Skill.from_file(write(tmp_path, "research.md", RESEARCH), tools=[web_search])


def tool_results(run: Any) -> list[tuple[str, str, Any]]:
    return [(e.tool_name, e.status, e.result if e.status == "completed" else e.error)
            for e in run.tool_executions()]


def test_from_file_reads_front_matter_and_defaults_the_key(research: Skill) -> None:
    assert research.key == "research"
    assert research.name == "Research"
    assert research.description == "How to research a question"
    assert research.content == "Search first, then answer with sources."
    assert research.tools == (web_search,)


def test_from_file_without_front_matter(tmp_path: Path) -> None:
    skill = Skill.from_file(write(tmp_path, "style-guide.md", "# Style\nBe brief."))
    assert (skill.key, skill.name, skill.content, skill.tools) == (
        "style-guide", "", "# Style\nBe brief.", ())


def test_from_directory_loads_files_and_skill_folders_with_a_tool_pool(tmp_path: Path) -> None:
    write(tmp_path, "research.md", RESEARCH)
    write(tmp_path, "citing/SKILL.md", "---\nname: Citing\ntools:\n  - cite\n---\nCite.")
    write(tmp_path, "plain.markdown", "# Plain\n")
    write(tmp_path, "notes.txt", "ignored")
    skills = Skill.from_directory(tmp_path, tools=[web_search, cite])
    assert [(s.key, [t.tool_name for t in s.tools]) for s in skills] == [
        ("plain", []), ("research", ["web_search"]), ("citing", ["cite"])]


@pytest.mark.parametrize(("text", "message"), [
    ("---\nname: X\n", "never closed"),
    ("---\nauthor: me\n---\nBody", "unknown front matter keys"),
    ("---\nname X\n---\nBody", "expected 'key: value'"),
    ("---\ntools: [missing_tool]\n---\nBody", "names tools"),
    ("---\nkey: no spaces allowed\n---\nBody", "must match"),
])
def test_bad_skill_files_are_refused_with_what_to_do(tmp_path: Path, text: str,
                                                     message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Skill.from_file(write(tmp_path, "bad.md", text))


def test_example_project_skill_loads() -> None:
    skills = Skill.from_directory(EXAMPLE_SKILLS)
    assert skills and all(s.content and s.description for s in skills)


def test_loaded_skills_are_in_the_prompt_with_their_tools_active(research: Skill) -> None:
    client = ScriptedClient([call("web_search", query="tides"), reply("High tide at 6.")])
    run = Agent("writer", skills=[research], client=client).run("When is high tide?")
    assert run.status == "completed", run.error
    first = client.requests[0]
    assert '<skill key="research" name="Research">\nSearch first' in first.stable_instructions
    assert first.tool_names == ["web_search"]
    assert tool_results(run) == [("web_search", "completed", ["result for tides"])]


def test_available_skill_tool_is_refused_before_load_and_works_after(research: Skill) -> None:
    client = ScriptedClient([
        call("web_search", query="early"),
        call("load_skill", key="research"),
        call("web_search", query="late"),
        reply("done"),
    ])
    run = Agent("writer", available_skills=[research], client=client).run("Research tides")
    assert run.status == "completed", run.error
    first, _, after_load, _ = client.requests
    assert first.tool_names == ["load_skill"]
    assert "- research (Research): How to research a question (enables: web_search)" in (
        first.stable_instructions)
    assert "Search first" not in first.stable_instructions
    assert after_load.tool_names == ["load_skill", "web_search"]
    assert after_load.stable_instructions == first.stable_instructions  # stays cacheable
    results = tool_results(run)
    assert results[0][:2] == ("web_search", "failed")
    assert results[0][2]["error"] == "skill_not_loaded"
    assert "call load_skill with key 'research' first" in results[0][2]["message"]
    assert results[1][:2] == ("load_skill", "completed")
    assert "Search first, then answer with sources." in results[1][2]
    assert results[2] == ("web_search", "completed", ["result for late"])


def test_unknown_skill_key_fails_and_enables_nothing(research: Skill) -> None:
    client = ScriptedClient([call("load_skill", key="nope"), reply("gave up")])
    run = Agent("writer", available_skills=[research], client=client).run("Go")
    assert tool_results(run)[0][1] == "failed"
    assert "Skills you can load: research" in tool_results(run)[0][2]["message"]
    assert client.requests[1].tool_names == ["load_skill"]


def test_an_oversized_skill_key_is_refused_without_echoing_it(research: Skill) -> None:
    # No skill key is longer than 64 characters: "There is no skill 'xxxx...'" gave the
    # model back its whole 100,000-character argument.
    client = ScriptedClient([call("load_skill", key="k" * 100_000), reply("gave up")])
    run = Agent("writer", available_skills=[research], client=client).run("Go")
    ((name, status, error),) = tool_results(run)
    assert (name, status, error["error"]) == ("load_skill", "failed", "invalid_arguments")
    assert len(str(error)) < 1000


def test_a_new_turn_starts_with_no_skill_loaded(research: Skill) -> None:
    client = ScriptedClient([call("load_skill", key="research"), reply("loaded"), reply("hi")])
    conv = Agent("writer", available_skills=[research], client=client).conversation()
    conv.ask("Load research")
    conv.ask("Again")
    assert client.requests[1].tool_names == ["load_skill", "web_search"]
    assert client.requests[2].tool_names == ["load_skill"]


def test_resumed_execution_still_has_the_loaded_skills_tools(
    research: Skill, registered: Any, background: None
) -> None:
    client = ScriptedClient([
        call("load_skill", key="research"),
        call("web_search", query="tides"),
        reply("done"),
    ])
    agent = registered(Agent("researcher", available_skills=[research], client=client))
    run = agent.prepare("Research tides").submit()
    crash_and_resume(run.id, "after_tool_commit")  # dies right after load_skill commits
    run.refresh()
    assert run.status == "completed", run.error
    assert client.requests[1].tool_names == ["load_skill", "web_search"]
    assert ToolExecution.objects.filter(turn_id=run.id, tool_name="load_skill").count() == 1
    assert tool_results(run)[1] == ("web_search", "completed", ["result for tides"])


def test_skill_configuration_errors_say_what_to_do(research: Skill, tmp_path: Path) -> None:
    other = Skill(key="research", content="Other.")
    with pytest.raises(ConfigurationError, match="two skills have the key 'research'"):
        Agent("a", skills=[research], available_skills=[other])
    with pytest.raises(ConfigurationError, match="not a Skill; load files with"):
        Agent("a", available_skills=["research.md"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="must be a list of Skill objects"):
        Agent("a", skills="research.md")  # type: ignore[arg-type]

    @tool(name="web_search")
    def another_search(query: str) -> str:
        """Another search."""
        return query

    with pytest.raises(ConfigurationError, match="two tools are named 'web_search'"):
        Agent("a", tools=[another_search], available_skills=[research])

    @tool(name="load_skill")
    def clash() -> str:
        """Clash."""
        return ""

    with pytest.raises(ConfigurationError, match="two tools are named 'load_skill'"):
        Agent("a", tools=[clash], available_skills=[research])


def test_one_tool_shared_by_two_skills_is_allowed(research: Skill) -> None:
    deep = Skill(key="deep-research", content="Go deep.", tools=(web_search,))
    agent = Agent("a", available_skills=[research, deep])
    assert list(agent.tool_table()) == ["load_skill", "web_search"]
