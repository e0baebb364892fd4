"""Recover turns whose worker died and run maintenance: once, or in a loop."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...conf import turnkit_settings
from ...services import cancel_sweep, reconcile


class Command(BaseCommand):
    help = (
        "Recover abandoned turns (heartbeat older than LEASE) and run one maintenance pass; "
        "with --loop, also finish cancel cascades, standing in for beat."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true",
                            help="Keep reconciling until interrupted (an alternative to beat).")
        parser.add_argument("--interval", type=float, default=None,
                            help="Seconds between passes with --loop (default RECONCILE_INTERVAL).")

    def handle(self, *args: Any, **options: Any) -> None:
        interval = options["interval"] or float(turnkit_settings.RECONCILE_INTERVAL)
        if interval <= 0:
            raise CommandError("--interval must be a positive number of seconds")
        if not options["loop"]:
            self.stdout.write(str(reconcile()))
            return
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.is_set():
            report = reconcile()
            # The loop stands in for beat, so it also finishes cancel cascades.
            swept = cancel_sweep()
            if report.recovered or report.dead_lettered or report.stale or report.dispatched:
                self.stdout.write(str(report))
            if swept:
                self.stdout.write(f"cancel sweep: cancelled {len(swept)} descendants")
            stop.wait(interval)
