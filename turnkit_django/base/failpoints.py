"""Named points in the runtime where tests inject a crash.

``failpoints.arm("after_model_commit")`` makes the next pass through that point raise
:class:`SimulatedCrash`, a ``BaseException`` the runtime does not catch, exactly like a worker
process dying there: nothing after the point runs, and what was committed stays committed.
Points: ``before_model_call``, ``after_model_commit`` (the response committed, with the first tool
call's intent or, for a final answer that needs no review, the publication), ``after_tool_intent``
(the call's intent is committed, by the step before it or by its own transaction, and the tool has
not started), ``inside_tool``, ``after_tool_call`` (the tool returned, its result is not committed),
``after_tool_commit`` (the result committed, with what follows it), ``before_tool_retry`` (a failed
attempt of a tool with retries was recorded, its backoff not yet waited), ``before_publish`` (the
output is decided and not published; for a final answer that needs no review, the response is not
committed either), ``before_hand_off`` (a background turn's terminal write committed on its own, its
lane not yet handed on), ``after_revision_commit`` (an output-policy revision request was
committed), ``after_compaction_commit`` (a context summary was committed), ``after_child_launch`` (a
background delegation's execution, child and wait edge committed). Maintenance: ``recover_turn``
(reconcile holds an abandoned turn's tree lock, before it changes anything), ``reconcile_pass`` (the
start of a ``turnkit_reconcile --loop`` pass).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_lock = threading.Lock()
_armed: dict[str, Callable[[], None] | None] = {}


class SimulatedCrash(BaseException):
    """Raised by an armed failpoint."""


def arm(name: str, action: Callable[[], None] | None = None) -> None:
    """Arm ``name`` once: the next hit raises SimulatedCrash (or runs ``action``)."""
    with _lock:
        _armed[name] = action


def disarm_all() -> None:
    with _lock:
        _armed.clear()


def hit(name: str) -> None:
    """Called by the runtime at each point; a no-op unless armed."""
    if not _armed:
        return
    with _lock:
        if name not in _armed:
            return
        action = _armed.pop(name)
    if action is not None:
        action()
        return
    raise SimulatedCrash(name)
