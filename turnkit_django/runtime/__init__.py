"""The runtime: the loop of one claimed turn, as a persisted state machine.

* :mod:`.loop`: claim, run the phases, heartbeat (``execute``);
* :mod:`.model`, :mod:`.tools`, :mod:`.output`: the three phases; :mod:`.results` the tools
  phase's writes; :mod:`.calls` a tool call before it runs;
* :mod:`.delegation`, :mod:`.fanout`, :mod:`.coordination`: sub-agents inline and in the
  background, and the coordination tools;
* :mod:`.budget`, :mod:`.internal`, :mod:`.compaction`, :mod:`.prompts`: limits, internal model
  calls, history summaries, the system prompt;
* :mod:`.creation`, :mod:`.submission`, :mod:`.deliveries`: creating turns, handing them to
  background execution, durable messages and the wake of idle conversations.
"""

from __future__ import annotations

from .context import Suspended, TurnContext
from .loop import execute, execute_new, preview, refuse_atomic_block

__all__ = ["Suspended", "TurnContext", "execute", "execute_new", "preview", "refuse_atomic_block"]
