"""The quickstart and the testing page, run as written on a fresh ``django-admin startproject``.

Every titled block of docs/quickstart.md is written or run in order (tests/docpages.py): the
project's settings, the app's agents, the payments stand-in, the Celery module and the package
``__init__`` that loads it; ``migrate`` and ``check``; the shell session that runs the agent with
a ``ScriptedClient``; a real ``celery worker`` and ``celery beat`` started from the page's own
command lines against the e2e Redis; and the shell session that submits a background run. Then
docs/howto/testing.md's files are added to the same project and its ``pytest`` command runs.

Nothing is installed: the project uses this interpreter's packages, as after the page's
``pip install`` (whose extras are checked against what the settings configure). No API key is
set, so the page's "without an API key" code paths are the ones that run.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import pytest

from tests.docpages import Reader, installs

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "docs" / "quickstart.md"
TESTING = REPO / "docs" / "howto" / "testing.md"
WAIT = """\
import time as _time  # (the test waits for the worker here, with a deadline)
from turnkit_django.models import Turn as _Turn
_deadline = _time.monotonic() + 60
while _Turn.objects.background().active().exists() and _time.monotonic() < _deadline:
    _time.sleep(0.2)
"""


@dataclass
class Quickstart:
    reader: Reader
    sessions: list[str]


def _broker() -> str:
    """The e2e Redis, on a database of its own so no other test's doorbell reaches it."""
    return urlunparse(urlparse(os.environ["TURNKIT_TEST_REDIS_URL"])._replace(path="/7"))


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quickstart]:
    root = tmp_path_factory.mktemp("fresh")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DJANGO_SETTINGS_MODULE", "ANTHROPIC_API_KEY", "PYTHONPATH")}
    env.update(CELERY_BROKER_URL=_broker(), PYTHONUNBUFFERED="1")

    def on_command(words: list[str]) -> list[str] | None:
        if words[0] == "pip":
            return None  # already installed; the extras are checked below
        if words[0] == "export":
            return None  # the API key: this test runs the page's no-key paths
        if words[:2] == ["celery", "-A"] and "worker" in words:
            return [*words, "--concurrency=1", "--without-gossip", "--without-mingle"]
        return words

    reader = Reader(root, env, on_command=on_command,
                    before_shell=lambda code: WAIT if "load_run(" in code else "")
    try:
        yield Quickstart(reader, reader.read(QUICKSTART))
    except BaseException:
        print(reader.logs())
        raise
    finally:
        reader.close()


def _printed(output: str) -> list[str]:
    """What the session printed, without the shell's own notice of its automatic imports."""
    return [line for line in output.splitlines()
            if line.strip() and "imported automatically" not in line]


@pytest.mark.timeout(300)
def test_the_quickstart_runs_as_written_on_a_fresh_project(quickstart: Quickstart) -> None:
    reader, project = quickstart.reader, quickstart.reader.cwd
    # Each shell block is a new `manage.py shell`, as a reader coming back later opens one.
    scripted, submitted, loaded = (_printed(session) for session in quickstart.sessions)

    # The scripted run: the support agent, its writer sub-agent, a refund paid once.
    assert scripted[0] == "completed", scripted
    result = json.loads(scripted[1])
    assert result == {"refund": "re_1", "order_id": "42", "amount_cents": 4599,
                      "replayed": False}
    assert any(re.match(r"\d+ assistant tool_call ", line) for line in scripted), scripted

    # The page says the first migrate warns W006 until section 6 adds the Celery app.
    migrated = dict(reader.outputs)["python manage.py migrate"]
    assert "turnkit.W006" in migrated and "turnkit.W006" in QUICKSTART.read_text(), migrated
    checked = dict(reader.outputs)["python manage.py check"]
    assert "System check identified no issues" in checked, checked

    # The background run: pending at once, completed by the worker started from the page,
    # then loaded by its id in a session that has no `run` of its own.
    assert submitted[0] == "pending", submitted
    assert submitted[1].startswith("turn_"), submitted
    assert loaded[0].startswith("completed {"), (loaded, reader.logs())
    logs = reader.logs()
    assert ". turnkit.run_turn" in logs and "unregistered" not in logs, logs
    assert "beat: Starting" in logs, logs
    assert (project / "myproject" / "__init__.py").read_text().startswith(
        "from .celery import app as celery_app")


def test_the_quickstart_installs_the_extras_its_settings_use() -> None:
    (line,) = installs(QUICKSTART)
    extras = set(re.search(r"\[([\w,]+)\]", line)[1].split(","))  # type: ignore[index]
    text = QUICKSTART.read_text()
    assert "anthropic" in extras and "AnthropicClient" in text
    assert "celery" in extras and "redis" in extras and "redis://" in text


@pytest.mark.timeout(300)
def test_the_testing_page_example_runs_in_the_quickstart_project(quickstart: Quickstart) -> None:
    reader = quickstart.reader
    sessions = reader.read(TESTING)
    assert sessions == []
    ran = [what for what, _ in reader.outputs if what.startswith("pytest")]
    assert ran, "the testing page runs no pytest command"
    output = dict(reader.outputs)[ran[-1]]
    assert re.search(r"\b[1-9]\d* passed\b", output) and "failed" not in output, output


VIEWS = REPO / "docs" / "howto" / "views.md"
CALL_VIEWS = """\
import json, time
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

client = Client(HTTP_HOST="localhost")
client.force_login(User.objects.create_user("reader"))
answer = client.post(reverse("support:refund", args=["42"]), {"reason": "it arrived broken"})
run_id = json.loads(answer.content)["run"]
print(answer.status_code, json.loads(answer.content)["status"])
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    body = json.loads(client.get(reverse("support:run_status", args=[run_id])).content)
    if body["status"] not in ("pending", "running", "waiting"):
        break
    time.sleep(0.2)
print(body["status"])
import support.async_views
"""


@pytest.mark.timeout(300)
def test_the_views_page_runs_in_the_quickstart_project(quickstart: Quickstart) -> None:
    """Its views, the app's urls.py and the project's include, called through Django's client."""
    reader = quickstart.reader
    assert reader.read(VIEWS) == []
    output = reader.run(reader.argv(["python", "manage.py", "shell"]), what="views",
                        stdin=CALL_VIEWS)
    assert _printed(output) == ["202 pending", "completed"], (output, reader.logs())
