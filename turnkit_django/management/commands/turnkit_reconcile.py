"""Recover turns whose worker died and run maintenance: once, or in a loop."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import close_old_connections

from ...base import failpoints
from ...conf import turnkit_settings
from ...services import cancel_sweep, reconcile
from ..arguments import COUNT, SECONDS
from ..command import TurnkitCommand

#: The settings one reconcile pass and cancel sweep read.
READ_BY_A_PASS = ("LEASE", "MAINTENANCE_BATCH_SIZE", "TIMEOUT", "MAX_RECOVERY_ATTEMPTS")


class Command(TurnkitCommand):
    help = (
        "Recover abandoned turns (heartbeat older than LEASE) and run one maintenance pass; "
        "with --loop, also finish cancel cascades, standing in for beat."
    )

    _parser: CommandParser | None = None

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        """Keep the parser: handle() refuses options through it, in argparse's words."""
        self._parser = super().create_parser(prog_name, subcommand, **kwargs)
        return self._parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true",
                            help="Keep reconciling until interrupted (an alternative to beat).")
        parser.add_argument("--interval", type=SECONDS, default=None,
                            help="Seconds between passes with --loop (default RECONCILE_INTERVAL).")
        parser.add_argument("--passes", type=COUNT, default=None, metavar="N",
                            help="With --loop, stop after N passes (default: run until stopped).")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["loop"]:
            # A single pass has no interval and no count: refuse them rather than ignore them.
            # Checked here, not by argparse, because call_command keywords bypass the parser.
            for flag in ("--interval", "--passes"):
                if options[flag[2:]] is not None:
                    self._refuse(f"argument {flag}: needs --loop")
        interval = SECONDS.clean("--interval", options["interval"])
        if interval is None:  # not `or`: --interval 0 is refused, not replaced
            interval = turnkit_settings.RECONCILE_INTERVAL
        passes = COUNT.clean("--passes", options["passes"])
        # A broken setting would fail every pass of a loop alike: refuse it before the first
        # (with --skip-checks; TurnkitCommand makes it a CommandError).
        for key in READ_BY_A_PASS:
            getattr(turnkit_settings, key)
        if not options["loop"]:
            self.stdout.write(str(reconcile()))
            return
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set())
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            done = 0
            while not stop.is_set() and (passes is None or done < passes):
                self._pass()
                done += 1
                if passes is None or done < passes:
                    stop.wait(interval)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _refuse(self, message: str) -> None:
        """The command line prints ``manage.py turnkit_reconcile: error: <message>`` and exits
        with status 2; call_command raises ``CommandError("Error: <message>")``."""
        if self._parser is not None:
            self._parser.error(message)  # raises CommandError, or exits
        raise CommandError(f"Error: {message}")

    def _pass(self) -> None:
        """One reconcile and cancel sweep; an error is reported and the loop goes on."""
        try:
            failpoints.hit("reconcile_pass")
            report = reconcile()
            # The loop stands in for beat, so it also finishes cancel cascades.
            swept = cancel_sweep()
        except Exception as exc:
            self.stderr.write(f"reconcile pass failed: {type(exc).__name__}: {exc}")
            close_old_connections()  # the next pass starts on a fresh connection if needed
            return
        if report.recovered or report.dead_lettered or report.stale or report.dispatched \
                or report.errors:
            self.stdout.write(str(report))
        if swept:
            self.stdout.write(f"cancel sweep: cancelled {len(swept)} descendants")
