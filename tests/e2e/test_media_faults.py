"""A background turn that looks at an upload and paints, with its worker SIGKILLed mid-paint.

The turn's tool calls ``turn.view_media`` on an uploaded file (a ``FileField``) and then
``turn.paint``; the image provider is faked at its HTTP edge (tests/testapp/media_agents.py) and
writes every request, and every paid generation, to the ledger. The worker is killed while the
provider holds the paint request; the reconcile loop and a second worker finish the turn:

* tool not replay-safe: no second generation (one request, one charge); the tool's result is
  "outcome unknown"; no image message (nothing came back to record);
* tool replay-safe: the tool runs again; the recorded analysis is returned without a second
  vision call, and the paint is asked again with the same idempotency key, which the provider
  charges once; the transcript holds exactly one image message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from django.core.files.storage import storages
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.e2e.harness import Cluster, wait_terminal
from tests.e2e.invariants import assert_scenario_invariants
from tests.testapp.media_agents import MEDIA_AGENT, PAINT_GATE
from tests.testapp.models import Upload
from turnkit_django.agents import get_agent
from turnkit_django.base.error_records import unknown_result
from turnkit_django.base.states import ToolStatus, TurnStatus
from turnkit_django.messages import ImagePart, load_parts
from turnkit_django.models import Message, ToolExecution, Turn
from turnkit_django.testing import PNG

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def media_root(cluster: Cluster, settings: Any) -> Path:
    """The test process and the workers share the cluster's media directory."""
    settings.MEDIA_ROOT = str(cluster.media_root)
    storages._storages.pop("default", None)
    yield cluster.media_root
    storages._storages.pop("default", None)


def paint_through_a_crash(cluster: Cluster, tool: str) -> tuple[Turn, ToolExecution, str]:
    """Submit the scenario, SIGKILL the worker held inside the paint call, wait for the end."""
    upload = Upload.objects.create(file=SimpleUploadedFile("broken-teapot.png", PNG))
    cluster.start(2)
    cluster.start_reconciler()
    task = json.dumps({"nonce": uuid4().hex, "tool": tool, "upload_id": upload.pk})
    turn_id = get_agent(MEDIA_AGENT).submit(task).id

    blocked = cluster.wait_ledger("gate.blocked", gate=PAINT_GATE, timeout=45)[0]
    cluster.worker(blocked["worker"]).kill()  # the provider has charged; no answer came back
    cluster.open_gate(PAINT_GATE)  # a repeated request (replay-safe tool) is answered at once
    row = wait_terminal([turn_id], timeout=60)[turn_id]
    assert row.status == TurnStatus.COMPLETED, row.error
    assert row.recovery_attempts == 1
    execution = ToolExecution.objects.get(turn_id=turn_id)
    return row, execution, f"{execution.idempotency_key}:paint:2"


@pytest.mark.timeout(120)
def test_unsafe_tool_killed_mid_paint_is_not_run_again(cluster: Cluster,
                                                       media_root: Path) -> None:
    row, execution, key = paint_through_a_crash(cluster, "inspect_and_paint")

    assert [e["key"] for e in cluster.ledger("image.request")] == [key]
    assert [e["key"] for e in cluster.ledger("image.paid")] == [key], "no second generation"
    assert len(cluster.ledger("vision")) == 1
    assert (execution.status, execution.attempts) == (ToolStatus.INTERRUPTED, 1)
    result = Message.objects.get(turn_id=row.pk, role="tool")
    assert result.content[0]["content"] == unknown_result()
    assert Message.objects.filter(turn_id=row.pk, kind="media_analysis").count() == 1
    assert not Message.objects.filter(turn_id=row.pk, kind="image").exists()
    assert row.state["media"][key]["status"] == "requested", "the outcome stays unknown"
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(120)
def test_replay_safe_tool_killed_mid_paint_repaints_with_the_same_key(
        cluster: Cluster, media_root: Path) -> None:
    row, execution, key = paint_through_a_crash(cluster, "inspect_and_paint_safe")

    assert [e["key"] for e in cluster.ledger("image.request")] == [key, key], "same key"
    assert [e["key"] for e in cluster.ledger("image.paid")] == [key], "charged once"
    assert len(cluster.ledger("vision")) == 1, "the recorded analysis was not asked again"
    assert (execution.status, execution.attempts) == (ToolStatus.COMPLETED, 2)
    [image] = Message.objects.filter(turn_id=row.pk, kind="image")
    assert image.tool_execution_id == execution.pk and image.metadata["idempotency_key"] == key
    [part] = load_parts(image.content)
    assert isinstance(part, ImagePart) and (media_root / str(part.name)).read_bytes() == PNG
    analysis = Message.objects.get(turn_id=row.pk, kind="media_analysis")
    assert analysis.content[0]["data"] == {"damaged": True}
    assert analysis.content[0]["media"][0]["name"] == "broken-teapot.png"
    assert execution.result == {"damaged": True, "image": image.pk}
    assert row.cost > 0 and not row.cost_unknown
    assert_scenario_invariants(cluster)
