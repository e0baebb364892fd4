"""Conversations, turns, messages, tool executions, waits, deliveries and events.

Only :mod:`turnkit_django.store` writes these rows. Every invariant a constraint can carry is a
constraint: gap-free message sequences are unique per conversation, a tool call has one execution
per turn, a delivery key is unique store-wide, a wait edge exists once, and a conversation runs
at most one submitted turn at a time. The turn and its conversation are in :mod:`.core`, what a
turn coordinates with in :mod:`.coordination`.
"""

from .activity import Delivery, Event, ToolExecution, Wait
from .core import Conversation, Lease, Message, Turn
from .schedules import Schedule, ScheduleFiring

__all__ = ["Conversation", "Delivery", "Event", "Lease", "Message", "Schedule", "ScheduleFiring",
           "ToolExecution", "Turn", "Wait"]
