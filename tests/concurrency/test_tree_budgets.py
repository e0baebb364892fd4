"""Parallel children share the root's limits on PostgreSQL (issue 4, done-when 6).

An orchestrator fans out to three background children; each child loops, calling a tool after
every model call, until a root-wide limit stops it. The children run at the same moment in three
threads (``services.run_turn``, as three workers would), released together by a barrier at their
first model call. Iterations and tool slots are reserved under the tree lock, so with a limit of
N exactly N are used across the whole tree, and every child that hit the limit reports it.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.concurrency.threads import Worker
from turnkit_django import Agent, services, tool
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.models import Message, ToolExecution, Turn
from turnkit_django.testing import Entry, FunctionClient, call, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]

CHILDREN = ("left", "middle", "right")


@tool
def tick(ctx) -> str:
    """Count one unit of work."""
    return "ticked"


def tree(registered: Any, **limits: Any) -> tuple[Agent, FunctionClient]:
    """The orchestrator (registered) and the children's shared client."""
    start = threading.Barrier(len(CHILDREN), timeout=15)

    def work(request: ModelRequest) -> Entry:
        if not any(m.role == "assistant" for m in request.messages):
            try:
                start.wait()  # every child makes its first model call at the same moment
            except threading.BrokenBarrierError:
                pass
        return call("tick")

    def orchestrate(request: ModelRequest) -> Entry:
        if request.messages[-1].role == "tool":
            return reply("joined")
        return [call(name, id=f"call_{name}", task=f"work {name}") for name in CHILDREN]

    client = FunctionClient(work)
    subs = [Agent(name, description="Works.", tools=[tick], client=client) for name in CHILDREN]
    agent = registered(Agent("budget_root", sub_agents=subs, client=FunctionClient(orchestrate),
                             **limits))
    return agent, client


def run_children_in_parallel(root_id: str) -> list[Turn]:
    children = list(Turn.objects.filter(parent_turn_id=root_id).order_by("created_at"))
    assert [c.status for c in children] == ["pending"] * len(CHILDREN)
    workers = [Worker(services.run_turn, child.pk) for child in children]
    for worker in workers:
        worker.start()
    assert all(worker.outcome(timeout=60) for worker in workers)
    return [Turn.objects.get(pk=child.pk) for child in children]


@pytest.mark.parametrize("limit", [12, 31])
def test_parallel_children_share_the_roots_tool_slots(registered, limit):
    agent, _ = tree(registered, max_tool_executions=limit, max_iterations=1000)
    run = agent.submit("fan out")
    assert services.run_turn(run.id)
    assert Turn.objects.get(pk=run.id).status == "waiting"

    children = run_children_in_parallel(run.id)

    root = Turn.objects.get(pk=run.id)
    assert root.tree_tool_executions == limit
    used = ToolExecution.objects.filter(turn__root_turn_id=run.id, budget_denied=False)
    assert used.count() == limit  # three delegations and limit - 3 ticks, across three workers
    assert used.filter(tool_name="tick").count() == limit - len(CHILDREN)
    for child in children:
        assert child.status == "failed"
        assert child.error["reason"] == "maximum tool executions reached"
        assert child.error["limit"] == "max_tool_executions"
        assert ToolExecution.objects.filter(turn_id=child.pk, budget_denied=True).count() == 1
    # The children's failures are their results; the parent joins them and completes.
    assert Turn.objects.get(pk=run.id).status == "pending"
    assert services.run_turn(run.id)
    assert Turn.objects.get(pk=run.id).status == "completed"


@pytest.mark.parametrize("limit", [9, 25])
def test_parallel_children_share_the_roots_iterations(registered, limit):
    agent, client = tree(registered, max_iterations=limit, max_tool_executions=1000)
    run = agent.submit("fan out")
    assert services.run_turn(run.id)

    children = run_children_in_parallel(run.id)

    assert Turn.objects.get(pk=run.id).tree_iterations == limit
    model_calls = Message.objects.filter(turn__root_turn_id=run.id, role="assistant").count()
    assert model_calls == limit  # one by the root, limit - 1 by the children
    assert len(client.requests) == limit - 1
    for child in children:
        assert child.status == "failed"
        assert child.error["reason"] == "maximum iterations reached"
    # The root has no iteration left to read its results: it fails with the same reason.
    assert services.run_turn(run.id)
    root = Turn.objects.get(pk=run.id)
    assert root.status == "failed" and root.error["reason"] == "maximum iterations reached"
    assert root.tree_iterations == limit
