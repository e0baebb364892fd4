"""``TurnState``'s storage boundary: rows written by the codec before it became one pydantic
``TypeAdapter`` load unchanged and are written back with the same keys and value shapes."""

from __future__ import annotations

import pytest

from turnkit_django.base.states import Phase
from turnkit_django.store.turn_state import (
    GRANTED,
    Candidate,
    MediaCall,
    Reservation,
    Terminal,
    TurnState,
)

# Written by the hand-written codec (``TurnState.as_json``) before the change, key order kept.
FULL = {
    "phase": "tools",
    "reservation": {"reason": "spend", "limit": "max_cost"},
    "iterations": 3,
    "tool_executions": 2,
    "tool_counts": {"search": 2},
    "candidate": {"text": "draft", "data": {"a": [1, 2.5, None]}},
    "response_message_id": "msg_1",
    "terminal": {"tool": "finish", "call_id": "call_9", "text": "done", "data": None},
    "revisions": 1,
    "audits": [{"policy": "p", "violations": [{"code": "x"}]}],
    "judged": {"k": [{"verdict": "ok"}]},
    "joined_message_id": "msg_2",
    "media": {
        "turnkit:t:paint": {"op": "paint", "status": "completed", "attempts": 2,
                            "at": "2024-01-01T00:00:00Z", "message_id": "msg_3"},
        "turnkit:t:view": {"op": "view_media", "status": "failed", "attempts": 1, "at": "",
                           "error": {"type": "x", "message": "boom"}},
    },
    "budget_completion_call_id": "call_5",
    "output_metadata": {"score": 0.5},
    "evaluations": {"r1": {"answers": {"q": True}}},
    "listed_tools": {"mcp": {"tools": ["a", "b"]}},
}
FULL_STATE = TurnState(
    phase=Phase.TOOLS, reservation=Reservation(False, "spend", "max_cost"), iterations=3,
    tool_executions=2, tool_counts={"search": 2},
    candidate=Candidate("draft", {"a": [1, 2.5, None]}), response_message_id="msg_1",
    terminal=Terminal("finish", "call_9", "done", None), revisions=1,
    audits=({"policy": "p", "violations": [{"code": "x"}]},), judged={"k": ({"verdict": "ok"},)},
    joined_message_id="msg_2",
    media={"turnkit:t:paint": MediaCall("paint", "completed", 2, "2024-01-01T00:00:00Z", "msg_3"),
           "turnkit:t:view": MediaCall("view_media", "failed", 1, "", None,
                                       {"type": "x", "message": "boom"})},
    budget_completion_call_id="call_5", output_metadata={"score": 0.5},
    evaluations={"r1": {"answers": {"q": True}}}, listed_tools={"mcp": {"tools": ["a", "b"]}},
)
TYPICAL = {"phase": "tools", "reservation": "granted", "iterations": 2,
           "candidate": {"text": "hello", "data": None}, "response_message_id": "msg_1"}
EMPTY_PARTS = {"phase": "model", "candidate": {"text": "", "data": None},
               "terminal": {"tool": "t", "call_id": "", "text": "", "data": None}}


@pytest.mark.parametrize("stored", [FULL, TYPICAL, {"phase": "model"}, EMPTY_PARTS],
                         ids=["full", "typical", "minimal", "empty-parts"])
def test_a_stored_state_loads_and_is_written_back_exactly(stored):
    written = TurnState.from_json(stored).as_json()
    assert written == stored
    assert list(written) == list(stored)


def test_every_field_loads_to_the_state_that_wrote_it():
    assert TurnState.from_json(FULL) == FULL_STATE
    assert FULL_STATE.as_json() == FULL
    assert TurnState.from_json(TYPICAL) == TurnState(
        phase=Phase.TOOLS, reservation=GRANTED, iterations=2, candidate=Candidate("hello"),
        response_message_id="msg_1")


@pytest.mark.parametrize("stored", [None, {}])
def test_a_row_without_state_is_a_fresh_model_phase(stored):
    assert TurnState.from_json(stored) == TurnState()
    assert TurnState().as_json() == {"phase": "model"}


def test_older_rows_with_keys_missing_load_with_their_defaults():
    state = TurnState.from_json({
        "candidate": {}, "terminal": {"tool": "finish"},
        "media": {"k": {"op": "paint", "status": "requested"}},
    })
    assert state.phase == Phase.MODEL
    assert state.candidate == Candidate("", None)
    assert state.terminal == Terminal("finish", "", "", None)
    assert state.media == {"k": MediaCall("paint", "requested", 1, "", None, None)}
    assert state.as_json()["media"] == {"k": {"op": "paint", "status": "requested",
                                              "attempts": 1, "at": ""}}


@pytest.mark.parametrize(("stored", "message"), [
    ({"phase": "thinking"}, "phase"),
    ({"reservation": 7}, "a stored reservation is 'granted' or an object"),
    ({"reservation": {"reason": "spend"}}, "limit"),
    ({"iterations": "many"}, "iterations"),
    ({"terminal": {"call_id": "c"}}, "tool"),
    ({"media": {"k": {"status": "requested"}}}, "op"),
])
def test_invalid_stored_state_raises_a_value_error_naming_the_field(stored, message):
    with pytest.raises(ValueError, match=message):
        TurnState.from_json(stored)
