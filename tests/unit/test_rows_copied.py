"""``store.rows.copied``: dataclasses.replace's result, faster, for the records it may copy."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest

from turnkit_django.base.states import Phase
from turnkit_django.store.rows import copied
from turnkit_django.store.turn_state import TurnState


def test_a_copy_equals_what_dataclasses_replace_gives_and_leaves_the_original():
    state = TurnState(iterations=2, revisions=1)
    changed = copied(state, phase=Phase.DONE, iterations=3)
    assert changed == dataclasses.replace(state, phase=Phase.DONE, iterations=3)
    assert (state.phase, state.iterations) == (TurnState().phase, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        changed.iterations = 4  # type: ignore[misc]


def test_an_unknown_field_is_refused_as_replace_refuses_it():
    with pytest.raises(TypeError, match="no field 'iteration'"):
        copied(TurnState(), iteration=1)


def test_a_record_whose_init_does_more_than_set_its_fields_is_refused():
    @dataclasses.dataclass
    class Checked:
        spend: Decimal

        def __post_init__(self) -> None:
            self.spend = Decimal(self.spend)

    with pytest.raises(TypeError, match=r"use dataclasses\.replace"):
        copied(Checked(Decimal(1)), spend=Decimal(2))
