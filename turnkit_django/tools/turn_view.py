"""``TurnView``: the turn as tools, tool policies, output policies and context contributors see it.

The object they get (``ctx.turn``, ``call.turn``, a policy's ``turn``, a contributor's argument)
is the public :class:`turnkit_django.Turn` handle; that class lives in the entry-point layer
(:mod:`turnkit_django.api.handles`), above the runtime that hands it out. This protocol names what
the lower layers and their user code rely on, so ``agents/`` and ``tools/`` annotate with it and
import nothing from above. ``TurnHandle`` satisfies it (checked where the handle registers itself
with :mod:`turnkit_django.runtime.current_turn`); the object is still the full handle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Self

from ..base.serialization import JsonMapping, JsonObject
from ..clients.evaluation import Evaluation, Evaluator, Question
from ..clients.media import ImageResult, MediaAnalysis

if TYPE_CHECKING:
    from ..models import Turn


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


__all__ = ["TurnView"]
