"""Errors raised by turnkit-django.

::

    TurnkitError
    ├── ConfigurationError      (also django.core.exceptions.ImproperlyConfigured)
    ├── AuthorizationError      the policy did not return True; nothing was written
    ├── BudgetExceeded          a root-wide limit stopped the loop (``reason`` says which)
    ├── ToolError               raised by tool code: becomes a failed tool result the model reads
    ├── ModelError              the provider failed for good; fails the turn, not retried
    │   ├── ModelAccessError    missing or rejected credentials
    │   └── ModelRateLimited    429 or overloaded: the runtime waits and sends it again
    ├── LostClaim               this worker's claim on a turn was revoked; it must stop writing
    ├── InputError              unusable input to a public entry point (also a ValueError):
    │                           run input against the input schema, text, an id, a cursor
    ├── NotFound                no turn or conversation has the id (also the model's DoesNotExist)
    │   └── InputNotFound       no input has the key (input_status; also a LookupError)
    ├── MediaError              media input is unusable: unknown type, too large, unreadable
    ├── WaitError               a wait edge was refused (cycle, self-wait, bad target)
    ├── CompactionError         a manual compaction could not summarise (e.g. empty summary)
    ├── IdempotencyConflict     an idempotency key is already used for different content
    │   ├── DeliveryConflict    ... a delivery key (send_message, post)
    │   └── KeyConflict         ... an input or steering key (ask, say, steer)
    ├── ApprovalError           no such call waits for a decision, or it was decided otherwise
    ├── AtomicBlockError        inline execution or run.wait() inside transaction.atomic()
    ├── RunTimeout              run.wait()/await_result() timed out (also a TimeoutError)
    ├── EvaluationError         a structured evaluation got no valid answer (``status`` says why)
    └── InvalidTransition       the operation is not allowed in the turn's current status
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured, ObjectDoesNotExist


class TurnkitError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigurationError(TurnkitError, ImproperlyConfigured):
    """The project or an agent definition is misconfigured."""


class AuthorizationError(TurnkitError):
    """The authorization policy refused an action."""

    def __init__(self, action: str, message: str | None = None) -> None:
        self.action = action
        super().__init__(message or f"not authorized: {action}")


class BudgetExceeded(TurnkitError):
    """A root-wide limit (iterations, tools, spend, depth, time) was reached."""

    def __init__(self, reason: str, *, limit: str) -> None:
        self.reason = reason
        self.limit = limit
        super().__init__(reason)


class ToolError(TurnkitError):
    """Raised by tool code to report a failure the model should read and react to."""


class ModelError(TurnkitError):
    """The model provider failed in a way that retrying will not fix."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        self.status = status
        self.retryable = retryable
        super().__init__(message)


class ModelRateLimited(ModelError):
    """The provider refused the request for now (429, overloaded); ``retry_after`` is the wait
    it asked for in seconds (None: it did not say). The runtime waits and sends the request
    again, up to a bound, instead of failing the turn."""

    def __init__(self, message: str, *, status: int | None = 429,
                 retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message, status=status, retryable=True)


class ModelAccessError(ModelError, ConfigurationError):
    """Credentials for a model provider are missing or were rejected."""


class LostClaim(TurnkitError):
    """The fence of a turn changed: this execution may no longer write."""

    def __init__(self, turn_id: str, fence: int | None = None) -> None:
        self.turn_id = turn_id
        self.fence = fence
        super().__init__(f"lost the claim on turn {turn_id!r} (fence {fence})")


class InputError(TurnkitError, ValueError):
    """Input to a public entry point is unusable; nothing was written.

    Run input that fails the agent's input schema (``errors`` lists the problems), text that
    is not a non-empty ``str``, a value of the wrong type where an id, a handle or a cursor
    is expected, application text holding what no database stores (a NUL character, a lone
    surrogate). Also a ``ValueError``: what ``post()`` and ``steer()`` raised for empty text
    before this class covered them.
    """

    def __init__(self, message: str, *,
                 errors: Sequence[Mapping[str, object]] | None = None) -> None:
        self.errors = errors or []
        super().__init__(message)


class NotFound(TurnkitError, ObjectDoesNotExist):
    """No turn or conversation has the given id.

    ``load_turn``/``load_run`` raise :class:`~turnkit_django.store.input_checks.TurnNotFound`
    (also a ``Turn.DoesNotExist``); ``load_conversation``, and the methods taking a conversation id,
    raise :class:`~turnkit_django.store.input_checks.ConversationNotFound` (also a
    ``Conversation.DoesNotExist``), so code catching the model's ``DoesNotExist`` keeps working.
    ``input_status`` of a key no input has raises :class:`InputNotFound`.
    """


class InputNotFound(NotFound, LookupError):
    """A conversation has no input with the given key (``input_status``).

    Also a ``LookupError``, which ``input_status`` raised before this class existed.
    """

    def __init__(self, conversation_id: str, key: str) -> None:
        self.conversation_id = conversation_id
        self.key = key
        super().__init__(
            f"conversation {conversation_id!r} has no input with key {key!r}; pass the key "
            "given to post(key=...) or ask(key=...) on this conversation (an input without a "
            "key has no receipt)")


class MediaError(TurnkitError):
    """Media given to ``paint`` or ``view_media`` cannot be used (type, size, source)."""


class WaitError(TurnkitError):
    """A wait was refused: self-wait, cycle, or a target that cannot be waited on."""


class IdempotencyConflict(TurnkitError):
    """An idempotency key is already used for different content; ``key`` is the caller's key.

    The base of :class:`DeliveryConflict` and :class:`KeyConflict`, so one ``except`` covers
    every reused key. A retry must send exactly what the first call sent; new content needs a
    new key. The message names the key only, never what is stored under it.
    """

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


class DeliveryConflict(IdempotencyConflict):
    """A delivery key (``send_message``, ``post``) is already used for a different message.

    The message names the key only: the stored delivery (its text, sender, destination) is never
    disclosed to the caller that collided with it.
    """

    def __init__(self, key: str) -> None:
        super().__init__(
            key,
            f"delivery key {key!r} is already used for a different message; use a new key for "
            "new content (a retry must send exactly the same message)"
        )


class KeyConflict(IdempotencyConflict):
    """An input or steering key (``ask``, ``say``, ``steer``) is already used for different
    content."""

    #: What a retry must repeat, by the kind of key: steering compares the principal too.
    SAME: ClassVar[dict[str, str]] = {"steering": "text and principal"}

    def __init__(self, key: str, what: str) -> None:
        super().__init__(
            key,
            f"{what} key {key!r} is already used for different content; use a new key for new "
            f"content (a retry must send exactly the same {self.SAME.get(what, 'text')})")


class ApprovalError(TurnkitError):
    """A decision on a tool call cannot be taken: no such call waits, or it was decided
    otherwise already."""


class CompactionError(TurnkitError):
    """A manual compaction could not produce a summary; nothing was changed."""


class AtomicBlockError(TurnkitError):
    """A turn was to be executed inline inside an atomic block, where it would not be durable.

    Each committed step of a turn is what makes it recoverable; inside ``transaction.atomic()``
    (``ATOMIC_REQUESTS`` wraps every view in one) the steps would be savepoints that roll back
    with the outer block, and the turn would hold its locks across model and tool calls.
    """

    #: What to do instead, by default: the advice for starting a run.
    SUBMIT = ("or use submit(), which runs the turn in the background once the outer "
              "transaction commits.")
    #: For a decision or a resume that continues an inline run in the caller's process.
    CONTINUE = ("or run turns that wait for people in the background: a run started with "
                "submit() is continued by a worker once the outer transaction commits.")

    #: Why the operation cannot run in the block, by default: it executes the turn.
    EXECUTES = ("executes the turn now and commits every step, so it cannot run inside "
                "transaction.atomic() (a view under ATOMIC_REQUESTS is inside one): its steps "
                "would roll back with the outer block.")
    #: For ``run.wait()`` and ``run.await_result()``.
    WAITS = ("waits for a worker's commits, which a caller inside transaction.atomic() (a view "
             "under ATOMIC_REQUESTS is inside one) may never see, and it would hold the block's "
             "database session the whole time.")
    #: What to do instead of waiting.
    FOLLOW = ("or return the run's id and follow it without blocking: the event stream "
              "(turnkit_django.urls), run.events() or load_run(id).refresh() later.")

    def __init__(self, operation: str, instead: str = SUBMIT, *, reason: str = EXECUTES) -> None:
        self.operation = operation
        super().__init__(
            f"{operation} {reason} Call it outside the block (decorate the view with "
            f"@transaction.non_atomic_requests), {instead}"
        )


class RunTimeout(TurnkitError, TimeoutError):
    """``run.wait(timeout=)`` or ``run.await_result(timeout=)`` gave up: the run was neither
    finished nor paused for a person when the timeout passed. Nothing was changed: the run goes
    on; ``status`` is what it was at the last check."""

    def __init__(self, run_id: str, status: str, timeout: float) -> None:
        self.run_id = run_id
        self.status = status
        self.timeout = timeout
        advice = ("is a worker running (celery -A <project> worker) and consuming turnkit's "
                  "queue? " if status == "pending" else "")
        super().__init__(
            f"run {run_id!r} is still {status} after waiting {timeout:g} s; {advice}wait "
            "again with a longer timeout, follow it without blocking (run.events(), the event "
            "stream) or cancel it (run.cancel())")


class EvaluationError(TurnkitError):
    """A structured evaluation got no valid answer.

    ``status``: ``unavailable`` (the provider did not take the request, or refused it),
    ``malformed`` (it answered, but not in the schema; the usage is kept and charged),
    ``uncertain`` (it may have taken the request: a timeout, a 5xx, a lost connection),
    ``interrupted`` (an attempt left unfinished by a worker that died, not replayed). The
    message names the provider and the HTTP status, never a key or a provider's body.
    """

    STATUSES = ("unavailable", "malformed", "uncertain", "interrupted")

    def __init__(self, message: str, *, status: str, retryable: bool = False,
                 retry_after: float | None = None, usage: Any = None, model: str = "",
                 http_status: int | None = None, reported_cost: str | None = None) -> None:
        if status not in self.STATUSES:
            raise ValueError(f"EvaluationError status must be one of {self.STATUSES}")
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.usage = usage
        self.model = model
        self.http_status = http_status
        self.reported_cost = reported_cost
        super().__init__(message)


class InvalidTransition(TurnkitError):
    """The requested operation is not allowed in the turn's current status."""

    def __init__(self, turn_id: str, status: str, operation: str) -> None:
        self.turn_id = turn_id
        self.status = status
        self.operation = operation
        super().__init__(f"cannot {operation} turn {turn_id!r}: it is {status}")


__all__ = [
    "ApprovalError",
    "AtomicBlockError",
    "AuthorizationError",
    "BudgetExceeded",
    "CompactionError",
    "ConfigurationError",
    "DeliveryConflict",
    "EvaluationError",
    "IdempotencyConflict",
    "InputError",
    "InputNotFound",
    "InvalidTransition",
    "KeyConflict",
    "LostClaim",
    "MediaError",
    "ModelAccessError",
    "ModelError",
    "ModelRateLimited",
    "NotFound",
    "RunTimeout",
    "ToolError",
    "TurnkitError",
    "WaitError",
]
