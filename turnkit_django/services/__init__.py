"""Use cases, one function each: what handles, admin actions, commands and tasks call.

* :mod:`.turns`: create conversations and turns, submit, run a submitted turn;
* :mod:`.outcomes`: the worker's one log line per turn outcome (and per recovered turn);
* :mod:`.recovery`: reconcile abandoned turns, the bounded maintenance pass (``drain``);
* :mod:`.cancellation`: cancel with or without descendants, the cascade sweep;
* :mod:`.deliveries`, :mod:`.waits`: durable messages, application waits;
* :mod:`.retention`, :mod:`.compaction`: pruning history, manual compaction;
* :mod:`.reading`: what a reader of a tree may see (readable conversations, the tree's messages);
* :mod:`.awaiting`: waiting for a run to finish or pause for a person (``run.wait()``).
"""

from __future__ import annotations

from .approvals import expire_approvals, pending_approvals
from .cancellation import CancelReport, cancel, cancel_sweep
from .compaction import compact_conversation
from .costs import CostBreakdown, TurnCost, cost_breakdown
from .deliveries import deliver, send_message, wake
from .inputs import InputStatus, answer_once, input_status, keyed_input, post, say, taker
from .reading import Readable, readable_conversations, tree_messages
from .recovery import ReconcileReport, drain, reconcile, release_waiting
from .retention import prune
from .turns import dispatch, maintain_when_due, new_conversation, new_turn, run_turn, submit
from .waits import add_wait, join_for_inline

__all__ = [
    "CancelReport",
    "CostBreakdown",
    "InputStatus",
    "Readable",
    "ReconcileReport",
    "TurnCost",
    "add_wait",
    "answer_once",
    "cancel",
    "cancel_sweep",
    "compact_conversation",
    "cost_breakdown",
    "deliver",
    "dispatch",
    "drain",
    "expire_approvals",
    "input_status",
    "join_for_inline",
    "keyed_input",
    "maintain_when_due",
    "new_conversation",
    "new_turn",
    "pending_approvals",
    "post",
    "prune",
    "readable_conversations",
    "reconcile",
    "release_waiting",
    "run_turn",
    "say",
    "send_message",
    "submit",
    "taker",
    "tree_messages",
    "wake",
]
