"""LangGraph for ``make bench-peers``: workload T as a graph checkpointed by ``PostgresSaver``.

A ReAct-shaped graph of a ``model`` node (an instant fake: a tool call until two tool results
are in, then the answer) and a ``tools`` node; each node run is a super-step whose checkpoint is
written before the next one starts (``durability="sync"``). Runs in .venv-peers only.

No ``from __future__ import annotations`` here: LangGraph reads the nodes' type hints at run time.
"""

import json
import uuid
from importlib.metadata import version
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph

from bench import pgstats
from bench.floor import STEPS_PER_TURN
from bench.peer_runner import System

TOOL_CALLS = STEPS_PER_TURN // 2


def model(state: MessagesState) -> dict[str, Any]:
    done = sum(1 for m in state["messages"] if isinstance(m, ToolMessage))
    if done < TOOL_CALLS:
        call = {"name": "probe", "args": {"n": done}, "id": f"call_{uuid.uuid4().hex}"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}
    return {"messages": [AIMessage(content="done")]}


def tools(state: MessagesState) -> dict[str, Any]:
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    return {"messages": [ToolMessage(content=json.dumps({"n": call["args"]["n"]}),
                                     tool_call_id=call["id"]) for call in last.tool_calls]}


def route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


class LangGraph(System):
    def __init__(self, url: str) -> None:
        self._saver_context = PostgresSaver.from_conn_string(url)
        self.saver = self._saver_context.__enter__()
        self.saver.setup()
        graph = StateGraph(MessagesState)
        graph.add_node("model", model)
        graph.add_node("tools", tools)
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", route, ["tools", END])
        graph.add_edge("tools", "model")
        self.graph = graph.compile(checkpointer=self.saver)

    def turn(self) -> None:
        config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
        out = self.graph.invoke({"messages": [HumanMessage("bench")]}, config,
                                durability="sync")
        assert out["messages"][-1].content == "done", out

    def flush(self) -> int:
        return pgstats.flush(self.saver.conn)

    def info(self) -> dict[str, str]:
        return {name: version(name) for name in
                ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres",
                 "langchain-core", "psycopg")}
