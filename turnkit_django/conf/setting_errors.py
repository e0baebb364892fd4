"""A bad ``TURNKIT`` value, as the settings object raises it and the system checks report it
(:mod:`turnkit_django.conf`, which re-exports both names)."""

from __future__ import annotations

from dataclasses import dataclass

from ..exceptions import ConfigurationError


@dataclass(frozen=True)
class SettingProblem:
    """One bad ``TURNKIT`` value: its system check id, a message naming key and value, a hint."""

    id: str
    key: str
    message: str
    hint: str


class InvalidSetting(ConfigurationError):
    """A ``TURNKIT`` value that cannot be used; ``problem`` says which and how to fix it."""

    def __init__(self, problem: SettingProblem) -> None:
        self.problem = problem
        super().__init__(f"{problem.message} {problem.hint}")


__all__ = ["InvalidSetting", "SettingProblem"]
