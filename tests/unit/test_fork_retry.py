"""Fork and retry (issue 39): ``conv.fork(at=sequence)`` copies the history up to a message into
a new conversation (the original untouched, authorized as reading it; a point inside a tool
exchange refused, naming the valid ones), and ``run.retry(principal=...)`` runs a failed or
cancelled run again as a new run of the same input, linked to the original, inline or in the
background as the original ran."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from tests.dispatch import override_turnkit, recorded
from tests.helpers import crash
from turnkit_django import (
    Agent,
    AuthorizationError,
    InputError,
    InvalidTransition,
    ModelError,
    load_conversation,
    load_run,
    reconcile,
    services,
    tool,
)
from turnkit_django.agents.registry import registered_agents, unregister
from turnkit_django.base import failpoints
from turnkit_django.messages import ImagePart, load_parts
from turnkit_django.models import Conversation, Message
from turnkit_django.store.media import open_image
from turnkit_django.testing import (
    PNG,
    FunctionClient,
    FunctionMediaClient,
    ScriptedClient,
    call,
    reply,
)

pytestmark = pytest.mark.django_db(transaction=True)
ACME, GLOBEX = {"tenant": "acme"}, {"tenant": "globex"}
POLICY = "tests.orchestration.tenant_policy"


@tool
def lookup_order(order_id: str) -> dict:
    """Look up an order."""
    return {"order_id": order_id, "status": "shipped"}


def texts(request) -> list[str]:
    return [" ".join(p.text for p in m.parts if p.kind == "text") for m in request.messages]


def history(conversation_id: str) -> list[tuple]:
    return list(Message.objects.filter(conversation_id=conversation_id).order_by(
        "sequence").values_list("sequence", "role", "kind", "content", "metadata"))


@pytest.fixture
def support(registered):
    client = ScriptedClient([call("lookup_order", order_id="42"), reply("It shipped."),
                             reply("Second answer.")])
    return registered(Agent(name="fork_support", instructions="Help.", tools=[lookup_order],
                            client=client))


def test_a_fork_copies_the_history_up_to_the_sequence_and_its_next_ask_sees_only_that(support):
    conv = support.conversation(principal=ACME, context={"account": 3})
    conv.ask("Where is order 42?")   # 1 user, 2 call, 3 result, 4 answer
    conv.ask("And order 43?")        # 5 user, 6 answer
    original = history(conv.id)
    assert [row[0] for row in original] == [1, 2, 3, 4, 5, 6]

    fork = conv.fork(at=4)

    assert fork.id != conv.id and history(conv.id) == original  # the original is untouched
    assert history(fork.id) == original[:4]
    row = Conversation.objects.get(pk=fork.id)
    assert (row.forked_from_id, row.forked_at, row.last_sequence) == (conv.id, 4, 4)
    assert (row.agent_name, row.principal, row.context) == ("fork_support", ACME, {"account": 3})
    seen = []
    support.client = FunctionClient(lambda request: seen.append(texts(request)) or reply("ok"))
    turn = fork.ask("What about a refund?")
    assert turn.status == "completed"
    assert seen[0][0] == "Where is order 42?" and seen[0][-1] == "What about a refund?"
    assert "And order 43?" not in seen[0]
    assert [r[0] for r in history(fork.id)] == [1, 2, 3, 4, 5, 6]
    assert history(conv.id) == original


def test_a_sequence_that_is_no_message_or_inside_a_tool_exchange_names_the_valid_ones(support):
    conv = support.conversation()
    conv.ask("Where is order 42?")   # 1 user, 2 call (open until 3), 3 result, 4 answer
    with pytest.raises(InputError, match=r"at=2 is inside a tool exchange .*: 1, 3-4$"):
        conv.fork(at=2)
    with pytest.raises(InputError, match=r"at=9 is no message's sequence .*: 1, 3-4$"):
        conv.fork(at=9)
    for bad in (0, "3", True):
        with pytest.raises(InputError):
            conv.fork(at=bad)
    assert Conversation.objects.count() == 1  # nothing written


def test_a_fork_is_authorized_as_reading_the_original_and_belongs_to_its_principal(support):
    conv = support.conversation(principal=ACME)
    conv.ask("Where is order 42?")
    with override_turnkit(AUTHORIZATION_POLICY=POLICY):
        with pytest.raises(AuthorizationError):
            conv.fork(at=1, principal=GLOBEX)
        assert Conversation.objects.count() == 1
        staff = {"tenant": "ops", "staff": True}
        fork = conv.fork(at=1, principal=staff)
    assert Conversation.objects.get(pk=fork.id).principal == staff


def test_a_fork_of_a_conversation_with_a_running_turn_copies_committed_messages(
        support, background):
    conv = support.conversation()
    conv.ask("Where is order 42?")
    turn = conv.ask("And 43?", submit=True)  # pending in the background, its input committed
    fork = conv.fork(at=5)
    assert [r[1] for r in history(fork.id)] == ["user", "assistant", "tool", "assistant", "user"]
    assert turn.refresh().status == "pending"


@pytest.fixture
def flaky(registered):
    client = ScriptedClient([ModelError("provider down"), reply("Refunded.")])
    return registered(Agent(name="fork_flaky", instructions="Refund.", client=client))


def test_retry_of_a_failed_inline_run_runs_the_same_input_again_inline(flaky):
    run = flaky.run("Refund order 42", input={"order_id": "42"}, principal=ACME)
    assert run.status == "failed"

    again = run.retry()

    assert again.id != run.id and again.status == "completed"
    assert again.output_text == "Refunded."
    assert again.row.retry_of_id == run.id and again.row.principal == ACME
    assert again.row.submitted_at is None
    first, second = flaky.client.requests
    assert texts(first) == texts(second)  # the same input
    assert load_run(run.id).status == "failed"  # the original stays as it ended


def test_retry_of_a_background_run_submits_it_and_a_worker_completes_it(flaky, background):
    run = flaky.submit("Refund order 42")
    services.run_turn(run.id)
    assert run.refresh().status == "failed"

    again = run.retry()

    assert again.status == "pending" and again.row.submitted_at is not None
    assert recorded()[-1] == again.id
    services.run_turn(again.id)
    assert again.refresh().status == "completed" and again.row.retry_of_id == run.id


def test_retry_of_a_cancelled_run_and_submit_chooses_the_path(flaky, background):
    run = flaky.prepare("Refund order 42")
    run.cancel()
    assert run.status == "cancelled"
    again = run.retry(submit=True)
    assert again.row.submitted_at is not None and again.row.retry_of_id == run.id


def test_retry_of_a_completed_or_active_run_is_refused_and_writes_nothing(flaky, background):
    flaky.client.add(reply("Done."))
    done = flaky.run("Refund order 42")
    assert done.status == "failed"
    done = done.retry()
    assert done.status == "completed"
    before = Conversation.objects.count()
    with pytest.raises(InvalidTransition, match="it is completed; only a failed, cancelled"):
        done.retry()
    pending = flaky.submit("Later")
    with pytest.raises(InvalidTransition, match="it is pending"):
        pending.retry()
    assert Conversation.objects.count() == before + 1  # the submitted run's only


def test_retry_is_authorized_as_a_new_run_of_its_principal(flaky):
    run = flaky.run("Refund order 42", principal=ACME)
    assert run.status == "failed"
    with override_turnkit(AUTHORIZATION_POLICY=POLICY):
        with pytest.raises(AuthorizationError):
            run.retry(principal=GLOBEX)
        before = Conversation.objects.count()
        again = run.retry(principal={"tenant": "acme", "user": 7})
    assert again.status == "completed" and Conversation.objects.count() == before + 1
    assert again.row.principal == {"tenant": "acme", "user": 7}


@pytest.mark.usefixtures("media_root")
def test_a_forks_copied_image_refers_to_the_same_stored_file(registered,
                                                             django_capture_on_commit_callbacks):
    artist = registered(Agent("fork_artist", instructions="Draw.",
                              client=FunctionClient(lambda r: reply("A teapot."))))
    run = artist.prepare("Draw a teapot")
    with django_capture_on_commit_callbacks(execute=True):
        run.turn.paint("A teapot on a shelf", client=FunctionMediaClient())
    conv = load_conversation(run.row.conversation_id)

    fork = conv.fork(at=2)

    original, copy = (Message.objects.get(conversation_id=c, sequence=2)
                      for c in (conv.id, fork.id))
    [part] = load_parts(copy.content)
    assert isinstance(part, ImagePart) and load_parts(original.content) == [part]
    with open_image(part) as stored:
        assert stored.read() == PNG
    assert fork.ask("Describe it.").status == "completed"


@pytest.mark.django_db
def test_the_integrations_page_fork_and_retry_examples_run_as_written(capsys) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs/howto/integrations.md").read_text()
    section = page.split("## Fork a conversation, retry a run", 1)[1].split("\n## ", 1)[0]
    sessions = [b.split("\n", 1)[1] for b in section.split('```python title="python manage.py '
                                                           'shell"')[1:]]
    assert len(sessions) == 2
    for number, code in enumerate(sessions, 1):
        before = set(registered_agents())
        try:
            exec(compile(code.split("```", 1)[0], f"example {number}", "exec"), {})  # noqa: S102
        finally:
            for name in set(registered_agents()) - before:
                unregister(name)
    assert capsys.readouterr().out.split("\n") == [
        "[1, 2, 3, 4, 5, 6]", "True 4", "failed", "completed Refunded order 42.", "True", ""]


def test_pruning_an_original_keeps_its_forks_and_retries(support, flaky):
    conv = support.conversation()
    conv.ask("Where is order 42?")
    fork = conv.fork(at=4)
    run = flaky.run("Refund order 42")
    again = run.retry()
    Conversation.objects.filter(pk__in=[fork.id, again.row.conversation_id]).update(
        updated_at=timezone.now() + timedelta(days=2))  # the copies are recent, the rest old

    assert services.prune(before=timezone.now() + timedelta(days=1)) == 2

    assert [r[0] for r in history(fork.id)] == [1, 2, 3, 4]
    assert fork.refresh().row.forked_from_id is None and fork.row.forked_at == 4
    assert again.refresh().status == "completed" and again.row.retry_of_id is None


def test_retry_of_a_dead_lettered_run_submits_it_again_and_it_completes(registered, background):
    """A run reconcile gave up on (failed, error type DeadLetter) is retried like any failure:
    a new background run of the same input, linked to it, that a worker completes."""
    agent = registered(Agent("fork_dead", instructions="Answer.",
                             client=ScriptedClient([reply("Answered.")])))
    run = agent.submit("What is the status of order 42?", principal=ACME)
    crash(run.id, "before_model_call")
    with override_turnkit(MAX_RECOVERY_ATTEMPTS=1):
        for _ in range(2):
            failpoints.arm("recover_turn", lambda: (_ for _ in ()).throw(RuntimeError("bad")))
            report = reconcile()
    assert report.dead_lettered == [run.id]
    assert (run.refresh().status, run.row.error["type"]) == ("failed", "DeadLetter")

    again = run.retry(principal=ACME)

    assert again.status == "pending" and again.row.retry_of_id == run.id
    assert recorded()[-1] == again.id
    services.run_turn(again.id)
    assert again.refresh().status == "completed" and again.output_text == "Answered."
    assert texts(agent.client.requests[0]) == ["What is the status of order 42?"]
    assert load_run(run.id).row.error["type"] == "DeadLetter"  # the original stays as it ended
