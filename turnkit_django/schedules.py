"""``schedule(agent, cron=..., task=..., key=...)``: run an agent on a cron schedule.

Beat's ``turnkit.schedules`` tick (:mod:`turnkit_django.services.schedules`) starts one run per
firing; docs/howto/integrations.md ("Schedules") says when, and what happens to missed ones.
"""

from __future__ import annotations

from typing import Any

from . import arguments
from .agents import AgentDefinition
from .cron import parse as parse_cron
from .exceptions import InputError
from .models.schedules import Missed, Schedule
from .serialization import json_value
from .store.schedules import save_schedule

MAX_KEY = 200


def schedule(agent: AgentDefinition | str, *, cron: str, task: str, key: str,
             missed: str = "skip", principal: Any = None, enabled: bool = True) -> Schedule:
    """Create the schedule ``key``, or update it in place: the same call twice is one schedule.

    ``agent`` (an agent or its registered name) runs ``task`` as a new submitted run at each
    firing of ``cron`` (5 fields, in ``TIME_ZONE``), with ``principal``. ``missed``: ``"skip"``
    (default) starts none of the firings missed while beat was down; ``"catch_up"`` starts the
    most recent of them once. InputError, writing nothing, for a bad argument.
    """
    name = agent if isinstance(agent, str) else getattr(agent, "name", None)
    if not isinstance(name, str) or not name:
        raise InputError(f"schedule() takes an Agent or an agent's name; got {agent!r}.")
    arguments.idempotency_key(key, "the key of schedule() (it names the schedule)",
                              length=MAX_KEY)
    arguments.require_text(task, "the task of schedule()")
    if missed not in Missed.values:
        raise InputError(f"schedule(missed=...) must be 'skip' or 'catch_up'; got {missed!r}.")
    arguments.flag(enabled, "schedule(): enabled=")
    parse_cron(cron)
    return save_schedule(key, agent_name=name, cron=" ".join(cron.split()), task=task,
                         missed=missed, principal=json_value(principal, "principal"),
                         enabled=enabled)


__all__ = ["schedule"]
