"""Show a turn, run or conversation: its tree, transcript, usage and cost."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...handles import Run
from ...models import Conversation, Turn
from ...transcript import render, transcript


class Command(BaseCommand):
    help = "Print the tree, transcript, usage and cost of a turn, run or conversation id."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("id", help="A turn or run id (turn_...) or conversation id (conv_...)")

    def handle(self, *args: Any, **options: Any) -> None:
        ident: str = options["id"]
        turn = Turn.objects.filter(pk=ident).first()
        if turn is not None:
            self.stdout.write(self._tree(turn.root_turn_id, highlight=turn.pk))
            self.stdout.write(render(Run(Turn.objects.get(pk=turn.root_turn_id))))
            return
        conversation = Conversation.objects.filter(pk=ident).first()
        if conversation is None:
            raise CommandError(
                f"no turn or conversation with id {ident!r}; ids look like turn_... or conv_..."
            )
        turns = list(conversation.turns.order_by("created_at"))
        self.stdout.write(f"conversation {conversation.pk} · agent {conversation.agent_name} · "
                          f"{len(turns)} turns · {conversation.last_sequence} messages")
        for row in turns:
            cost = "unknown" if row.cost_unknown else f"${row.cost:.6f}"
            self.stdout.write(f"  {row.pk}  {row.status:<10} {cost}")
        if turns:
            self.stdout.write("\n".join(transcript(turns[-1])))

    @staticmethod
    def _tree(root_id: str, *, highlight: str) -> str:
        lines = []
        for row in Turn.objects.filter(root_turn_id=root_id).order_by("depth", "created_at"):
            mark = "▶" if row.pk == highlight else " "
            lines.append(f"{mark} {'  ' * row.depth}{row.agent_name} {row.pk} {row.status}")
        return "\n".join(lines) + "\n"
