"""Cancel a turn, or a run with all its descendants."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...models import Turn
from ...services import cancel
from ..arguments import principal as principal_option
from ..command import TurnkitCommand, id_hint


class Command(TurnkitCommand):
    help = ("Cancel a turn (with --cascade also every descendant). Running tool calls are "
            "interrupted, transcripts repaired, in-flight workers fenced out.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("turn_id", help="The turn (or run) to cancel.")
        parser.add_argument("--cascade", action="store_true",
                            help="Also cancel every descendant turn.")
        parser.add_argument("--principal", default=None, metavar="JSON",
                            help="The principal to authorize the cancel for, as JSON "
                                 '(for example \'{"user": 7}\'); default none.')

    def handle(self, *args: Any, **options: Any) -> None:
        principal = None
        if options["principal"] is not None:
            principal = principal_option(options["principal"])
        turn_id = options["turn_id"]
        try:
            report = cancel(turn_id, cascade=options["cascade"], principal=principal)
        except Turn.DoesNotExist as exc:
            hint = id_hint(turn_id) or (
                f" (that is a conversation id: `turnkit_inspect {turn_id}` lists its turns)"
                if isinstance(turn_id, str) and turn_id.startswith("conv_") else "")
            raise CommandError(f"no turn {turn_id!r}{hint}; turn ids look like turn_...: copy "
                               "one from turnkit_inspect or the admin") from exc
        if not report.changed:
            self.stdout.write(f"turn {report.turn_id!r} is already {report.status}; "
                              "nothing changed")
            return
        self.stdout.write(str(report))
