"""Maintenance re-rings lost doorbells, but only for turns that can be claimed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.dispatch import clear, recorded
from turnkit_django import Agent, drain
from turnkit_django.models import Turn

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


def quiet(*turn_ids: str) -> None:
    Turn.objects.filter(pk__in=turn_ids).update(updated_at=timezone.now() - timedelta(hours=1))


def test_only_the_head_of_each_lane_is_rung_again(registered, django_capture_on_commit_callbacks):
    agent = registered(Agent("drain_probe"))
    conversation = agent.conversation()
    first, second, third = (conversation.ask(f"q{i}", submit=True) for i in range(3))
    other = agent.submit("elsewhere")
    quiet(first.id, second.id, third.id, other.id)
    clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert sorted(drain()) == sorted([first.id, other.id])
    assert sorted(recorded()) == sorted([first.id, other.id])
    # Touched turns rotate behind the others; the lane stays blocked until its head finishes.
    clear()
    assert drain() == []
    Turn.objects.filter(pk=first.id).update(status="running")
    quiet(second.id, third.id)
    assert drain() == []  # the head is running: nothing behind it can be claimed
