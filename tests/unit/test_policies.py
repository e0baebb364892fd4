"""Output policies: checks, judged policy files, fail and report modes, bounded revisions."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from tests.helpers import crash_and_resume
from turnkit_django import Agent, ConfigurationError, Skill, check_output_policy, tool
from turnkit_django.agents.policies import Violation
from turnkit_django.models import Message, Turn
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = pytest.mark.django_db

EXAMPLE_POLICY = Path(__file__).resolve().parents[2] / "example_project" / "policies"
ONE_TOKEN = {"input_tokens": 1, "output_tokens": 1}
RATES = {"scripted": {"input": "1000000", "output": "1000000", "cache_read": "0",
                      "cache_write": "0"}}  # one dollar a token


def no_em_dash(output: Any) -> dict[str, str] | None:
    if "\u2014" in str(output):
        return {"rule": "no_em_dash", "message": "contains an em dash"}
    return None


class MaxWords:
    name = "max_words"

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def check(self, output: Any, output_text: str = "") -> str | None:
        words = len(output_text.split())
        return f"{words} words, more than {self.limit}" if words > self.limit else None


@pytest.fixture
def memo_policy(tmp_path: Path) -> Path:
    path = tmp_path / "memo.md"
    path.write_text("Memos must name an owner.", encoding="utf-8")
    return path


def revision_messages(turn_id: str) -> list[Message]:
    return [m for m in Message.objects.filter(turn_id=turn_id).order_by("sequence")
            if m.metadata.get("source") == "output_policy"]


# --------------------------------------------------------------------------- without a model


def test_check_output_policy_normalises_every_kind_of_result() -> None:
    def says_false(output: Any) -> bool:
        return False

    def many(output: Any, *, output_data: Any, turn: Any) -> list[Any]:
        assert output_data == {"x": 1} and turn is None
        return ["first", Violation("custom", "second")]

    clean = check_output_policy("plain text", constraints=[no_em_dash, MaxWords(5),
                                                           lambda o: True])
    assert clean.clean and clean.violations == ()
    assert clean.policies == ("no_em_dash", "max_words", "<lambda>")

    audit = check_output_policy("a \u2014 b c d e f", constraints=[no_em_dash, MaxWords(5)])
    assert [(v.rule, v.policy) for v in audit.violations] == [
        ("no_em_dash", "no_em_dash"), ("max_words", "max_words")]
    assert audit.violations[1].message == "7 words, more than 5"

    data = check_output_policy({"x": 1}, constraints=[says_false, many])
    assert [(v.rule, v.message, v.policy) for v in data.violations] == [
        ("says_false", "the output does not satisfy this policy", "says_false"),
        ("many", "first", "many"),
        ("custom", "second", "many"),
    ]


def test_a_policy_that_raises_is_a_violation_not_a_crash() -> None:
    def broken(output: Any) -> None:
        raise RuntimeError("boom")

    audit = check_output_policy("x", constraints=broken)
    assert audit.violations[0].message == "the policy raised RuntimeError: boom"


def test_policy_files_need_a_client_and_are_judged_by_it(memo_policy: Path) -> None:
    with pytest.raises(ConfigurationError, match="pass client="):
        check_output_policy("memo", constraints=[str(memo_policy)])
    client = ScriptedClient([
        reply(data={"approved": False,
                    "violations": [{"rule": "owner", "message": "no owner named"}]}),
        reply('Verdict:\n```json\n{"approved": true, "violations": []}\n```'),
        reply("I think it is fine."),
    ])
    rejected = check_output_policy("memo", constraints=[memo_policy], client=client)
    assert [(v.rule, v.message, v.policy) for v in rejected.violations] == [
        ("owner", "no owner named", "memo")]
    request = client.requests[0]
    assert request.metadata["purpose"] == "output_policy"
    assert "Memos must name an owner." in request.messages[0].text
    assert request.output_schema is not None
    assert check_output_policy("memo", constraints=[memo_policy], client=client).clean
    garbage = check_output_policy("memo", constraints=[memo_policy], client=client)
    assert garbage.violations[0].message == "the policy judge did not return a valid verdict"


@pytest.mark.parametrize(("options", "message"), [
    ({"output_policy": "policies/memo.py"}, "not a policy file"),
    ({"output_policy": "missing.md"}, "cannot read policy file"),
    ({"output_policy": [42]}, "is not a callable"),
    ({"output_policy_mode": "warn"}, "output_policy_mode must be 'fail' or 'report'"),
    ({"output_retries": -1}, "output_retries must be a non-negative integer"),
])
def test_policy_options_are_validated_at_construction(options: dict[str, Any],
                                                      message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Agent("memo", **options)


def test_example_project_policy_file_is_usable() -> None:
    files = sorted(EXAMPLE_POLICY.glob("*.md"))
    assert files
    Agent("noted", output_policy=[str(f) for f in files])


# --------------------------------------------------------------------------- in a turn


def test_fail_mode_fails_the_turn_with_the_audit_and_the_output() -> None:
    client = ScriptedClient([reply("Plan \u2014 ship it.")])
    run = Agent("memo", output_policy=no_em_dash, client=client).run("Write")
    assert run.status == "failed"
    assert run.error is not None and run.error["type"] == "OutputPolicyViolation"
    assert "no_em_dash: contains an em dash" in run.error["message"]
    assert run.output_text == "Plan \u2014 ship it."
    assert run.audit is not None and not run.audit.clean
    assert run.audit.mode == "fail"
    assert run.error["audit"] == Turn.objects.get(pk=run.id).audit


def test_report_mode_completes_with_the_audit_stored() -> None:
    client = ScriptedClient([reply("Plan \u2014 ship it.")])
    run = Agent("memo", output_policy=[no_em_dash, MaxWords(100)], output_policy_mode="report",
                client=client).run("Write")
    assert run.status == "completed", run.error
    audit = run.refresh().audit
    assert audit is not None and audit.mode == "report"
    assert [v.rule for v in audit.violations] == ["no_em_dash"]
    assert audit.policies == ("no_em_dash", "max_words")


def test_clean_output_publishes_with_a_clean_audit() -> None:
    run = Agent("memo", output_policy=no_em_dash,
                client=ScriptedClient([reply("Plan: ship it.")])).run("Write")
    assert run.status == "completed"
    assert run.audit is not None and run.audit.clean
    plain = Agent("plain", client=ScriptedClient([reply("x")])).run("Write")
    assert plain.audit is None


def test_revision_loop_fixes_the_output_within_the_bound(valid_transcript: Any) -> None:
    client = ScriptedClient([reply("Plan \u2014 ship it."), reply("Plan: ship it.")])
    run = Agent("memo", output_policy=no_em_dash, output_retries=2, client=client).run("Write")
    assert run.status == "completed", run.error
    assert run.output_text == "Plan: ship it."
    (revision,) = revision_messages(run.id)
    assert revision.role == "user" and revision.metadata["attempt"] == 1
    text = revision.content[0]["text"]
    assert "revision 1 of 2" in text and "1. [no_em_dash] contains an em dash" in text
    assert client.requests[1].last_message_is_user()
    audit = run.refresh().audit
    assert audit is not None and audit.clean and audit.revisions == 1
    assert [a.violations[0].rule for a in audit.history] == ["no_em_dash"]
    assert Turn.objects.get(pk=run.id).state["revisions"] == 1
    valid_transcript(run.conversation_id)


def test_revisions_and_the_verdict_are_announced(django_capture_on_commit_callbacks) -> None:
    client = ScriptedClient([reply("Plan \u2014 ship it."), reply("Plan: ship it.")])
    events: list[Any] = []
    with django_capture_on_commit_callbacks(execute=True):
        Agent("memo", output_policy=no_em_dash, output_retries=2, client=client).run(
            "Write", on_event=events.append)
    assert [(e.type, e.payload) for e in events if e.type.startswith("output_policy.")] == [
        ("output_policy.revision", {"violation_count": 1, "attempt": 1}),
        ("output_policy.completed", {"clean": True, "violation_count": 0})]


def test_revisions_stop_at_output_retries_then_fail() -> None:
    client = ScriptedClient([reply("a \u2014 1"), reply("a \u2014 2"), reply("unused")])
    run = Agent("memo", output_policy=no_em_dash, output_retries=1, client=client).run("Write")
    assert run.status == "failed"
    assert len(client.requests) == 2 and client.remaining == 1
    assert len(revision_messages(run.id)) == 1
    assert run.audit is not None and run.audit.revisions == 1


def test_revision_after_a_terminal_tool_asks_to_resubmit_through_it() -> None:
    @tool(terminal=True)
    def submit_memo(text: str) -> str:
        """Submit the memo; ends the turn."""
        return text

    client = ScriptedClient([
        call("submit_memo", text="Plan \u2014 ship."),
        call("submit_memo", text="Plan: ship."),
    ])
    run = Agent("memo", tools=[submit_memo], output_policy=no_em_dash, output_retries=1,
                client=client).run("Write")
    assert run.status == "completed", run.error
    assert run.output_text == "Plan: ship."
    assert "Resubmit via submit_memo." in revision_messages(run.id)[0].content[0]["text"]
    assert [e.status for e in run.tool_executions()] == ["completed", "completed"]


def test_judged_policy_is_charged_to_the_turn_and_the_root(memo_policy: Path) -> None:
    client = ScriptedClient([
        reply("Memo without owner.", usage=ONE_TOKEN),
        reply(data={"approved": False, "violations": [{"rule": "owner", "message": "none"}]},
              usage=ONE_TOKEN),
        reply("Memo owned by Ada.", usage=ONE_TOKEN),
        reply(data={"approved": True, "violations": []}, usage=ONE_TOKEN),
    ])
    skill_policy = Skill(key="tone", content="Be polite.")
    with override_settings(TURNKIT={**settings.TURNKIT, "COST_RATES": RATES}):
        run = Agent("memo", output_policy=[memo_policy], output_retries=1,
                    client=client).run("Write")
        assert run.status == "completed", run.error
        row = Turn.objects.get(pk=run.id)
        assert row.usage["input_tokens"] == 4 and row.usage["output_tokens"] == 4
        assert row.cost == Decimal(8) and row.tree_spend == Decimal(8)
        assert row.tree_iterations == 2  # judge calls reserve no iteration
        assert "Memos must name an owner." in revision_messages(run.id)[0].content[0]["text"]
        assert [r.metadata.get("purpose") for r in client.requests] == [
            None, "output_policy", None, "output_policy"]
        skill_judged = Agent("tone", output_policy=skill_policy, client=ScriptedClient([
            reply("Hi."), reply(data={"approved": True, "violations": []})])).run("Greet")
        assert skill_judged.status == "completed"


def test_crash_after_revision_message_resumes_without_a_second_one(
    registered: Any, background: None
) -> None:
    client = ScriptedClient([reply("a \u2014 1"), reply("a \u2014 2"), reply("unused")])
    agent = registered(Agent("memo", output_policy=no_em_dash, output_retries=1,
                             client=client))
    run = agent.prepare("Write").submit()
    crash_and_resume(run.id, "after_revision_commit")
    run.refresh()
    assert run.status == "failed"
    assert len(revision_messages(run.id)) == 1
    assert len(client.requests) == 2  # the first answer was never requested again
    row = Turn.objects.get(pk=run.id)
    assert row.state["revisions"] == 1 and row.audit["revisions"] == 1


def test_crash_after_a_verdict_does_not_pay_for_it_twice(
    memo_policy: Path, registered: Any, background: None
) -> None:
    client = ScriptedClient([reply("Memo by Ada."), reply(data={"approved": True,
                                                                "violations": []})])
    agent = registered(Agent("memo", output_policy=memo_policy, client=client))
    run = agent.prepare("Write").submit()
    crash_and_resume(run.id, "before_publish")
    assert run.refresh().status == "completed"
    assert len(client.requests) == 2
    assert run.audit is not None and run.audit.clean
