"""The migrations describe the models: a model change without its migration fails here."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from turnkit_django.messages import DYNAMIC_CONTEXT, MEDIA_KINDS, MessageKind
from turnkit_django.models import Message


@pytest.mark.django_db
def test_makemigrations_finds_nothing_to_do():
    call_command("makemigrations", "turnkit", "--check", "--dry-run", verbosity=0)


def test_every_kind_the_runtime_writes_is_a_choice_of_the_field():
    choices = {value for value, _ in Message._meta.get_field("kind").choices}
    assert choices == set(MessageKind.values)
    assert {DYNAMIC_CONTEXT, *MEDIA_KINDS} <= choices
