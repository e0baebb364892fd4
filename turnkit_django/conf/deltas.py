"""Live output: the chunks of a model response as it is written (:class:`Delta`), and the
``TURNKIT["STREAMING"]`` setting (system check ``turnkit.E026``), cleaned here for
:mod:`turnkit_django.conf`.

Deltas are ephemeral: never rows. The message the step commits is built from the completed
stream and is the truth; it supersedes the deltas. A delta carries the turn, the claim's fence
and a running index, so a reader drops partial text of an older fence (a turn recovered after a
crash streams its step again under a new fence).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

from .setting_errors import InvalidSetting, SettingProblem

DeltaKind = Literal["text", "tool_arguments"]
#: What a streaming client calls for each chunk: ``on_chunk(kind, text)``.
ChunkCallback = Callable[[DeltaKind, str], None]


@dataclass(frozen=True)
class Delta:
    """A chunk of a model response while it streams: text, or a piece of a tool call's JSON
    arguments (``kind``), of turn ``turn_id`` under the claim ``fence``, numbered ``index``."""

    turn_id: str
    fence: int
    index: int
    kind: DeltaKind
    text: str
    is_delta: ClassVar[bool] = True

    def as_dict(self) -> dict[str, object]:
        return {"turn_id": self.turn_id, "fence": self.fence, "index": self.index,
                "kind": self.kind, "text": self.text}


#: What ``agent.run(..., on_delta=)`` and ``conv.ask(..., on_delta=)`` take.
DeltaCallback = Callable[[Delta], object]


def clean_streaming(key: str, value: object) -> bool:
    """True (ask providers whose client can stream to do so when someone listens) or False."""
    if isinstance(value, bool):
        return value
    raise InvalidSetting(SettingProblem(
        "turnkit.E026", key, f"TURNKIT[{key!r}] must be True or False; got {value!r}.",
        "True streams model output to on_delta= listeners where the client can; False never "
        "asks a provider to stream."))


__all__ = ["ChunkCallback", "Delta", "DeltaCallback", "DeltaKind", "clean_streaming"]
