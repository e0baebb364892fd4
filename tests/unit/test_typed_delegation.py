"""Typed sub-agent tools (issue 16; TurnKit 0.8.0 ``SubAgentTool``): a sub-agent exposed with its
own argument model, its task built from the validated arguments in application code.

The parent model sends only the small arguments (a path); the child's task carries what the
application adds (the file's contents), so bulk data never enters the parent's context. Inline
runs delegate at once; background turns fan out through the same tool (see
tests/integration/test_parity_background.py for PostgreSQL and tests/e2e for real workers).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from tests.orchestration import fan_out_and_join
from turnkit_django import Agent, ConfigurationError, SubAgentTool, register
from turnkit_django.agents.registry import get_agent, unregister
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.messages import ToolResultPart, load_parts
from turnkit_django.models import Turn
from turnkit_django.testing import Entry, FunctionClient, ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]

FILES = {"big.py": "x = 1\n" * 500, "small.py": "y = 2\n"}


class ReviewArgs(BaseModel):
    path: str = Field(description="The file to review.")
    focus: str = "bugs"


def reviewer(seen: list[str]) -> Agent:
    def respond(request: ModelRequest) -> Entry:
        seen.append(request.messages[0].text)
        return reply(f"reviewed {len(request.messages[0].text)} chars")

    return Agent("reviewer", description="Reviews one file.", client=FunctionClient(respond))


def with_contents(args: ReviewArgs) -> str:
    return f"Review this file for {args.focus}:\n\n{FILES[args.path]}"


def lead(tool: SubAgentTool, script: list[Any]) -> Agent:
    return Agent("lead", tools=[tool], client=ScriptedClient(script))


def test_the_child_gets_the_task_built_from_the_arguments_and_the_parent_never_sees_it(
        django_capture_on_commit_callbacks):
    seen: list[str] = []
    tool = SubAgentTool(reviewer(seen), name="review_file", args=ReviewArgs, task=with_contents)
    client = ScriptedClient([call("review_file", path="big.py", focus="style"), reply("done")])
    events: list[Any] = []

    with django_capture_on_commit_callbacks(execute=True):
        run = Agent("lead", tools=[tool], client=client).run("Review big.py",
                                                              on_event=events.append)

    assert run.status == "completed", run.error
    assert seen == [with_contents(ReviewArgs(path="big.py", focus="style"))]
    # The model was offered the typed arguments, not a `task` string.
    spec = next(t for t in client.requests[0].tools if t.name == "review_file")
    assert set(spec.parameters["properties"]) == {"path", "focus"}
    # The parent's context holds the small arguments and the child's short answer only.
    assert all("x = 1" not in m.text for r in client.requests for m in r.messages)
    (result,) = client.requests[1].messages[-1].tool_results
    assert result.content["output_text"] == f"reviewed {len(seen[0])} chars"
    (delegated,) = [e for e in events if e.type == "sub_agent.delegated"]
    child = Turn.objects.get(parent_turn_id=run.id)
    assert delegated.payload == {"id": client.requests[1].messages[-2].tool_calls[0].id,
                                 "name": "review_file", "agent": "reviewer",
                                 "child_turn_id": child.pk,
                                 "child_conversation_id": child.conversation_id,
                                 "task_chars": len(seen[0])}


def test_a_template_builds_the_task_from_the_arguments():
    seen: list[str] = []
    tool = SubAgentTool(reviewer(seen), name="review_file", args=ReviewArgs,
                        task="Review {path}, looking for {focus}.")
    run = lead(tool, [call("review_file", path="small.py"), reply("done")]).run("go")

    assert run.status == "completed", run.error
    assert seen == ["Review small.py, looking for bugs."]


def test_a_subclass_sets_the_agent_and_overrides_task_for():
    seen: list[str] = []

    class Review(SubAgentTool):
        name = "review"
        description = "Have a file reviewed."
        agent = reviewer(seen)
        Args = ReviewArgs

        def task_for(self, args: BaseModel) -> str:
            return f"{args.path}: {FILES[args.path]}"  # type: ignore[attr-defined]

    run = lead(Review(), [call("review", path="small.py"), reply("done")]).run("go")

    assert run.status == "completed", run.error
    assert seen == ["small.py: y = 2\n"]
    assert Review().tool_description == "Have a file reviewed."


def test_invalid_arguments_never_reach_the_task_builder():
    built: list[Any] = []
    tool = SubAgentTool(reviewer([]), name="review_file", args=ReviewArgs,
                        task=lambda args: built.append(args) or "x")
    client = ScriptedClient([call("review_file", file="big.py"), reply("done")])
    run = Agent("lead", tools=[tool], client=client).run("go")

    assert run.status == "completed", run.error
    (result,) = client.requests[1].messages[-1].tool_results
    assert result.is_error and result.content["error"] == "invalid_arguments"
    assert built == [] and not Turn.objects.filter(parent_turn_id=run.id).exists()


@pytest.mark.parametrize(("builder", "code"), [
    (lambda args: 42, "invalid_task"),
    (lambda args: "   ", "invalid_task"),
    (lambda args: FILES["missing.py"], "KeyError"),
])
def test_a_task_builder_that_fails_is_a_failed_result_and_no_child(builder, code):
    tool = SubAgentTool(reviewer([]), name="review_file", args=ReviewArgs, task=builder)
    client = ScriptedClient([call("review_file", path="big.py"), reply("done")])
    run = Agent("lead", tools=[tool], client=client).run("go")

    assert run.status == "completed", run.error
    (result,) = client.requests[1].messages[-1].tool_results
    assert result.is_error and result.content["error"] == code
    assert not Turn.objects.filter(parent_turn_id=run.id).exists()


def test_a_typed_tool_needs_a_way_to_build_the_task():
    with pytest.raises(ConfigurationError, match="no way to build the child's task"):
        Agent("lead", tools=[SubAgentTool(reviewer([]), name="review_file", args=ReviewArgs)])
    with pytest.raises(ConfigurationError, match=r"names \['file'\]"):
        Agent("lead", tools=[SubAgentTool(reviewer([]), name="review_file", args=ReviewArgs,
                                          task="Review {file}")])
    with pytest.raises(ConfigurationError, match="needs the agent it delegates to"):
        SubAgentTool(None)
    with pytest.raises(ConfigurationError, match="sub_agents takes agents"):
        Agent("lead", sub_agents=[SubAgentTool(reviewer([]))])  # type: ignore[list-item]


def test_registering_the_parent_registers_the_agent_of_a_typed_tool():
    child = reviewer([])
    parent = Agent("lead_registers", tools=[SubAgentTool(child, name="review_file",
                                                         args=ReviewArgs, task=with_contents)])
    try:
        register(parent)
        assert get_agent("reviewer") is child
    finally:
        unregister("lead_registers")
        unregister("reviewer")


@pytest.mark.usefixtures("background")
def test_a_background_turn_fans_typed_delegations_out_and_joins_them_in_call_order(
        registered, django_capture_on_commit_callbacks):
    seen: list[str] = []
    tool = SubAgentTool(reviewer(seen), name="review_file", args=ReviewArgs, task=with_contents)

    def respond(request: ModelRequest) -> Entry:
        if request.last_message_is_tool_result():
            return reply("joined")
        return [call("review_file", path="small.py"), call("review_file", path="big.py")]

    agent = registered(Agent("lead_bg", tools=[tool], client=FunctionClient(respond)))
    run = agent.submit("Review both")

    children = fan_out_and_join(run.id, django_capture_on_commit_callbacks)
    assert [c.agent_name for c in children] == ["reviewer", "reviewer"]

    run.refresh()
    assert run.status == "completed", run.error
    assert sorted(seen) == sorted([with_contents(ReviewArgs(path="small.py")),
                                   with_contents(ReviewArgs(path="big.py"))])
    results = [part.content["turn_id"] for m in run.messages().filter(role="tool")
               for part in load_parts(m.content) if isinstance(part, ToolResultPart)]
    assert results == [c.pk for c in children]
