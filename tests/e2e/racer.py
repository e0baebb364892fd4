"""A claim racer: one process of scenario 7, started with multiprocessing's ``spawn`` context.

It sets up Django on the e2e test database itself (nothing is inherited from the test process),
then for each round waits at the shared barrier and calls ``turnkit_django.store.claim`` on its
turn of the round. Every won claim (and any error) goes to the ledger, outside turnkit's tables.
"""

from __future__ import annotations

import os
from typing import Any


def race(index: int, database_name: str, ledger_path: str, rounds: list[list[str]],
         barrier: Any) -> None:
    os.environ.update({
        "DJANGO_SETTINGS_MODULE": "tests.e2e.worker_settings",
        "TURNKIT_E2E_DATABASE_NAME": database_name,
        "TURNKIT_E2E_LEDGER": ledger_path,
        "TURNKIT_E2E_WORKER": f"racer{index}",
    })
    import django

    django.setup()
    from django.db import connection

    from tests.testapp.ledger import record
    from turnkit_django import store

    identity = store.worker_identity(f"racer{index}")
    try:
        for number, turn_ids in enumerate(rounds):
            turn_id = turn_ids[index % len(turn_ids)]
            barrier.wait(timeout=60)
            try:
                claim = store.claim(turn_id, identity)
            except Exception as exc:  # a second winner would surface here (unique index)
                record("claim.error", round=number, turn=turn_id, error=repr(exc))
                continue
            if claim is not None:
                record("claim", round=number, turn=turn_id, fence=claim.fence,
                       identity=identity)
    finally:
        connection.close()
