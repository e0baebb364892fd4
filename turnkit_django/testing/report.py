"""What the invariant checker found: violations, and the report of one pass."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Violation:
    """One broken invariant: its code (``"I3"``), the offending row's id, and what is wrong."""

    code: str
    object_id: str
    message: str

    def __str__(self) -> str:
        return f"{self.code} {self.object_id}: {self.message}"


@dataclass
class Report:
    """What one verification pass checked and found."""

    violations: list[Violation] = field(default_factory=list)
    conversations: int = 0
    turns: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, code: str, object_id: str, message: str) -> None:
        self.violations.append(Violation(code, object_id, message))


__all__ = ["Report", "Violation"]
