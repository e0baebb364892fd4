"""The Celery app of the e2e tier: ``celery -A tests.celery_app worker -Q turnkit``.

Broker: the throwaway Redis named by ``TURNKIT_TEST_REDIS_URL``. Settings: the recommended ones
(../shared/reference/reliability.md section 3.2): late ack, reject on worker lost, prefetch 1,
JSON only, no result backend, one visibility timeout everywhere. Importing this module makes the
app the default one, so ``turnkit_django.celery.enqueue_turn`` publishes through it from the test
process too.

Task start and end are written to the e2e ledger (``tests.testapp.ledger``) so tests can see
every delivery, including the ones that found nothing to claim; a test can also hold every task
right before its body (``PRERUN_HOLD``) and release them together.
"""

from __future__ import annotations

import faulthandler
import os
import signal
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.e2e.worker_settings")

PRERUN_HOLD = "prerun"  # tests.testapp.ledger.hold: a barrier in front of every task body
VISIBILITY_TIMEOUT = 60  # seconds; above the longest step any e2e scenario runs

app = Celery("turnkit_tests", include=["turnkit_django.celery"])
app.conf.update(
    broker_url=os.environ.get("TURNKIT_TEST_REDIS_URL", "memory://"),
    broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT},
    result_backend_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT},
    broker_connection_retry_on_startup=True,
    broker_connection_max_retries=None,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    task_acks_on_failure_or_timeout=True,
    task_ignore_result=True,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_default_queue="turnkit",
    worker_prefetch_multiplier=1,
    worker_cancel_long_running_tasks_on_connection_loss=True,
)
# Read by Celery's Django fixup under its old name: the worker settings keep each process's
# session across tasks when TURNKIT_E2E_KEEP_CONNECTIONS is set (tests/e2e/worker_settings.py).
app.conf.CELERY_DB_REUSE_MAX = getattr(settings, "CELERY_DB_REUSE_MAX", None)
app.set_default()

# SIGUSR2 prints every thread's stack to the worker's log (the soak's report on a stuck turn).
faulthandler.register(signal.SIGUSR2, all_threads=True)

if os.environ.get("TURNKIT_E2E_SPANS"):  # tests/e2e/test_tracing.py: spans to a JSON-lines file
    from tests.testapp.span_file import install

    install(os.environ["TURNKIT_E2E_SPANS"])


@task_prerun.connect
def _ledger_prerun(task_id: str = "", task: Any = None, args: Any = (), **_: Any) -> None:
    from tests.testapp.ledger import hold, record

    name = getattr(task, "name", "")
    record("task.prerun", task=name, task_id=task_id, args=list(args or ()))
    hold(PRERUN_HOLD, task=name, task_id=task_id, args=list(args or ()))


@task_postrun.connect
def _ledger_postrun(task_id: str = "", task: Any = None, args: Any = (), state: str = "",
                    **_: Any) -> None:
    from tests.testapp.ledger import record

    record("task.postrun", task=getattr(task, "name", ""), task_id=task_id,
           args=list(args or ()), state=state)
