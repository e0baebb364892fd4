"""Skills: markdown instructions an agent always has (``skills=``) or loads on demand.

An *available* skill is listed in the prompt and read with the built-in ``load_skill`` tool. Its
tools are callable only after a successful load in the same turn. Which skills a turn has loaded
is derived from its persisted tool executions (completed ``load_skill`` calls), never from memory,
so a replacement worker that resumes the turn sees exactly the same tools.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ..exceptions import ConfigurationError, ToolError
from ..models import ToolExecution
from ..tools.tool import Tool, ToolContext

LOAD_SKILL = "load_skill"
SKILL_SUFFIXES = (".md", ".markdown")
#: The longest skill key (what ``_KEY`` allows).
KEY_LENGTH = 64
_KEY = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9_.-]{{0,{KEY_LENGTH - 1}}}$")
#: A skill file's front matter: ``key: value`` scalars and lists of strings.
FrontMatter = dict[str, str | list[str]]
_FRONT_MATTER_KEYS = frozenset({"key", "name", "description", "tools"})
#: The largest skill file read: a skill goes into the prompt whole.
MAX_SKILL_BYTES = 1_000_000


@dataclass(frozen=True)
class Skill:
    """A named piece of know-how: markdown content, and the tools it brings."""

    key: str
    content: str
    name: str = ""
    description: str = ""
    tools: tuple[Tool, ...] = field(default=())
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not _KEY.match(self.key):
            raise ConfigurationError(
                f"skill key {self.key!r} must match {_KEY.pattern}: rename the file or set "
                "'key' in its front matter"
            )
        for option in ("content", "name", "description", "source"):
            value = getattr(self, option)
            if not isinstance(value, str):
                raise ConfigurationError(f"skill {self.key!r}: {option} must be a str, got "
                                         f"{type(value).__name__}")
        object.__setattr__(self, "tools", _tool_list(self.tools, f"skill {self.key!r}"))

    @property
    def title(self) -> str:
        return self.name or self.key

    @classmethod
    def from_file(cls, path: str | Path, *, key: str | None = None,
                  tools: Sequence[Tool] = ()) -> Skill:
        """Load a skill from a markdown file with optional front matter.

        Front matter may set ``key``, ``name``, ``description`` and ``tools`` (names). Each named
        tool must be among ``tools``; without a ``tools`` entry the skill brings all of ``tools``.
        """
        return _load(_path(path, "skill file"), key, _tool_list(tools, "Skill.from_file"),
                     take_all=True)

    @classmethod
    def from_directory(cls, path: str | Path, *, tools: Sequence[Tool] = ()) -> list[Skill]:
        """Load every skill of a directory: ``*.md`` files and ``<key>/SKILL.md`` folders.

        ``tools`` is a pool: each skill takes the tools its front matter names.
        """
        folder = _path(path, "skill directory")
        pool = _tool_list(tools, "Skill.from_directory")
        if not folder.is_dir():
            state = "is not a directory" if folder.exists() else "does not exist"
            raise ConfigurationError(f"skill directory {str(folder)!r} {state}")
        files = [p for p in sorted(folder.iterdir())
                 if p.is_file() and p.suffix.lower() in SKILL_SUFFIXES]
        files += [p / "SKILL.md" for p in sorted(folder.iterdir()) if (p / "SKILL.md").is_file()]
        root = folder.resolve()
        for file in files:  # a link may point within the directory, never out of it
            if root not in file.resolve().parents:
                raise ConfigurationError(
                    f"skill file {str(file)!r} leads outside the skill directory "
                    f"{str(folder)!r} (a symlink); copy the skill into the directory")
        # A pool tool is given only to the skills that name it, never to every skill.
        return [_load(f, None, pool, take_all=False) for f in files]


def _path(value: object, what: str) -> Path:
    if not isinstance(value, str | os.PathLike) or isinstance(os.fspath(value), bytes) \
            or "\x00" in os.fspath(value):
        raise ConfigurationError(f"a {what} must be a path (str or Path), got {value!r}")
    return Path(value)


def _tool_list(value: object, where: str) -> tuple[Tool, ...]:
    items = tuple(value) if isinstance(value, list | tuple) else None
    if items is None or not all(isinstance(item, Tool) for item in items):
        raise ConfigurationError(f"{where}: tools must be a list of tools (decorate functions "
                                 f"with @tool), got {value!r}")
    return items


def read_prompt_file(file: Path, noun: str, prefix: str = "") -> str:
    """The UTF-8 text of a file that goes into a prompt whole (a skill, a policy file), at most
    :data:`MAX_SKILL_BYTES`; ConfigurationError naming the file (``prefix`` + ``noun``)."""
    named = f"{prefix}{noun} {str(file)!r}"
    try:
        with file.open("rb") as handle:
            raw = handle.read(MAX_SKILL_BYTES + 1)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise ConfigurationError(f"{prefix}cannot read {noun} {str(file)!r}: {exc}") from exc
    if len(raw) > MAX_SKILL_BYTES:
        raise ConfigurationError(f"{named} is larger than {MAX_SKILL_BYTES:,} bytes; it goes "
                                 "into the prompt whole: split it")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"{named} is not UTF-8 text; save it as UTF-8 (byte "
                                 f"{exc.start} cannot be decoded)") from None


def _load(file: Path, key: str | None, tools: tuple[Tool, ...], *, take_all: bool) -> Skill:
    text = read_prompt_file(file, "skill file")
    meta, body = parse_front_matter(text, str(file))
    unknown = set(meta) - _FRONT_MATTER_KEYS
    if unknown:
        raise ConfigurationError(
            f"skill file {str(file)!r}: unknown front matter keys {sorted(unknown)}; use "
            f"{sorted(_FRONT_MATTER_KEYS)}"
        )
    for scalar in ("key", "name", "description"):
        if isinstance(meta.get(scalar), list):
            raise ConfigurationError(f"skill file {str(file)!r}: front matter {scalar!r} must be "
                                     "one value, not a list")
    names = meta.get("tools")
    if names is not None:
        chosen = _pick_tools(names, tools, str(file))
    else:
        chosen = tools if take_all else ()
    return Skill(
        key=key or _text(meta.get("key")) or (
            file.parent.name if file.stem.upper() == "SKILL" else file.stem),
        content=body.strip(),
        name=_text(meta.get("name")),
        description=_text(meta.get("description")),
        tools=chosen,
        source=str(file),
    )


def _text(value: object) -> str:
    return "" if value is None else str(value).strip()


def _pick_tools(names: object, pool: Sequence[Tool], source: str) -> tuple[Tool, ...]:
    wanted = [names] if isinstance(names, str) else list(names) if isinstance(names, list) else []
    by_name = {t.tool_name: t for t in pool if isinstance(t, Tool)}
    missing = [n for n in wanted if n not in by_name]
    if missing:
        raise ConfigurationError(
            f"skill file {source!r} names tools {missing} in its front matter; pass them: "
            f"Skill.from_file(path, tools=[...]) or Skill.from_directory(path, tools=[...])"
        )
    return tuple(by_name[n] for n in wanted)


def parse_front_matter(text: str, source: str = "<text>") -> tuple[FrontMatter, str]:
    """Split ``---`` front matter from a markdown body.

    The front matter is a small YAML subset: ``key: value`` lines, quoted strings, inline lists
    ``[a, b]``, block lists of ``- item`` lines, and ``#`` comments.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    except StopIteration:
        raise ConfigurationError(f"{source}: front matter opened with '---' is never closed") \
            from None
    meta: FrontMatter = {}
    current: str | None = None
    for number, raw in enumerate(lines[1:end], start=2):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.lstrip().startswith("- ") and current is not None:
            items = meta.setdefault(current, [])
            if not isinstance(items, list):
                raise ConfigurationError(f"{source}:{number}: list item under a scalar key")
            items.append(_scalar(line.lstrip()[2:]))
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip() or key != key.lstrip():
            raise ConfigurationError(
                f"{source}:{number}: expected 'key: value' in the front matter, got {line!r}"
            )
        current = key.strip()
        if current in meta:
            raise ConfigurationError(f"{source}:{number}: front matter key {current!r} is given "
                                     "twice; keep one")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            meta[current] = [_scalar(v) for v in value[1:-1].split(",") if v.strip()]
        elif value:
            meta[current] = _scalar(value)
    return meta, "\n".join(lines[end + 1:])


def _scalar(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def as_skills(value: object, *, agent: str, option: str) -> tuple[Skill, ...]:
    """Normalise an agent's ``skills=`` / ``available_skills=`` option."""
    if value is None:
        return ()
    items = [value] if isinstance(value, Skill) else value
    if isinstance(items, str | Path) or not isinstance(items, Iterable):
        raise ConfigurationError(
            f"agent {agent!r}: {option} must be a list of Skill objects; load files with "
            "Skill.from_file(path) or Skill.from_directory(path)"
        )
    skills = tuple(items)
    for item in skills:
        if not isinstance(item, Skill):
            raise ConfigurationError(
                f"agent {agent!r}: {option} holds {item!r}, not a Skill; load files with "
                "Skill.from_file(path) or Skill.from_directory(path)"
            )
    return skills


def check_keys(agent: str, loaded: Sequence[Skill], available: Sequence[Skill]) -> None:
    """Refuse duplicate skill keys across ``skills`` and ``available_skills``."""
    seen: set[str] = set()
    for skill in (*loaded, *available):
        if skill.key in seen:
            raise ConfigurationError(
                f"agent {agent!r}: two skills have the key {skill.key!r}; give one another "
                "key (Skill.from_file(path, key=...)) or list it only once"
            )
        seen.add(skill.key)


class LoadSkillArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Bounded: a longer key names no skill, and is refused before it is echoed back.
    key: str = Field(max_length=KEY_LENGTH,
                     description="The key of the skill to load, from the list of skills.")


class LoadSkillTool(Tool):
    """Return a skill's instructions; its tools become callable for the rest of the turn."""

    name = LOAD_SKILL
    Args = LoadSkillArgs
    recovery = "replay_safe"  # reading a skill has no side effect
    builtin: ClassVar[str | None] = LOAD_SKILL

    def __init__(self, skills: Sequence[Skill]) -> None:
        self.skills = {s.key: s for s in skills}
        self.description = (
            "Load a skill by key and read its instructions before following it. Loading a "
            "skill also enables the tools it lists, for the rest of this turn."
        )

    def call(self, ctx: ToolContext, args: LoadSkillArgs) -> str:
        skill = self.skills.get(args.key)
        if skill is None:
            known = ", ".join(sorted(self.skills)) or "none"
            raise ToolError(f"There is no skill {args.key!r}. Skills you can load: {known}.")
        names = [t.tool_name for t in skill.tools]
        enabled = f"\n\nTools enabled: {', '.join(names)}." if names else ""
        return f"# Skill: {skill.title}\n\n{skill.content}{enabled}"


def loaded_keys(turn_id: str) -> set[str]:
    """Keys of skills the turn loaded successfully, from its persisted tool executions."""
    rows = ToolExecution.objects.filter(turn_id=turn_id, tool_name=LOAD_SKILL).completed(
    ).values_list("arguments", flat=True)
    return {str(args.get("key")) for args in rows if isinstance(args, dict)}


__all__ = ["LOAD_SKILL", "MAX_SKILL_BYTES", "LoadSkillTool", "Skill", "as_skills", "check_keys",
           "loaded_keys", "parse_front_matter", "read_prompt_file"]
