"""``input_status`` of a key no input has raises InputNotFound, still a LookupError."""

from __future__ import annotations

import pytest

from turnkit_django import Agent, InputNotFound, NotFound, TurnkitError
from turnkit_django.testing import ScriptedClient, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]


def test_an_unknown_input_key_raises_input_not_found_naming_the_key_and_what_to_pass():
    conv = Agent("quiet", client=ScriptedClient([reply("ok")] * 2)).conversation()
    conv.ask("hello", key="req-1")
    with pytest.raises(InputNotFound) as raised:
        conv.input_status("unknown-key")
    error = raised.value
    assert isinstance(error, LookupError)  # what input_status raised before
    assert isinstance(error, NotFound) and isinstance(error, TurnkitError)
    assert (error.key, error.conversation_id) == ("unknown-key", conv.id)
    assert "'unknown-key'" in str(error) and "post(key=...) or ask(key=...)" in str(error)
    assert conv.input_status("req-1").status == "applied"  # a known key still answers
