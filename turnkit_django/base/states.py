"""Statuses of turns and tool executions, and the named transitions between turn statuses."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models


class TurnStatus(models.TextChoices):
    PENDING = "pending"
    WAITING = "waiting"
    PAUSED = "paused"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STALE = "stale"


TERMINAL_TURN_STATUSES = frozenset(
    {TurnStatus.COMPLETED, TurnStatus.FAILED, TurnStatus.CANCELLED, TurnStatus.STALE}
)
ACTIVE_TURN_STATUSES = frozenset(
    {TurnStatus.PENDING, TurnStatus.WAITING, TurnStatus.PAUSED, TurnStatus.RUNNING}
)


class ToolStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


FINISHED_TOOL_STATUSES = frozenset(
    {ToolStatus.COMPLETED, ToolStatus.FAILED, ToolStatus.CANCELLED, ToolStatus.INTERRUPTED}
)


class Phase(models.TextChoices):
    """Where the persisted loop of a turn stands (``Turn.state["phase"]``)."""

    MODEL = "model"
    TOOLS = "tools"
    OUTPUT = "output"
    #: A pending turn claimed by ``Turn.paint`` / ``Turn.view_media`` (see runtime.media).
    MEDIA = "media"
    DONE = "done"


#: A conversation's lane is busy while one of its turns is in one of these statuses: a submitted
#: turn behind it waits (the serial lane), a delivery to it is buffered for the next turn.
BUSY_TURN_STATUSES = frozenset({TurnStatus.RUNNING, TurnStatus.WAITING, TurnStatus.PAUSED})


@dataclass(frozen=True)
class Transition:
    """A named status change: the statuses it may start from and the one it leads to."""

    name: str
    sources: frozenset[TurnStatus]
    target: TurnStatus


def _t(name: str, sources: set[TurnStatus], target: TurnStatus) -> Transition:
    return Transition(name, frozenset(sources), target)


_P, _W, _R = TurnStatus.PENDING, TurnStatus.WAITING, TurnStatus.RUNNING

#: Every status change of a turn, by name; the store applies them (compare-and-set on the
#: sources) and nothing else changes ``Turn.status``.
TRANSITIONS: dict[str, Transition] = {t.name: t for t in (
    _t("claim", {_P}, _R),                       # a worker takes the turn; the fence moves
    _t("submit", {_P}, _P),                      # handed to background execution, waits met
    _t("wait", {_P}, _W),                        # submitted (or waited on) with unmet waits
    _t("suspend", {_R}, _W),                     # the turn waits for others; claim released
    _t("release", {_W}, _P),                     # maintenance: its targets finished
    _t("publish", {_R}, TurnStatus.COMPLETED),   # the output phase published
    _t("fail", {_R}, TurnStatus.FAILED),         # a budget, model or policy error
    _t("requeue", {_R}, _P),                     # reconcile: the worker is presumed dead
    _t("hand_back", {_R}, _P),                   # its worker shuts down at a step boundary
    _t("dead_letter", {_R}, TurnStatus.FAILED),  # reconcile: too many recoveries
    _t("refuse", {_P, _W}, TurnStatus.FAILED),   # nobody can run it (e.g. unknown agent)
    _t("abandon", {_P, _R}, TurnStatus.STALE),   # an inline turn left behind
    _t("cancel", set(ACTIVE_TURN_STATUSES), TurnStatus.CANCELLED),
    # Interactive controls (services.controls, runtime.controls).
    _t("pause", {_P, _W}, TurnStatus.PAUSED),              # the application pauses an idle turn
    _t("pause_at_boundary", {_R}, TurnStatus.PAUSED),      # its worker acknowledges a pause
    _t("await_approval", {_R}, TurnStatus.PAUSED),         # a call waits for a person
    _t("await_child", {_R}, TurnStatus.PAUSED),            # its inline sub-agent stopped
    _t("resume", {TurnStatus.PAUSED}, _P),                 # resumed (or a call decided)
    _t("resume_waiting", {TurnStatus.PAUSED}, _W),         # resumed into its unmet waits
)}
