"""Every status change of a turn is a named transition, checked by compare-and-set."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.forms.models import model_to_dict

from turnkit_django import Agent, InvalidTransition
from turnkit_django.base.states import ACTIVE_TURN_STATUSES, TRANSITIONS, TurnStatus
from turnkit_django.models import Turn
from turnkit_django.store import apply_transition

pytestmark = pytest.mark.django_db

PACKAGE = Path(__file__).resolve().parents[2] / "turnkit_django"


def a_turn(status: str) -> Turn:
    run = Agent("mover").prepare("go")
    Turn.objects.filter(pk=run.id).update(status=status)
    return Turn.objects.get(pk=run.id)


@pytest.mark.corrupts_data  # turns are forced into statuses their fields do not match
@pytest.mark.parametrize("name", sorted(TRANSITIONS))
def test_a_transition_from_a_status_it_does_not_start_from_raises_and_writes_nothing(name):
    transition = TRANSITIONS[name]
    for status in sorted(set(TurnStatus) - transition.sources):
        turn = a_turn(status)
        before = model_to_dict(turn)
        with pytest.raises(InvalidTransition) as raised:
            apply_transition(turn.pk, name, claimed_by="intruder", output_text="changed")
        assert raised.value.status == status and raised.value.operation == name
        turn.refresh_from_db()
        assert model_to_dict(turn) == before


@pytest.mark.corrupts_data
@pytest.mark.parametrize("name", sorted(TRANSITIONS))
def test_a_transition_from_each_of_its_sources_moves_the_turn(name):
    transition = TRANSITIONS[name]
    for status in sorted(transition.sources):
        turn = a_turn(status)
        apply_transition(turn.pk, name, claimed_by="mover")
        turn.refresh_from_db()
        assert (turn.status, turn.claimed_by) == (transition.target, "mover")


@pytest.mark.corrupts_data
def test_a_transition_with_an_expected_fence_refuses_another_fence():
    turn = a_turn(TurnStatus.RUNNING)
    with pytest.raises(InvalidTransition):
        apply_transition(turn.pk, "requeue", expected_fence=turn.fence + 1)
    assert Turn.objects.get(pk=turn.pk).status == TurnStatus.RUNNING


def test_terminal_statuses_have_no_way_out_and_cancel_reaches_every_active_one():
    sources = {status for t in TRANSITIONS.values() for status in t.sources}
    assert sources <= ACTIVE_TURN_STATUSES
    assert TRANSITIONS["cancel"].sources == ACTIVE_TURN_STATUSES


def _status_writes(tree: ast.Module) -> list[str]:
    """``Turn...update(status=...)`` calls, by enclosing function."""
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("update", "create") \
                    and any(k.arg == "status" for k in node.keywords):
                root = node.func
                while isinstance(root, ast.Attribute | ast.Call):
                    root = root.func if isinstance(root, ast.Call) else root.value
                if isinstance(root, ast.Name) and root.id in ("Turn", "rows"):
                    found.append(function.name)
    return found


def test_only_apply_transition_writes_a_turn_status():
    writers = {path.relative_to(PACKAGE).as_posix(): names
               for path in PACKAGE.rglob("*.py") if "migrations" not in path.parts
               if (names := _status_writes(ast.parse(path.read_text(encoding="utf-8"))))}
    assert writers == {"store/turns.py": ["apply_transition"]}
