"""Show a turn, run or conversation: its tree, transcript, usage and cost."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...api.handles import Run
from ...base.terminal import json_for_terminal
from ...console.formatting import format_cost
from ...console.timeline import (
    conversation_transcript,
    load_tree,
    turn_summary,
    turn_transcript,
)
from ...console.transcript_text import render, transcript, tree_lines
from ...models import Conversation, Turn
from ...store import provider_waits
from ...store.events import stamp
from ..command import TurnkitCommand, id_hint, unstorable_id


class Command(TurnkitCommand):
    help = ("Print the tree (in parent order), transcript, usage and cost of a turn, run or "
            "conversation id.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("id", help="A turn or run id (turn_...) or conversation id (conv_...)")
        parser.add_argument("--json", action="store_true",
                            help="Print one JSON document instead of text.")
        parser.add_argument("--full", action="store_true",
                            help="Print texts, arguments and results whole (no cutting with …).")

    def handle(self, *args: Any, **options: Any) -> None:
        ident: str = options["id"]
        storable = unstorable_id(ident) is None  # else no database can be asked about it
        turn = Turn.objects.filter(pk=ident).first() if storable else None
        if turn is not None:
            self._turn(turn, as_json=options["json"], full=options["full"])
            return
        conversation = Conversation.objects.filter(pk=ident).first() if storable else None
        if conversation is None:
            raise CommandError(f"no turn or conversation with id {ident!r}{id_hint(ident)}; "
                               "ids look like turn_... or conv_...")
        self._conversation(conversation, as_json=options["json"], full=options["full"])

    def _turn(self, turn: Turn, *, as_json: bool, full: bool) -> None:
        tree = load_tree(turn)
        root = tree.by_id[turn.root_turn_id]
        if as_json:
            wait = provider_waits.waiting_of(turn.pk)
            self._json({"kind": "turn", "turn": turn_summary(turn),
                        "provider_wait": None if wait is None else {
                            "limit": wait[0], "since": stamp(wait[1])},
                        "tree": [turn_summary(t, private=False) for t in tree.in_parent_order()],
                        "tree_totals": tree.totals().as_json(),
                        "transcript": turn_transcript(root, tree).as_json()})
            return
        self.stdout.write("\n".join(tree_lines(tree, highlight=turn.pk)) + "\n")
        wait = provider_waits.waiting_of(turn.pk)
        if wait is not None:
            self.stdout.write(f"waiting for a provider slot ({wait[0]}, since "
                              f"{stamp(wait[1])})\n")
        self.stdout.write(render(Run(root), full=full))

    def _conversation(self, conversation: Conversation, *, as_json: bool, full: bool) -> None:
        view = conversation_transcript(conversation, transcript=as_json)
        if as_json:
            self._json({"kind": "conversation", **view.as_json()})
            return
        self.stdout.write(f"conversation {conversation.pk} · agent {conversation.agent_name} · "
                          f"{len(view.turns)} turns · {conversation.last_sequence} messages · "
                          f"cost {view.tree_totals.cost_text} with sub-agents")
        for row in view.turns:
            cost = format_cost(None if row.cost_unknown else row.cost)
            self.stdout.write(f"  {row.pk}  {row.status:<10} {cost}")
        if view.turns:
            self.stdout.write("\n".join(transcript(view.turns[-1], full=full)))

    def _json(self, document: Mapping[str, object]) -> None:
        # Control characters as JSON's own \u escapes: valid JSON that reads back the same.
        self.stdout.write(json_for_terminal(json.dumps(document, indent=2, ensure_ascii=False,
                                                       default=str)))
