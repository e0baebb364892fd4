"""Hardening round 3 (issue 35) on PostgreSQL: the defects first reproduced on SQLite.

The scenarios live in the unit modules named below (SQLite); the ones that store or read rows
run here again against PostgreSQL, where text, JSON and cursors take the driver's path: the
GitHub token never reaching the transcript or events (H4), ``turnkit_inspect`` escaping control
characters (H5), a paid media answer charged whatever fails after it (H6), and cursors past any
stored id (H10).
"""

from __future__ import annotations

import pytest

from tests.helpers import media_root
from tests.unit.test_bad_input import test_a_cursor_past_any_id_a_database_stores_is_refused
from tests.unit.test_github_token_scrub import (
    test_the_token_reaches_neither_the_transcript_nor_the_events,
)
from tests.unit.test_media_turns import (
    events,
    on_commit,
    test_a_provider_image_url_that_is_not_a_web_url_is_refused_and_charged,
    test_an_answer_that_fails_while_it_is_recorded_still_charges_its_usage,
    test_from_a_tool_an_answer_that_fails_while_it_is_recorded_still_charges_its_usage,
)
from tests.unit.test_terminal_escapes import (
    test_inspect_json_escapes_them_and_reads_back_the_same,
    test_inspect_shows_control_characters_escaped,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("media_root")]

__all__ = [
    "events",
    "media_root",
    "on_commit",
    "test_a_cursor_past_any_id_a_database_stores_is_refused",
    "test_a_provider_image_url_that_is_not_a_web_url_is_refused_and_charged",
    "test_an_answer_that_fails_while_it_is_recorded_still_charges_its_usage",
    "test_from_a_tool_an_answer_that_fails_while_it_is_recorded_still_charges_its_usage",
    "test_inspect_json_escapes_them_and_reads_back_the_same",
    "test_inspect_shows_control_characters_escaped",
    "test_the_token_reaches_neither_the_transcript_nor_the_events",
]
