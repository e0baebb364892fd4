"""Print what the metrics report, read from the database: live turns, the oldest pending turn,
and what the last hour (``--window``) finished, recovered, dead-lettered, spent.

Every figure is one bounded query on a partial index (migration 0013): the active turns, the
turns that ended in the window, the recovered turns touched in it.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.core.management.base import CommandParser
from django.db.models import BigIntegerField, Count, Q, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from ...base.states import ACTIVE_TURN_STATUSES
from ...base.terminal import json_for_terminal
from ...console.formatting import format_cost
from ...models import Turn
from ...observability.metrics import live_turns
from ...store import database_now, provider_waits
from ..arguments import SECONDS
from ..command import TurnkitCommand

#: The most recovered turns read to count their recoveries in the window (their fence logs).
RECOVERED_ROWS = 10_000
#: Statuses in the order they are printed.
ORDER = ("pending", "waiting", "paused", "running")


def _tokens(key: str) -> Coalesce:
    return Coalesce(Sum(Cast(KT(f"usage__{key}"), BigIntegerField())), 0)


def _recoveries(since: datetime) -> int:
    """Requeues by reconcile since ``since``: the "lease expired" entries of fence logs."""
    count = 0
    for log in Turn.objects.recovered_since(since).values_list(
            "fence_log", flat=True)[:RECOVERED_ROWS]:
        for entry in log or []:
            if entry.get("reason") == "lease expired" and \
                    datetime.fromisoformat(entry["at"]) >= since:
                count += 1
    return count


def figures(window: float) -> dict[str, Any]:
    """The command's figures as one JSON document."""
    now = database_now()
    since = now - timedelta(seconds=window)
    live = live_turns()
    oldest = Turn.objects.pending().order_by("created_at").values_list("pk", "created_at").first()
    finished = Turn.objects.finished_since(since)
    by_status = dict(finished.order_by().values("status").annotate(n=Count("id"))
                     .values_list("status", "n"))
    spent = finished.aggregate(input=_tokens("input_tokens"), output=_tokens("output_tokens"),
                               cost=Coalesce(Sum("cost"), Decimal(0)),
                               unpriced=Count("id", filter=Q(cost_unknown=True)))
    return {
        "live": {status: live.get(status, 0) for status in ORDER
                 if status in ACTIVE_TURN_STATUSES},
        "provider_waits": provider_waits.waiting_counts(),
        "oldest_pending": None if oldest is None else {
            "turn_id": oldest[0], "age_seconds": round((now - oldest[1]).total_seconds(), 3)},
        "window_seconds": window,
        "finished": {str(status): n for status, n in sorted(by_status.items())},
        "recoveries": _recoveries(since),
        "dead_letters": finished.dead_lettered().count(),
        "tokens": {"input": int(spent["input"]), "output": int(spent["output"])},
        "cost_usd": str(Decimal(spent["cost"]).normalize()),
        "unpriced_turns": spent["unpriced"],
    }


def _age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def text(doc: dict[str, Any]) -> str:
    """The figures for a terminal."""
    live = " · ".join(f"{status} {n}" for status, n in doc["live"].items())
    oldest = doc["oldest_pending"]
    pending = "none" if oldest is None else f"{_age(oldest['age_seconds'])} ({oldest['turn_id']})"
    finished = " · ".join(f"{s} {n}" for s, n in doc["finished"].items()) or "none"
    window = doc["window_seconds"]
    span = "last hour" if window == 3600 else f"last {_age(window)}"
    cost = format_cost(Decimal(doc["cost_usd"]))
    if doc["unpriced_turns"]:
        cost += f" ({doc['unpriced_turns']} turns unpriced)"
    waits = doc["provider_waits"]
    by_limit = " · ".join(f"{key} {n}" for key, n in waits.items())
    return "\n".join([
        f"live turns: {live}",
        f"waiting for a provider slot: {sum(waits.values())}" + (f" ({by_limit})" if waits else ""),
        f"oldest pending: {pending}",
        f"{span}: finished {finished}",
        f"{span}: recoveries {doc['recoveries']} · dead letters {doc['dead_letters']}",
        f"{span}: tokens: input {doc['tokens']['input']:,} · output "
        f"{doc['tokens']['output']:,} · cost {cost}",
    ])


class Command(TurnkitCommand):
    help = ("Print live turns by status, the oldest pending turn's age (database clock), and the "
            "turns finished, recoveries, dead letters, tokens and cost of the last hour.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true",
                            help="Print one JSON document instead of text.")
        parser.add_argument("--window", type=SECONDS, default=3600.0,
                            help="Seconds the recent figures cover (default 3600: the last hour).")

    def handle(self, *args: Any, **options: Any) -> None:
        document = figures(SECONDS.clean("--window", options["window"]) or 3600.0)
        if options["json"]:
            self.stdout.write(json_for_terminal(json.dumps(document, indent=2,
                                                           ensure_ascii=False)))
        else:
            self.stdout.write(text(document))
