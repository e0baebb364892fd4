"""The operations console: turn, conversation and list pages, filters, names, permissions.

The scenario (tests/browser/scenario.py) holds every kind of tool result; pages are read with
the Django test client as a superuser unless a test says otherwise.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.functional import Promise

from tests.browser.scenario import RATES, active_tree, console_agents, finished_run, support
from tests.dispatch import override_turnkit
from turnkit_django import Agent, services
from turnkit_django.console.timeline import load_tree, turn_summary
from turnkit_django.console.transcript_text import tree_lines
from turnkit_django.messages import TextPart
from turnkit_django.models import Conversation, Delivery, ToolExecution, Turn, Wait
from turnkit_django.testing import FunctionClient, reply

__all__ = ["console_agents"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("console_agents")]

SECONDS = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")


@pytest.fixture
def staff_client(client):
    user = User.objects.create_superuser("admin", "admin@example.com", "pw")
    client.force_login(user)
    return client


def staff(*codenames: str) -> Client:
    user = User.objects.create_user(f"op-{'-'.join(codenames)}", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="turnkit",
                                                        codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def page(client: Client, name: str, *args: str, **query: str) -> str:
    response = client.get(reverse(f"admin:turnkit_{name}", args=args), query)
    assert response.status_code == 200, response
    return response.content.decode()


def turn_page(client: Client, turn_id: str) -> str:
    return page(client, "turn_change", turn_id)


def test_the_turn_page_leads_with_facts_then_transcript_tree_and_folded_fields(staff_client):
    with override_turnkit(COST_RATES=RATES):
        run = finished_run()
    body = turn_page(staff_client, run.id)
    positions = [body.index(marker) for marker in (
        'id="tk-facts"', 'id="tk-transcript"', 'id="tk-tree"', 'class="module tk-stored"')]
    assert positions == sorted(positions)
    facts = body[positions[0]:positions[1]]
    assert "tk-status-completed" in facts and "console_support" in facts
    assert "&quot;tenant&quot;: &quot;acme&quot;" in facts  # the principal, indented JSON
    tree_cost = run.cost
    assert tree_cost is not None and tree_cost > 0
    whole_tree = facts[facts.index("whole tree"):]
    assert f"${tree_cost:.6f}".rstrip("0") in whole_tree and ">2<" in whole_tree
    assert SECONDS.search(facts) and "took" in facts
    # The stored fields come last, folded away (a closed <details>).
    assert re.search(r'<details class="module tk-stored">', body)


def test_the_transcript_reads_as_a_conversation(staff_client):
    run = finished_run()
    body = turn_page(staff_client, run.id)
    transcript = body[body.index('id="tk-transcript"'):body.index('id="tk-tree"')]
    for role in ("user", "assistant", "tool"):
        assert f"tk-role-{role}" in transcript
    assert "Refund order 42: the teapot arrived broken." in transcript
    # Arguments are pretty-printed JSON, not a Python repr.
    assert '<pre class="tk-args">{\n  &quot;order_id&quot;: &quot;42&quot;\n}</pre>' in transcript
    assert "{'order_id'" not in transcript
    # Results and errors look different; a call skipped after the terminal tool is marked.
    assert transcript.count("tk-result tk-result-ok") == 3
    assert transcript.count("tk-result tk-result-error") == 1
    assert "the warehouse is offline" in transcript
    assert transcript.count("tk-result tk-result-not_executed") == 1
    assert "⊘ not executed" in transcript
    # The writer's transcript is nested, collapsible, and links to the child turn.
    child = run.turns().get(agent_name="console_writer")
    nested = transcript[transcript.index(f'data-turn="{child.pk}"'):]
    assert nested.index("A full refund of $19.99") < nested.index("</details>")
    assert f'href="{reverse("admin:turnkit_turn_change", args=[child.pk])}"' in nested


def test_an_interrupted_call_is_marked_outcome_unknown(staff_client, background):
    run = active_tree()
    charger = run.turns().get(agent_name="console_charger")
    assert "tk-status-running" in turn_page(staff_client, charger.pk)
    services.cancel(run.id, cascade=True)
    body = turn_page(staff_client, charger.pk)
    assert "tk-result tk-result-outcome_unknown" in body and "⚠ outcome unknown" in body
    # The root's page nests both children, each in its own collapsible block.
    root = turn_page(staff_client, run.id)
    assert root.count('<details class="tk-subagent"') == 2


def make_tree() -> tuple[Turn, Turn, Turn, Turn]:
    """root → a, b; a's child a1 is created after b (creation order is not parent order)."""
    agent = services_agent()
    root = services.new_turn(agent, [TextPart("root")])
    a = services.new_turn(agent, [TextPart("a")], parent=root)
    b = services.new_turn(agent, [TextPart("b")], parent=root)
    a1 = services.new_turn(agent, [TextPart("a1")], parent=a)
    return root, a, b, a1


def services_agent() -> Agent:
    return Agent("console_plain", client=FunctionClient(lambda request: reply("ok")))


def test_the_tree_lists_turns_in_parent_order_with_links_and_statuses(staff_client):
    root, a, b, a1 = make_tree()
    body = turn_page(staff_client, b.pk)
    tree = body[body.index('id="tk-tree"'):body.index('class="module tk-stored"')]
    assert [tree.index(t.pk) for t in (root, a, a1, b)] == sorted(
        tree.index(t.pk) for t in (root, a, a1, b))
    for other in (root, a, a1):
        assert f'href="{reverse("admin:turnkit_turn_change", args=[other.pk])}"' in tree
    assert f"<b>{b.pk}</b>" in tree  # the page's own turn is marked, not linked
    assert tree.count("tk-status-pending") == 4


def test_no_boolean_icons_and_costs_in_dollars(staff_client):
    run = finished_run()
    body = turn_page(staff_client, run.id)
    assert "icon-no.svg" not in body and "icon-yes.svg" not in body
    assert "<th scope=\"row\">cost unknown</th><td>yes</td>" in body  # no rate: a word, no ✗
    execution = ToolExecution.objects.filter(turn_id=run.id).first()
    assert "icon-no.svg" not in page(staff_client, "toolexecution_change", execution.pk)


def test_the_turn_list_is_newest_first_with_position_depth_error_cost_and_seconds(staff_client):
    first = finished_run()
    second = support.prepare("Refund order 43 later.")
    services.cancel(second.id)
    body = page(staff_client, "turn_changelist")
    assert body.index(second.id) < body.index(first.id)
    for column in ("column-turn", "column-depth", "column-error_short", "column-tree_cost",
                   "column-submitted", "column-completed"):
        assert column in body
    assert "Cancelled: cancelled by the application" in body
    assert re.search(r"\d{4}-\d{2}-\d{2}<br>\d{2}:\d{2}:\d{2}", body)  # to the second
    roots = page(staff_client, "turn_changelist", position="root")
    children = page(staff_client, "turn_changelist", position="child")
    writer = first.turns().get(agent_name="console_writer")
    assert first.id in roots and writer.pk not in roots
    assert writer.pk in children and first.id not in children
    errors = page(staff_client, "turn_changelist", has_error="yes")
    assert second.id in errors and first.id not in errors


def test_tree_cost_is_the_cost_of_the_whole_tree(staff_client):
    with override_turnkit(COST_RATES=RATES):
        run = finished_run()
    body = page(staff_client, "turn_changelist", position="root")
    assert run.cost is not None
    assert f"${run.cost:.6f}".rstrip("0") in body


def test_the_conversation_page_lists_its_turns_and_totals(staff_client):
    with override_turnkit(COST_RATES=RATES):
        run = finished_run()
    body = page(staff_client, "conversation_change", run.conversation_id)
    turns = body[body.index('id="tk-turns"'):body.index('id="tk-transcript"')]
    assert run.id in turns
    facts = body[body.index('id="tk-facts"'):body.index('id="tk-turns"')]
    assert "with their sub-agents" in facts and f"${run.cost:.6f}".rstrip("0") in facts
    assert "Refund order 42" in body[body.index('id="tk-transcript"'):]


@pytest.mark.parametrize(("model", "queries"), [
    ("turn", [{"q": "console_support"}, {"status": "completed"}, {"position": "root"},
              {"has_error": "no"}, {"background": "no"}, {"agent_name": "console_writer"}]),
    ("conversation", [{"q": "console_support"}, {"child": "yes"}, {"agent_name": "x"}]),
    ("toolexecution", [{"q": "lookup_order"}, {"status": "failed"},
                       {"budget_denied__exact": "0"}]),
    ("delivery", [{"q": "key"}, {"delivered": "no"}]),
    ("wait", [{"q": "turn_"}, {"target__status": "completed"}]),
])
def test_every_model_has_filters_and_search(staff_client, model, queries):
    finished_run()
    for query in queries:
        response = staff_client.get(reverse(f"admin:turnkit_{model}_changelist"), query)
        assert response.status_code == 200
        assert "?e=1" not in response.url if hasattr(response, "url") else True
        changelist = response.context["cl"]
        assert changelist.has_filters or "q" in query


def test_names_are_translatable_and_plurals_right(staff_client):
    for model in (Conversation, Turn, ToolExecution, Delivery, Wait):
        assert isinstance(model._meta.verbose_name_plural, Promise)
    assert Delivery._meta.verbose_name_plural == "deliveries"
    index = staff_client.get(reverse("admin:app_list", args=["turnkit"])).content.decode()
    assert "Deliveries" in index and "Deliverys" not in index


def test_the_page_refuses_edits(staff_client):
    run = finished_run()
    assert staff_client.get(reverse("admin:turnkit_turn_add")).status_code == 403
    posted = staff_client.post(reverse("admin:turnkit_turn_delete", args=[run.id]),
                               {"post": "yes"})
    assert posted.status_code == 403
    assert Turn.objects.get(pk=run.id).status == "completed"


# ------------------------------------------------------------------- who may read transcripts


def test_without_view_transcript_the_transcript_principal_and_context_are_hidden():
    run = finished_run()
    execution = ToolExecution.objects.get(turn_id=run.id, tool_name="lookup_order")
    viewer = staff("view_turn", "view_conversation", "view_toolexecution")
    body = turn_page(viewer, run.id)
    assert "Refund order 42" not in body and "teapot" not in body
    assert "acme" not in body  # the principal
    assert "The transcript is hidden" in body
    assert "Hidden without the permission" in body
    assert "console_support" in body and "tk-status-completed" in body  # facts stay
    conversation = page(viewer, "conversation_change", run.conversation_id)
    assert "Refund order 42" not in conversation and "acme" not in conversation
    assert "&quot;42&quot;" not in page(viewer, "toolexecution_change", execution.pk)

    reader = staff("view_turn", "view_conversation", "view_toolexecution", "view_transcript")
    body = turn_page(reader, run.id)
    assert "Refund order 42" in body and "acme" in body
    assert "Hidden without the permission" not in body
    assert "Refund order 42" in page(reader, "conversation_change", run.conversation_id)
    assert "&quot;42&quot;" in page(reader, "toolexecution_change", execution.pk)


def test_delivery_payloads_need_view_transcript():
    agent = Agent("console_mail", client=FunctionClient(lambda request: reply("ok")))
    source, destination = agent.conversation(), agent.conversation()
    source.send_message(destination, "secret plan", key="mail-1")
    delivery = Delivery.objects.get(key="mail-1")
    assert "secret plan" not in page(staff("view_delivery"), "delivery_change", delivery.pk)
    assert "secret plan" in page(staff("view_delivery", "view_transcript"), "delivery_change",
                                 delivery.pk)


def test_steering_text_and_its_principal_need_view_transcript():
    """A steering receipt (in ``controls``) is what the turn was given: private, as the docs say."""
    agent = Agent("console_steered", client=FunctionClient(lambda request: reply("ok")))
    run = agent.prepare("Classify later")
    run.steer("Prefer the covert plan.", key="steer-1", principal={"user": "mallory-7"})
    body = turn_page(staff("view_turn"), run.id)
    assert "covert plan" not in body and "mallory-7" not in body
    assert "covert plan" in turn_page(staff("view_turn", "view_transcript"), run.id)


# --------------------------------------------------------------------------- bounded queries


def queries_for(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


@pytest.mark.parametrize("name", ["turn_changelist", "conversation_changelist",
                                  "toolexecution_changelist", "wait_changelist"])
def test_lists_cost_the_same_queries_for_more_rows(staff_client, name):
    finished_run()
    url = reverse(f"admin:turnkit_{name}")
    few = queries_for(staff_client, url)
    for _ in range(3):
        finished_run()
    assert queries_for(staff_client, url) == few


def test_the_turn_page_costs_the_same_queries_for_a_bigger_tree(staff_client):
    agent = services_agent()
    small, big = (services.new_turn(agent, [TextPart(name)]) for name in ("small", "big"))
    services.new_turn(agent, [TextPart("child")], parent=small)
    for index in range(5):
        child = services.new_turn(agent, [TextPart(f"child {index}")], parent=big)
        services.new_turn(agent, [TextPart("grandchild")], parent=child)
    small_page, big_page = (reverse("admin:turnkit_turn_change", args=[t.pk]) for t in (small, big))
    queries_for(staff_client, small_page)  # warm the per-process caches (content types ...)
    assert queries_for(staff_client, big_page) == queries_for(staff_client, small_page)


def test_a_turn_cancelled_before_it_ran_has_no_duration(staff_client):
    """A turn cancelled while pending showed "took 1.76 s" (created to cancelled) in the list,
    on its page, in the transcript tree and as duration_seconds; it never ran: no duration."""
    run = support.prepare("Refund order 43 later.")
    services.cancel(run.id)
    turn = Turn.objects.get(pk=run.id)
    assert turn.started_at is None and turn.completed_at is not None
    Turn.objects.filter(pk=turn.pk).update(created_at=turn.completed_at - timedelta(seconds=90))
    turn.refresh_from_db()
    listing = page(staff_client, "turn_changelist")
    row = listing[listing.index(run.id):]
    row = row[:row.index("</tr>")]
    assert "never ran" in row and "took" not in row
    facts = turn_page(staff_client, run.id)
    facts = facts[facts.index('id="tk-facts"'):facts.index('id="tk-transcript"')]
    assert "never ran" in facts and "took" not in facts
    tree = turn_page(staff_client, run.id)
    tree = tree[tree.index('id="tk-tree"'):tree.index('class="module tk-stored"')]
    conversation = page(staff_client, "conversation_change", turn.conversation_id)
    for table in (tree, conversation[conversation.index(run.id):]):
        assert "never ran" in table and "90.00 s" not in table
    assert turn_summary(turn)["duration_seconds"] is None
    (line,) = tree_lines(load_tree(turn))
    assert not re.search(r"\d\.\d\ds$", line), line
