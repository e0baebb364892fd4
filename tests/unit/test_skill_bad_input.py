"""Bad input to the skill loaders: every mistake is a ``ConfigurationError`` naming the file and
what to do, never a bare ``UnicodeDecodeError`` / ``TypeError``; a directory's skills stay
inside it (a symlink pointing out is refused), and a file too large for a prompt is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from turnkit_django import ConfigurationError, Skill, tool
from turnkit_django.agents.skills import MAX_SKILL_BYTES


@tool
def web_search(query: str) -> list[str]:
    """Search the web."""
    return [query]


def test_a_file_that_is_not_utf8_names_the_file_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "latin.md").write_bytes("Caf\xe9 au lait".encode("latin-1"))
    for load in (lambda: Skill.from_file(tmp_path / "latin.md"),
                 lambda: Skill.from_directory(tmp_path)):
        with pytest.raises(ConfigurationError, match=r"latin\.md.*not UTF-8 text; save it"):
            load()


@pytest.mark.parametrize("path", [None, 5, "skills\x00.md", b"skills.md"])
def test_a_path_that_is_no_path_is_refused(path: Any) -> None:
    with pytest.raises(ConfigurationError, match="must be a path"):
        Skill.from_file(path)
    with pytest.raises(ConfigurationError, match="must be a path"):
        Skill.from_directory(path)


def test_a_directory_given_as_a_file_and_a_file_as_a_directory(tmp_path: Path) -> None:
    (tmp_path / "one.md").write_text("One.")
    with pytest.raises(ConfigurationError, match="is not a directory"):
        Skill.from_directory(tmp_path / "one.md")
    with pytest.raises(ConfigurationError, match="cannot read skill file"):
        Skill.from_file(tmp_path)


@pytest.mark.parametrize("tools", [web_search, None, "web_search", [web_search, "cite"]])
def test_tools_must_be_a_list_of_tools(tmp_path: Path, tools: Any) -> None:
    (tmp_path / "one.md").write_text("One.")
    with pytest.raises(ConfigurationError, match="tools must be a list of tools"):
        Skill.from_file(tmp_path / "one.md", tools=tools)
    with pytest.raises(ConfigurationError, match="tools must be a list of tools"):
        Skill.from_directory(tmp_path, tools=tools)
    with pytest.raises(ConfigurationError, match="tools must be a list of tools"):
        Skill(key="one", content="One.", tools=tools)


@pytest.mark.parametrize("field", ["content", "name", "description", "source"])
def test_skill_text_fields_must_be_strings(field: str) -> None:
    options: dict[str, Any] = {"key": "tone", "content": "Be warm.", field: 5}
    with pytest.raises(ConfigurationError, match=f"skill 'tone': {field} must be a str"):
        Skill(**options)


@pytest.mark.parametrize("front", ["key: [a, b]", "name: [A, B]", "description:\n  - one",
                                   "name: A\nname: B"])
def test_front_matter_values_of_the_wrong_shape_are_refused(tmp_path: Path, front: str) -> None:
    (tmp_path / "odd.md").write_text(f"---\n{front}\n---\nBody.")
    with pytest.raises(ConfigurationError, match=r"odd\.md.*(must be one value|given twice)"):
        Skill.from_file(tmp_path / "odd.md")


def test_a_directory_skill_linked_from_outside_the_directory_is_refused(tmp_path: Path) -> None:
    skills, elsewhere = tmp_path / "skills", tmp_path / "elsewhere"
    skills.mkdir()
    (elsewhere / "deep").mkdir(parents=True)
    (elsewhere / "secret.md").write_text("Not a skill.")
    (elsewhere / "deep" / "SKILL.md").write_text("Not one either.")
    (skills / "inside.md").write_text("Inside.")
    (skills / "alias.md").symlink_to(skills / "inside.md")
    assert [s.key for s in Skill.from_directory(skills)] == ["alias", "inside"]
    (skills / "leak.md").symlink_to(elsewhere / "secret.md")
    with pytest.raises(ConfigurationError, match=r"leak\.md.*outside the skill directory"):
        Skill.from_directory(skills)
    (skills / "leak.md").unlink()
    (skills / "deep").symlink_to(elsewhere / "deep")
    with pytest.raises(ConfigurationError, match=r"SKILL\.md.*outside the skill directory"):
        Skill.from_directory(skills)


def test_a_skill_file_too_large_for_a_prompt_is_refused(tmp_path: Path) -> None:
    (tmp_path / "huge.md").write_text("x" * (MAX_SKILL_BYTES + 1))
    with pytest.raises(ConfigurationError, match=r"huge\.md.*larger than 1,000,000 bytes"):
        Skill.from_file(tmp_path / "huge.md")
    (tmp_path / "huge.md").write_text("x" * MAX_SKILL_BYTES)
    assert len(Skill.from_file(tmp_path / "huge.md").content) == MAX_SKILL_BYTES
