"""The options an agent compacts with are its own laid over ``TURNKIT["COMPACTION"]``: each may
be valid alone and the merge not (a global context_limit under an agent's reserved_tokens), which
left no room at all, so compaction ran before every model call. The merge is checked too."""

from __future__ import annotations

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from turnkit_django import Agent, ConfigurationError, register
from turnkit_django.agents.compaction import options_for
from turnkit_django.agents.registry import unregister
from turnkit_django.checks import TAG
from turnkit_django.testing import ScriptedClient, reply

SMALL_GLOBAL = {"context_limit": 30_000, "reserved_tokens": 1_000}
BIG_RESERVE = {"reserved_tokens": 40_000}


def test_a_merge_without_room_is_refused_with_both_sources_named():
    with override_settings(TURNKIT={"COMPACTION": SMALL_GLOBAL}), \
            pytest.raises(ConfigurationError) as caught:
        options_for("writer", BIG_RESERVE)
    message = str(caught.value)
    assert "'writer'" in message and "TURNKIT" in message
    assert "30000" in message and "40000" in message


def test_a_merge_with_room_is_fine():
    with override_settings(TURNKIT={"COMPACTION": SMALL_GLOBAL}):
        options = options_for("writer", {"reserved_tokens": 2_000})
    assert options is not None and options["reserved_tokens"] == 2_000


def test_check_reports_a_registered_agent_whose_merge_has_no_room():
    agent = register(Agent("roomless", client=ScriptedClient([reply("x")]),
                           compaction=BIG_RESERVE))
    try:
        with override_settings(TURNKIT={"COMPACTION": SMALL_GLOBAL}):
            errors = [m for m in run_checks(tags=[TAG]) if m.id == "turnkit.E020"]
        assert len(errors) == 1 and "'roomless'" in errors[0].msg, errors
        with override_settings(TURNKIT={"COMPACTION": True}):
            assert not [m for m in run_checks(tags=[TAG]) if m.id == "turnkit.E020"]
    finally:
        unregister(agent.name)
