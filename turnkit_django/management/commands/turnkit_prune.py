"""Delete finished history older than a cutoff, in bounded batches."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import CommandParser
from django.utils import timezone

from ...services import prune
from ..arguments import COUNT, DAYS
from ..command import TurnkitCommand


class Command(TurnkitCommand):
    help = (
        "Delete conversations (with their turns, messages, tool executions and child "
        "conversations) whose every turn is finished and whose last activity is older than "
        "--older-than days."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", type=DAYS, required=True, metavar="DAYS",
                            help="Prune conversations idle for longer than this many days "
                                 f"({DAYS.accepted}).")
        parser.add_argument("--batch", type=COUNT, default=None,
                            help="Conversations per transaction (default MAINTENANCE_BATCH_SIZE).")
        parser.add_argument("--dry-run", action="store_true",
                            help="Count what would be deleted; delete nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        # call_command hands keywords on as given (it parses only required ones): convert.
        days = DAYS(options["older_than"])
        batch = COUNT.clean("--batch", options["batch"])
        cutoff = timezone.now() - timedelta(days=days)
        total = prune(before=cutoff, batch=None if batch is None else int(batch),
                      dry_run=options["dry_run"])
        verb = "would delete" if options["dry_run"] else "deleted"
        self.stdout.write(f"{verb} {total} conversations idle since before {cutoff:%Y-%m-%d %H:%M}")
