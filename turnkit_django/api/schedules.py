"""``schedule(agent, cron=... | every=..., task=..., key=...)``: run an agent on a schedule.

Beat's ``turnkit.schedules`` tick (:mod:`turnkit_django.services.schedules`) starts one run per
firing; docs/howto/integrations.md ("Schedules") says when, and what happens to missed ones.
"""

from __future__ import annotations

from typing import Any

from ..agents import AgentDefinition
from ..base.cron import parse as parse_cron
from ..base.intervals import every_seconds
from ..base.serialization import json_value
from ..exceptions import InputError
from ..models.schedules import Missed, Schedule
from ..store import input_checks
from ..store.schedules import save_schedule

MAX_KEY = 200


def schedule(agent: AgentDefinition | str, *, task: str, key: str, cron: str | None = None,
             every: int | None = None, missed: str = "skip", principal: Any = None,
             enabled: bool = True) -> Schedule:
    """Create the schedule ``key``, or update it in place: the same call twice is one schedule.

    ``agent`` (an agent or its registered name) runs ``task`` as a new submitted run at each
    firing of ``cron`` (5 fields, in ``TIME_ZONE``) or every ``every`` seconds (whole seconds,
    at least 1, aligned on the Unix epoch), exactly one of the two, with ``principal``.
    ``missed``: ``"skip"`` (default) starts none of the firings missed while beat was down;
    ``"catch_up"`` starts the most recent of them once. InputError, writing nothing, for a bad
    argument.
    """
    name = agent if isinstance(agent, str) else getattr(agent, "name", None)
    if not isinstance(name, str) or not name:
        raise InputError(f"schedule() takes an Agent or an agent's name; got {agent!r}.")
    input_checks.idempotency_key(key, "the key of schedule() (it names the schedule)",
                              length=MAX_KEY)
    input_checks.require_text(task, "the task of schedule()")
    if missed not in Missed.values:
        raise InputError(f"schedule(missed=...) must be 'skip' or 'catch_up'; got {missed!r}.")
    input_checks.flag(enabled, "schedule(): enabled=")
    if (cron is None) == (every is None):
        raise InputError("schedule() takes exactly one of cron= or every=, such as "
                         "cron='0 9 * * 1-5' or every=30 (seconds).")
    if cron is not None:
        parse_cron(cron)
    return save_schedule(key, agent_name=name, task=task, missed=missed,
                         cron="" if cron is None else " ".join(cron.split()),
                         every=None if every is None else every_seconds(every),
                         principal=json_value(principal, "principal"), enabled=enabled)


__all__ = ["schedule"]
