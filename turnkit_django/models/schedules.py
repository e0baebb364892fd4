"""Schedules (``schedule(agent, cron=..., task=..., key=...)``) and the firings they started.

Imported by :mod:`turnkit_django.models`; only :mod:`turnkit_django.store` writes these rows. A
firing is unique per (schedule, firing time): that constraint, not timing, is what makes each
firing start exactly one run however many ticks race for it.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from ..base.cron import cron_problem


def validate_cron(value: object) -> None:
    """The admin's check of a cron expression: the same message as ``schedule()``'s."""
    problem = cron_problem(value)
    if problem:
        raise ValidationError(problem[0].upper() + problem[1:] + ".", code="cron")


#: A schedule has a cron expression or an interval, never both, never neither.
CRON_OR_EVERY = (Q(every__isnull=True) & ~Q(cron="")) | (Q(every__isnull=False) & Q(cron=""))
ONE_OF = _("Give exactly one of a cron expression or every (seconds).")


class Missed(models.TextChoices):
    """What a tick does with firings it finds older than the grace (beat was down)."""

    SKIP = "skip", _("skip missed firings; wait for the next")
    CATCH_UP = "catch_up", _("start the most recent missed firing once")


class Schedule(models.Model):
    key = models.CharField(max_length=200)  # unique: turnkit_schedule_key_unique
    agent_name = models.CharField(max_length=200)
    cron = models.CharField(max_length=200, blank=True, validators=[validate_cron],
                            help_text=_("5 fields: minute hour day-of-month month day-of-week, "
                                        "in TIME_ZONE; for example '0 9 * * 1-5'. Empty when "
                                        "the schedule fires every N seconds."))
    # Interval schedules: firings at the multiples of `every` seconds since the Unix epoch.
    every = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)],
                                        help_text=_("Seconds between firings (at least 1), "
                                                    "instead of a cron expression."))
    task = models.TextField()
    enabled = models.BooleanField(default=True)
    missed = models.CharField(max_length=16, choices=Missed.choices, default=Missed.SKIP)
    principal = models.JSONField(null=True, blank=True)
    # The latest firing time the schedule is done with (started or skipped); null: none yet.
    last_fired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        ordering = ["key"]
        # A constraint, not unique=True: no varchar_pattern_ops companion index (see 0008).
        constraints = [
            models.UniqueConstraint(fields=["key"], name="turnkit_schedule_key_unique"),
            models.CheckConstraint(condition=CRON_OR_EVERY, name="turnkit_schedule_cron_or_every",
                                   violation_error_message=ONE_OF),
        ]

    def __str__(self) -> str:
        return f"schedule {self.key!r} ({self.when})"

    @property
    def when(self) -> str:
        return self.cron if self.every is None else f"every {self.every}s"


class ScheduleFiring(models.Model):
    id = models.BigAutoField(primary_key=True)
    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="firings",
                                 db_index=False)  # the unique constraint leads with it
    fired_for = models.DateTimeField()
    turn = models.ForeignKey("turnkit.Turn", null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+", db_index=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("schedule firing")
        verbose_name_plural = _("schedule firings")
        ordering = ["-fired_for"]
        constraints = [models.UniqueConstraint(fields=["schedule", "fired_for"],
                                               name="turnkit_schedule_firing_once")]

    def __str__(self) -> str:
        return f"{self.schedule_id} at {self.fired_for:%Y-%m-%d %H:%M}"
