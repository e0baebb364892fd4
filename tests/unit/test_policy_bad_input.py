"""Bad input to output policies: a policy of the wrong shape (a class, a callable that cannot
take the output) and an unreadable policy file raise ``ConfigurationError`` when the agent is
built; a policy that returns something unusable is a violation, never a crashed turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from turnkit_django import Agent, ConfigurationError, check_output_policy
from turnkit_django.testing import ScriptedClient, reply


class MaxWords:
    name = "max_words"

    def check(self, output: object, output_text: str = "") -> str | None:
        return "too long" if len(output_text.split()) > 3 else None


def test_a_policy_class_instead_of_an_instance_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"MaxWords is a class; pass an instance"):
        Agent("memo", output_policy=[MaxWords])
    assert not check_output_policy("one two three four", [MaxWords()]).clean


@pytest.mark.parametrize("policy", [lambda: None, lambda output, extra: None,
                                    lambda *, output: None])
def test_a_callable_that_cannot_take_the_output_is_refused(policy: Any) -> None:
    with pytest.raises(ConfigurationError, match="must take the output as its first argument"):
        Agent("memo", output_policy=[policy])
    with pytest.raises(ConfigurationError, match="must take the output as its first argument"):
        check_output_policy("text", [policy])


def test_callables_of_every_accepted_shape_still_build() -> None:
    def named(output: object, *, turn: object = None, output_text: str = "") -> None: ...

    def catch_all(output: object, **context: object) -> None: ...

    def positional(*args: object) -> None: ...

    audit = check_output_policy("x", [named, catch_all, positional, print, MaxWords()])
    assert audit.clean


@pytest.mark.parametrize(("content", "message"), [
    (b"R\xe8gle: pas de tiret", r"not UTF-8 text; save it as UTF-8"),
    (b"x" * 1_000_001, r"rules\.md' is larger than 1,000,000 bytes"),  # sent to the judge whole
])
def test_a_policy_file_that_is_not_utf8_is_refused(tmp_path: Path, content: bytes,
                                                   message: str) -> None:
    (tmp_path / "rules.md").write_bytes(content)
    with pytest.raises(ConfigurationError, match=message):
        Agent("memo", output_policy=[tmp_path / "rules.md"])


def test_a_policy_path_with_a_nul_byte_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="cannot read policy file"):
        Agent("memo", output_policy=["rules\x00.md"])


@pytest.mark.parametrize("returned", [42, {"rule": "r", "metadata": "not a dict"},
                                      object(), [None, 3.5]])
def test_a_policy_returning_something_unusable_is_a_violation(returned: Any) -> None:
    audit = check_output_policy("text", [lambda output: returned])
    [violation] = audit.violations
    assert violation.rule in ("<lambda>", "r")


@pytest.mark.django_db
def test_an_unusable_policy_result_fails_the_turn_readably(registered: Any) -> None:
    agent = registered(Agent("memo_bad_result", output_policy=[lambda output: 42],
                             client=ScriptedClient([reply("Done.")])))
    run = agent.run("Write it")
    assert run.status == "failed"
    assert "returned 42" in str(run.error)
