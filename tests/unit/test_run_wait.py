"""Waiting for a run (issue 40): ``run.wait(timeout=)`` and ``await run.await_result(timeout=)``
return the run refreshed once it is terminal or paused for a person, raise RunTimeout after the
timeout; ``run.wait()`` refuses to wait inside ``transaction.atomic()`` (it would never see the
commit). ``await_result`` checks on connections of its own, never in the caller's block.

A worker (``services.run_turn``) runs the turn while the caller sleeps between two checks; the
race with a worker thread, and the sessions held while waiting, are in
tests/integration/test_run_wait_pg.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction

import turnkit_django
from turnkit_django import Agent, AtomicBlockError, InputError, RunTimeout, services, tool
from turnkit_django.services import awaiting
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


@tool(approval=True)
def refund(order_id: str) -> str:
    """Refund an order, once a person approves."""
    return f"refunded {order_id}"


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], list[str]]:
    """``worker(turn_id)``: the first time the caller sleeps between its checks, a worker runs
    the submitted turn (``services.run_turn``, in a thread of its own for async callers); the
    statuses the caller had seen when it slept are returned. Sequential, so SQLite's shared
    in-memory database is never written and read at once (tests/integration races them)."""
    real_sleep, real_async_sleep = awaiting.sleep, awaiting.async_sleep
    pending: list[str] = []
    seen: list[str] = []

    def sleep(seconds: float) -> None:
        seen.append("slept")
        if pending:
            services.run_turn(pending.pop())
        real_sleep(seconds)

    async def async_sleep(seconds: float) -> None:
        seen.append("slept")
        if pending:
            await sync_to_async(services.run_turn, thread_sensitive=False)(pending.pop())
        await real_async_sleep(seconds)

    monkeypatch.setattr(awaiting, "sleep", sleep)
    monkeypatch.setattr(awaiting, "async_sleep", async_sleep)

    def submitted(turn_id: str) -> list[str]:
        pending.append(turn_id)
        return seen
    return submitted


def test_wait_returns_the_run_refreshed_once_a_worker_completed_it(registered, worker):
    agent = registered(Agent("waited", client=FunctionClient(lambda r: reply("done"))))
    run = agent.submit("x")
    seen = worker(run.id)
    assert run.wait(timeout=10) is run
    assert run.status == "completed" and run.output_text == "done"
    assert seen == ["slept"]  # it checked, slept while the worker ran, checked again


def test_wait_returns_early_when_the_run_is_paused_for_a_person(registered, worker):
    agent = registered(Agent("approving", client=FunctionClient(
        lambda r: call("refund", order_id="42")), tools=[refund]))
    run = agent.submit("x")
    seen = worker(run.id)
    assert run.wait(timeout=10).status == "paused" and seen == ["slept"]
    assert [e.status for e in run.pending_approvals()] == ["pending"]


def test_await_result_is_the_same_for_async_code(registered, worker):
    agent = registered(Agent("awaited", client=FunctionClient(lambda r: reply("ok"))))
    run = agent.submit("x")
    seen = worker(run.id)
    assert asyncio.run(run.await_result(timeout=10)) is run
    assert run.status == "completed" and run.output_text == "ok" and seen == ["slept"]


def test_a_run_nobody_executes_times_out_with_what_to_do(registered):
    agent = registered(Agent("idle", client=FunctionClient(lambda r: reply("never"))))
    run = agent.submit("x")
    with pytest.raises(RunTimeout) as raised:
        run.wait(timeout=0.2)
    message = str(raised.value)
    assert run.id in message and "pending" in message and "worker" in message
    assert raised.value.run_id == run.id and raised.value.status == "pending"
    assert isinstance(raised.value, TimeoutError)
    assert isinstance(raised.value, turnkit_django.TurnkitError)
    assert "RunTimeout" in turnkit_django.__all__
    with pytest.raises(RunTimeout):
        asyncio.run(run.await_result(timeout=0.2))


@pytest.mark.parametrize("timeout", [0, -1, True, float("nan"), "5"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(registered, timeout):
    run = registered(Agent("bad", client=FunctionClient(lambda r: reply("x")))).prepare("x")
    with pytest.raises(InputError, match="timeout"):
        run.wait(timeout=timeout)
    with pytest.raises(InputError, match="timeout"):
        asyncio.run(run.await_result(timeout=timeout))


def test_waiting_inside_an_atomic_block_is_refused(registered):
    run = registered(Agent("atomic", client=FunctionClient(lambda r: reply("x")))).prepare("x")
    with transaction.atomic(), pytest.raises(AtomicBlockError, match=r"run\.wait\(\)"):
        run.wait(timeout=1)


def test_a_finished_run_is_returned_at_once(registered):
    run = registered(Agent("done", client=FunctionClient(lambda r: reply("fine")))).run("x")
    assert run.wait(timeout=None).output_text == "fine"
