"""The tasks' connection lifecycle (docs/howto/celery.md, "Database connections") on PostgreSQL.

In a worker, turnkit's tasks close stale sessions before and after themselves, as Django does
around a request (tests/e2e/test_setup.py runs that in a real worker). Called in the caller's
process they must leave the caller's connection alone, even inside the caller's transaction.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.db import connection

import turnkit_django.tasks as tasks

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("how", ["direct call", "apply"])
def test_a_task_run_in_the_callers_process_leaves_the_callers_connection_alone(how: str) -> None:
    group = Group.objects.create(name="before the task")  # in the test's transaction
    session = connection.connection

    if how == "direct call":
        tasks.maintain()
    else:
        tasks.maintain.apply().get()

    assert connection.connection is session
    assert not connection.needs_rollback
    assert Group.objects.filter(pk=group.pk).exists()
