"""PostgreSQL refuses NUL, lone surrogates and NaN; model and tool output holding them is
stored cleaned (as on SQLite: tests/unit/test_bad_input.py)."""

from __future__ import annotations

import pytest
from django.conf import settings

from tests.unstorable import CASES, run_case

pytestmark = [
    pytest.mark.django_db(transaction=True),  # real commits: the one-statement steps too
    pytest.mark.skipif("postgresql" not in settings.DATABASES["default"]["ENGINE"],
                       reason="needs TURNKIT_TEST_DATABASE_URL (PostgreSQL)"),
]


@pytest.mark.parametrize("name", CASES)
def test_model_and_tool_output_is_stored_cleaned_and_the_run_completes(name):
    run_case(CASES[name])

