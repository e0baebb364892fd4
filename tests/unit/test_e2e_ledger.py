"""The e2e ledger is read while workers append to it: a half-written line is not an entry yet."""

from __future__ import annotations

import json
from pathlib import Path

from tests.testapp import ledger


def test_a_line_still_being_appended_is_left_for_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    whole = json.dumps({"ev": "hold.waiting", "args": ["turn_1"]})
    path.write_text(whole + "\n" + '{"args": ["turn_2"], "ev": "')

    assert ledger.read(path) == [{"ev": "hold.waiting", "args": ["turn_1"]}]

    with path.open("a") as tail:
        tail.write('hold.waiting"}\n')
    assert [entry["args"] for entry in ledger.read(path)] == [["turn_1"], ["turn_2"]]
