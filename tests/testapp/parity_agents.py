"""Agents of the TurnKit-parity scenarios on real workers (issue 16), registered in every process.

They answer from a script in their input, like the orchestration agents
(:mod:`tests.testapp.tree_agents`).

* ``e2e_pages_lead`` reads pages through a typed sub-agent tool, ``read_page(page)``: the task
  the application builds carries the page's text, which the lead's model never sees. Its tool
  policy blocks page 13.
* ``e2e_saver`` runs on ``e2e-priced`` ($1 an input token, see ``E2E_TURNKIT``) with a $2 spend
  limit; ``check_draft`` evaluates a draft (a structured evaluation), and its final save
  (``save_draft``, a budget completion) applies its effect (keyed) and may wait at a gate.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from turnkit_django import Agent, SubAgentTool, ToolCall, ToolContext, YesNo, register, tool
from turnkit_django.clients import EvaluationRequest, EvaluatorReply, ModelRequest, Usage
from turnkit_django.testing import Entry, FunctionClient, reply

from .ledger import gate, record
from .tree_agents import respond

PRICED = "e2e-priced"
JUDGE = "e2e-judge"


def page_text(page: int) -> str:
    return f"PAGE-{page} " + "lorem ipsum " * 50


def summarise(request: ModelRequest) -> Entry:
    record("model", turn=request.metadata.get("turn_id"), step=0)
    return reply(f"summary of {len(request.messages[0].text)} chars")


class PageArgs(BaseModel):
    page: int


def page_task(args: PageArgs) -> str:
    return f"Summarise this page:\n\n{page_text(args.page)}"


def no_page_13(call: ToolCall) -> Any:
    if call.name == "read_page" and call.args.page == 13:  # type: ignore[attr-defined]
        return ("block", "page 13 is confidential")
    return "allow"


page_reader = Agent("e2e_page_reader", description="Summarises one page.",
                    client=FunctionClient(summarise))
pages_lead = register(Agent(
    "e2e_pages_lead", instructions="Follow the script.", tool_policy=no_page_13,
    tools=[SubAgentTool(page_reader, name="read_page", args=PageArgs, task=page_task)],
    client=FunctionClient(respond)))


class LedgerEvaluator:
    """Answers every evaluation the same way and writes each request to the ledger."""

    identity = "e2e-ledger-evaluator"

    def evaluate(self, request: EvaluationRequest) -> EvaluatorReply:
        record("evaluation", purpose=request.purpose, receipt=request.metadata["receipt_id"],
               turn=request.metadata["turn_id"])
        return EvaluatorReply({"final": {"probability": 0.8}}, Usage(100, 10), JUDGE, 200)


evaluator = LedgerEvaluator()


@tool(recovery="replay_safe")
def check_draft(ctx: ToolContext, text: str) -> dict:
    """Check the draft with a structured evaluation."""
    verdict = ctx.turn.internal_evaluation(
        evaluator=evaluator, model=JUDGE, purpose="final_check", candidate=text,
        questions=[YesNo("final", "Is this a finished draft?")])
    return {"final": verdict["final"].probability}


@tool(terminal=True, recovery="replay_safe", budget_completion=True)
def save_draft(ctx: ToolContext, text: str, hold: str = "") -> dict:
    """Save the draft (keyed) and end the turn; may wait at gate ``hold``."""
    record("saved", key=ctx.idempotency_key, turn=ctx.turn.id, text=text)
    gate(hold, turn=ctx.turn.id, call=ctx.tool_call_id)
    return {"saved": text}


@tool
def note(ctx: ToolContext, text: str) -> str:
    """Take a note."""
    record("noted", key=ctx.idempotency_key, turn=ctx.turn.id, text=text)
    return "noted"


saver = register(Agent("e2e_saver", instructions="Follow the script.", model=PRICED,
                       max_spend=2, tools=[check_draft, save_draft, note],
                       client=FunctionClient(respond)))
