"""Images and media for applications: ``Turn.paint`` and ``Turn.view_media``, and their values.

The turn handle gets its two media methods from :class:`MediaMethods`; what they do (the intent
recorded before the paid call, the two ways in, crashes and budgets) is in
:mod:`turnkit_django.runtime.media`. This module also gathers what applications use around them:

* :func:`to_media` normalises a path, an https or ``data:`` URL, bytes with a MIME type or a
  Django ``File`` into a :class:`MediaInput` (check an upload in a form with it);
* :func:`image_url` and :func:`open_image` read a recorded image back from its
  :class:`~turnkit_django.messages.ImagePart`;
* :func:`project_media` is what later model calls see of media messages: text only.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Self

from ..clients.media import GeneratedImage, ImageResult, MediaAnalysis, MediaInput
from ..clients.media_input import MAX_BYTES, MAX_MEDIA_ITEMS, to_media, to_media_list
from ..runtime import media as operations
from ..runtime.media_projection import describe, project_media
from ..store.media import image_url, open_image

if TYPE_CHECKING:
    from ..agents import AgentDefinition
    from ..events import EventCallback
    from ..models import Turn
    from ..runtime.context import ToolBinding

#: Parameters of the runtime's operations the handle fills in itself.
_INTERNAL = frozenset({"row", "agent", "binding", "on_event", "media", "prompt"})


class MediaMethods:
    """``paint`` and ``view_media`` of the turn handle (:class:`turnkit_django.Turn`)."""

    if TYPE_CHECKING:
        row: Turn
        binding: ToolBinding | None
        _on_event: EventCallback | None

        @property
        def agent(self) -> AgentDefinition: ...

        def refresh(self) -> Self: ...

    def paint(self, prompt: str, **options: Any) -> ImageResult:
        """Generate or edit images, recorded on this turn (see the Images and media guide)."""
        return self._media(operations.paint, prompt, **options)

    def view_media(self, media: Any, /, *, objective: str, **options: Any) -> MediaAnalysis:
        """Analyse images or PDFs for ``objective``, recorded on this turn."""
        return self._media(
            operations.view_media, media, objective=objective, **options)

    def _media(self, operation: Any, *args: Any, **options: Any) -> Any:
        known = sorted(set(inspect.signature(operation).parameters) - _INTERNAL)
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise TypeError(f"{operation.__name__}() got unexpected keyword arguments {unknown}; "
                            f"it takes {', '.join(known)}")
        try:
            return operation(self.row, self.agent, *args, binding=self.binding,
                             on_event=self._on_event, **options)
        finally:
            if self.binding is None:  # a pending turn was claimed: it has moved on
                self.refresh()


__all__ = ["MAX_BYTES", "MAX_MEDIA_ITEMS", "GeneratedImage", "ImageResult", "MediaAnalysis",
           "MediaInput", "MediaMethods", "describe", "image_url", "open_image", "project_media",
           "to_media", "to_media_list"]
