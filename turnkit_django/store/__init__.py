"""The ORM store: the only code that writes turnkit rows.

* :mod:`.locks`: the tree lock (with the tree's budget ledger), the conversation lock, the
  wait-graph lock, the database clock;
* :mod:`.claims`: claims and heartbeats; :mod:`.fenced`: :class:`~.fenced.Fenced`, the writes
  a worker makes to the turn it executes, and :mod:`.steps`, a step as one statement;
* :mod:`.admission`: a tenant's limit and a cascade cancel, which keep a pending turn unclaimed;
  :mod:`.execution_writes`: a claim's writes to its tool executions;
* :mod:`.guard`: the guard of a write sent without the lock; :mod:`.turn_statements`: a turn's
  creation, transitions, submit and claim, each one statement;
* :mod:`.turns`: creating conversations and turns, and every status change as a named
  transition (:func:`~.turns.apply_transition`);
* :mod:`.row_reader`: a row read back, or set from a write's ``RETURNING``, without the ORM;
* :mod:`.transcript`: gap-free message sequences, the messages a turn sees, transcript repair;
* :mod:`.state`: the typed loop state persisted in ``Turn.state``;
* :mod:`.wait_for`: an application wait's edges and an inline turn's joined results;
* :mod:`.waits`, :mod:`.deliveries`, :mod:`.retention`: wait edges, deliveries, pruning;
* :mod:`.recovery`: recovery's and maintenance's changes, each one locked transaction with a
  typed outcome (:func:`~.recovery.recover` ...);
* :mod:`.interventions`: pause, resume, steer, and a decision on a parked call
  (:func:`~.interventions.decide_approval` -> ``Decided | AlreadyDecided``);
* :mod:`.cancellation`: a cancel (:func:`~.cancellation.cancel_tree`) and a cascade sweep
  (:func:`~.cancellation.sweep_tree`), each one locked transaction;
* :mod:`.summaries`: a manual compaction's summary, appended to an idle conversation;
* :mod:`.media`: the bytes of generated images, in a Django storage;
* :mod:`.commits`: work after the commit (:func:`~.commits.after_commit`) and whether an
  application's ``atomic()`` block is open; :mod:`.connections`: the heartbeat thread's session.

A test walks the package's source and fails on an ORM write outside this package.
"""

from __future__ import annotations

from .attempts import record_attempt
from .cancellation import Cancelled, CancelPlan, Newcomers, cancel_plan, cancel_tree, sweep_tree
from .claims import (
    Claim,
    claim,
    claim_turn,
    create_claimed,
    heartbeat,
    heartbeat_all,
    lease_of,
    worker_identity,
)
from .fenced import Charge, Fenced
from .interventions import AlreadyDecided, Decided, decide_approval
from .locks import Ledger, LedgerDelta, database_now, lock_conversation, lock_tree
from .recovery import (
    Abandoned,
    Counted,
    DeadLettered,
    Recovered,
    Recovery,
    Skipped,
    WaitRelease,
    abandon_prepared,
    count_failed_recovery,
    recover,
    release_waiter,
    touch_batch,
)
from .seen import History, Prefix, history_before, remember_history
from .sessions import pooled, release_session
from .summaries import append_summary, refuse_if_busy
from .transcript import (
    ClosedCall,
    InputKeyTaken,
    NewMessage,
    allocate_sequences,
    append_input,
    insert_messages,
    keyed_write,
    repair,
    to_chat,
    visible_chat,
    visible_history,
)
from .turn_state import GRANTED, Candidate, MediaCall, Reservation, Terminal, TurnState
from .turns import (
    NewConversation,
    NewTurn,
    adopt,
    apply_transition,
    build_conversation,
    create_conversation,
    create_turn,
    reload,
    revoke,
)
from .wait_for import attach_waits, join_inline

__all__ = [
    "GRANTED",
    "Abandoned",
    "AlreadyDecided",
    "CancelPlan",
    "Cancelled",
    "Candidate",
    "Charge",
    "Claim",
    "ClosedCall",
    "Counted",
    "DeadLettered",
    "Decided",
    "Fenced",
    "History",
    "InputKeyTaken",
    "Ledger",
    "LedgerDelta",
    "MediaCall",
    "NewConversation",
    "NewMessage",
    "NewTurn",
    "Newcomers",
    "Prefix",
    "Recovered",
    "Recovery",
    "Reservation",
    "Skipped",
    "Terminal",
    "TurnState",
    "WaitRelease",
    "abandon_prepared",
    "adopt",
    "allocate_sequences",
    "append_input",
    "append_summary",
    "apply_transition",
    "attach_waits",
    "build_conversation",
    "cancel_plan",
    "cancel_tree",
    "claim",
    "claim_turn",
    "count_failed_recovery",
    "create_claimed",
    "create_conversation",
    "create_turn",
    "database_now",
    "decide_approval",
    "heartbeat",
    "heartbeat_all",
    "history_before",
    "insert_messages",
    "join_inline",
    "keyed_write",
    "lease_of",
    "lock_conversation",
    "lock_tree",
    "pooled",
    "record_attempt",
    "recover",
    "refuse_if_busy",
    "release_session",
    "release_waiter",
    "reload",
    "remember_history",
    "repair",
    "revoke",
    "sweep_tree",
    "to_chat",
    "touch_batch",
    "visible_chat",
    "visible_history",
    "worker_identity",
]
