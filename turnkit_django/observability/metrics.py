"""Metrics through OpenTelemetry's metrics API, when ``opentelemetry-api`` is installed.

Nothing here imports OpenTelemetry until the first fact is recorded, and without it every
function is a no-op (one cached lookup). The instruments come from the global meter provider
(``opentelemetry.metrics.set_meter_provider``; instruments made before it is set follow it once it
is) or from the provider given to :func:`configure`.

Instruments (see docs/howto/metrics.md):

- ``turnkit.turns.finished`` (counter, ``{turn}``; ``outcome``: completed, failed, cancelled,
  stale, dead_lettered) and ``turnkit.turn.duration`` (histogram, ``s``, from the turn's first
  claim to its end; turns that never started have none);
- ``turnkit.turn.recoveries`` (reconcile requeued a turn whose worker died) and
  ``turnkit.turn.lease_expiries`` (reconcile found a running turn's lease expired), ``{turn}``;
- ``turnkit.model.duration`` (histogram, ``s``; ``agent``, ``model``, ``error.type`` when the
  call raised), ``turnkit.model.active_calls`` (up-down counter, ``{call}``);
- ``turnkit.model.tokens`` (counter, ``{token}``; ``agent``, ``model``, ``type``: input,
  output) and ``turnkit.model.cost`` (counter, ``USD``; priced responses only);
- ``turnkit.turns.live`` (observable gauge, ``{turn}``; ``status``): one aggregate query over
  the active turns (the partial index ``turnkit_turn_active``), run only when a reader collects,
  in the process that asked for it (``configure(live_turns=True)``).

Facts are recorded once the transaction that made them commits.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone

from ..base.states import ACTIVE_TURN_STATUSES

logger = logging.getLogger("turnkit_django.metrics")

#: The outcome a turn event reports (``turn.failed`` of a dead-letter: ``dead_lettered``).
OUTCOMES = {"turn.completed": "completed", "turn.failed": "failed",
            "turn.cancelled": "cancelled", "turn.stale": "stale"}

_provider: Any = None  # the provider given to configure(); None: the global one
_live = False  # whether configure() asked for the live-turns gauge


def live_turns() -> dict[str, int]:
    """Active turns by status: one aggregate over the active rows (``turnkit_turn_active``)."""
    from ..models import Turn  # noqa: PLC0415  # models need the app registry; this module not

    rows = (Turn.objects.active().order_by().values("status").annotate(n=Count("id"))
            .values_list("status", "n"))
    return {str(status): int(n) for status, n in rows}


class _Instruments:
    def __init__(self, meter: Any, observation: type, live: bool) -> None:
        self.turns = meter.create_counter(
            "turnkit.turns.finished", unit="{turn}", description="Turns that ended, by outcome")
        self.turn_duration = meter.create_histogram(
            "turnkit.turn.duration", unit="s", description="From a turn's first claim to its end")
        self.recoveries = meter.create_counter(
            "turnkit.turn.recoveries", unit="{turn}",
            description="Turns requeued by reconcile after their worker died")
        self.lease_expiries = meter.create_counter(
            "turnkit.turn.lease_expiries", unit="{turn}",
            description="Running turns whose lease reconcile found expired")
        self.model_duration = meter.create_histogram(
            "turnkit.model.duration", unit="s", description="Model calls")
        self.active_calls = meter.create_up_down_counter(
            "turnkit.model.active_calls", unit="{call}", description="Model calls in flight")
        self.slot_waits = meter.create_up_down_counter(
            "turnkit.model.slot_waits", unit="{call}",
            description="Model calls waiting for a provider slot or a 429's Retry-After")
        self.tokens = meter.create_counter(
            "turnkit.model.tokens", unit="{token}", description="Tokens of model responses")
        self.cost = meter.create_counter(
            "turnkit.model.cost", unit="USD", description="Cost of priced model responses")

        def observe(_options: Any) -> Iterable[Any]:
            try:
                if not connection.in_atomic_block:  # a reader's own thread: a usable connection
                    connection.close_if_unusable_or_obsolete()
                counts = live_turns()
            except Exception:  # a collection must not break the exporter
                logger.exception("could not read the live turns for turnkit.turns.live")
                return []
            return [observation(counts.get(str(s), 0), {"status": str(s)})
                    for s in sorted(ACTIVE_TURN_STATUSES)]

        if live:
            meter.create_observable_gauge("turnkit.turns.live", callbacks=[observe], unit="{turn}",
                                          description="Active turns by status")


@functools.cache
def _instruments() -> _Instruments | None:
    try:
        # Optional dependency, imported on first use: no cost, no error without it.
        from opentelemetry import metrics as otel  # noqa: PLC0415
    except ImportError:
        return None
    provider = _provider if _provider is not None else otel.get_meter_provider()
    return _Instruments(provider.get_meter("turnkit_django"), otel.Observation, _live)


def configure(meter_provider: Any = None, *, live_turns: bool = False) -> bool:
    """Create the instruments now, in ``meter_provider`` (None: the global provider); return
    whether OpenTelemetry is installed.

    Without a call, they are created in the global provider when the first fact is recorded.
    ``live_turns=True`` also registers the ``turnkit.turns.live`` gauge, a database-wide figure:
    ask for it in the one process that exports it (each collection runs its query).
    """
    global _provider, _live
    _provider, _live = meter_provider, live_turns
    _instruments.cache_clear()
    return _instruments() is not None


def enabled() -> bool:
    """Whether OpenTelemetry is installed, so facts are recorded."""
    return _instruments() is not None


def _after_commit(record: Callable[[], object]) -> None:
    if transaction.get_connection().in_atomic_block:
        transaction.on_commit(record)
    else:
        record()


def turn_event(type_: str, payload: Mapping[str, Any],
               started_at: datetime | None) -> Callable[[], None] | None:
    """What to record once turn event ``type_`` is sent (None: nothing, the common case)."""
    outcome = OUTCOMES.get(type_)
    if outcome is None:
        return None
    meters = _instruments()
    if meters is None:
        return None
    error = payload.get("error")
    if outcome == "failed" and isinstance(error, Mapping) and error.get("type") == "DeadLetter":
        outcome = "dead_lettered"

    def record() -> None:
        attributes = {"outcome": outcome}
        meters.turns.add(1, attributes)
        if started_at is not None:
            seconds = (timezone.now() - started_at).total_seconds()
            meters.turn_duration.record(max(seconds, 0.0), attributes)

    return record


def turn_recovered() -> None:
    """Reconcile requeued a turn (recorded when its transaction commits)."""
    meters = _instruments()
    if meters is not None:
        _after_commit(lambda: meters.recoveries.add(1))


def lease_expired() -> None:
    """Reconcile found a running turn's lease expired (recorded when its transaction commits)."""
    meters = _instruments()
    if meters is not None:
        _after_commit(lambda: meters.lease_expiries.add(1))


def model_call(agent: str, model: str) -> AbstractContextManager[None]:
    """Time a model call (and count it in flight while it runs)."""
    meters = _instruments()
    return nullcontext() if meters is None else _timed(meters, {"agent": agent, "model": model})


@contextmanager
def _timed(meters: _Instruments, attributes: dict[str, str]) -> Iterator[None]:
    meters.active_calls.add(1, attributes)
    started = time.monotonic()
    outcome = attributes
    try:
        yield
    except BaseException as exc:
        outcome = {**attributes, "error.type": type(exc).__name__}
        raise
    finally:
        meters.active_calls.add(-1, attributes)
        meters.model_duration.record(time.monotonic() - started, outcome)


def slot_wait(limit: str, change: int) -> None:
    """A model call starts (+1) or stops (-1) waiting on its provider limit ``limit``."""
    meters = _instruments()
    if meters is not None:
        meters.slot_waits.add(change, {"limit": limit})


def model_usage(agent: str, model: str, input_tokens: int, output_tokens: int,
                cost: Decimal | None) -> None:
    """The tokens and cost of a committed model response."""
    meters = _instruments()
    if meters is None:
        return
    attributes = {"agent": agent, "model": model}
    meters.tokens.add(input_tokens, {**attributes, "type": "input"})
    meters.tokens.add(output_tokens, {**attributes, "type": "output"})
    if cost is not None:
        meters.cost.add(float(cost), attributes)


__all__ = ["OUTCOMES", "configure", "enabled", "lease_expired", "live_turns", "model_call",
           "model_usage", "turn_event", "turn_recovered"]
