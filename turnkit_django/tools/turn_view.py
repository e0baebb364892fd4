"""``TurnView``: the turn as tools, tool policies, output policies and context contributors see it.

The object they get (``ctx.turn``, ``call.turn``, a policy's ``turn``, a contributor's argument)
is the public :class:`turnkit_django.Turn` handle; that class lives in the entry-point layer
(:mod:`turnkit_django.api.handles`), above the runtime that hands it out. This protocol names what
the lower layers and their user code rely on, so ``agents/`` and ``tools/`` annotate with it and
import nothing from above. ``TurnHandle`` satisfies it (checked where the handle registers itself
with :mod:`turnkit_django.runtime.current_turn`); the object is still the full handle.

Every public member of the handle is named here, so code typed against ``ctx.turn`` checks as it
did when it was typed as the handle. The few whose types live above this layer (the agent's
definition and audit, the cost breakdown) are typed ``Any``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Self

from ..base.serialization import JsonMapping, JsonObject
from ..clients.evaluation import Evaluation, Evaluator, Question
from ..clients.media import ImageResult, MediaAnalysis
from ..clients.protocol import ModelRequest, Usage

if TYPE_CHECKING:
    from decimal import Decimal

    from django.db.models import QuerySet

    from ..events import EventCallback
    from ..models import Event, Message, ToolExecution, Turn


class TurnView(Protocol):
    """The running turn's handle, as the code it is handed to uses it."""

    row: Turn

    @property
    def id(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def is_terminal(self) -> bool: ...

    @property
    def conversation_id(self) -> str: ...

    def refresh(self) -> Self: ...

    def cancel(self, cascade: bool = False, principal: Any = None) -> Self: ...

    def paint(self, prompt: str, **options: Any) -> ImageResult: ...

    def view_media(self, media: Any, /, *, objective: str, **options: Any) -> MediaAnalysis: ...

    def internal_evaluation(self, *, evaluator: Evaluator, model: str, purpose: str,
                            questions: Question | list[Question], policy_version: str = ...,
                            candidate: object = ..., max_attempts: int = ...,
                            timeout: float = ...) -> Evaluation: ...

    @property
    def output_metadata(self) -> JsonObject | None: ...

    @output_metadata.setter
    def output_metadata(self, value: JsonMapping | None) -> None: ...

    @property
    def evaluation_receipts(self) -> list[JsonObject]: ...

    # What the handle reads.
    @property
    def agent(self) -> Any: ...

    @property
    def audit(self) -> Any: ...

    @property
    def cost(self) -> Decimal | None: ...

    def cost_breakdown(self) -> Any: ...

    @property
    def error(self) -> JsonObject | None: ...

    @property
    def output_data(self) -> Any: ...

    @property
    def output_text(self) -> str: ...

    @property
    def usage(self) -> Usage: ...

    def messages(self) -> QuerySet[Message]: ...

    def tool_executions(self) -> QuerySet[ToolExecution]: ...

    def events(self, after: int = 0, *, limit: int | None = None,
               principal: object = ...) -> QuerySet[Event]: ...

    def preview(self) -> ModelRequest: ...

    # What the handle does.
    def execute(self, *, on_event: EventCallback | None = None) -> Self: ...

    def submit(self, callback: Any = None) -> Self: ...

    def wait_for(self, *targets: Any, principal: Any = ...) -> Self: ...

    def pause(self, *, principal: object = None, cascade: bool = False) -> Self: ...

    def resume(self, *, principal: object = None, cascade: bool = False) -> Self: ...

    def steer(self, text: str, *, key: str, principal: object = None,
              descendants: bool = False) -> JsonObject: ...

    def approve(self, call_id: str, *, principal: object = None,
                arguments: JsonObject | None = None) -> ToolExecution: ...

    def deny(self, call_id: str, *, reason: str = "",
             principal: object = None) -> ToolExecution: ...

    def pending_approvals(self, *, principal: object = None) -> list[ToolExecution]: ...


__all__ = ["TurnView"]
