"""The turn handles: ``TurnHandle`` (exported as ``turnkit_django.Turn``) and ``Run``.

A ``TurnHandle`` wraps one turn row; a ``Run`` is the root turn of a tree, whose usage and cost
aggregate the tree. Both are importable from :mod:`turnkit_django.api.handles` as well.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Self, Unpack

from django.db.models import QuerySet

from .. import services
from ..agents import AgentDefinition, Audit, get_agent
from ..base.serialization import JsonObject
from ..base.states import TERMINAL_TURN_STATUSES, TurnStatus
from ..clients import ModelRequest, Usage
from ..events import EventCallback
from ..exceptions import InvalidTransition
from ..models import Message, ToolExecution, Turn
from ..runtime import execute, execute_new, preview, refuse_atomic_block
from ..runtime.context import ToolBinding
from ..runtime.running import RunningTurn
from ..services.costs import CostBreakdown
from ..store import input_checks, reload
from .interactive import TreeControls, TurnControls
from .media import MediaMethods
from .options import ConversationOptions, RunOptions, TurnOptions, task_parts
from .options import only as _only

_UNSET: Any = object()


def _agent_for(row: Turn, agent: AgentDefinition | None) -> AgentDefinition:
    if agent is not None and agent.name == row.agent_name:
        return agent
    return get_agent(row.agent_name)


class TurnHandle(TurnControls, RunningTurn, MediaMethods):
    """A turn of a conversation: one unit of agent work with its own status and output."""

    def __init__(self, row: Turn, agent: AgentDefinition | None = None,
                 running: Any = None, *, binding: ToolBinding | None = None) -> None:
        self.row = row
        self._agent = agent
        self._running = running  # the claimed turn's context, in tools and output policies
        self._on_event: EventCallback | None = None
        #: Set on the handle a tool gets (``ctx.turn``): media calls write under its claim.
        self.binding = binding

    @property
    def id(self) -> str:
        return self.row.pk

    @property
    def status(self) -> str:
        return self.row.status

    @property
    def is_terminal(self) -> bool:
        return self.row.status in TERMINAL_TURN_STATUSES

    @property
    def agent(self) -> AgentDefinition:
        self._agent = _agent_for(self.row, self._agent)
        return self._agent

    @property
    def conversation_id(self) -> str:
        return self.row.conversation_id

    @property
    def output_text(self) -> str:
        return self.row.output_text

    @property
    def output_data(self) -> Any:
        return self.row.output_data

    @property
    def error(self) -> JsonObject | None:
        return self.row.error

    @property
    def usage(self) -> Usage:
        return Usage.from_dict(self.row.usage)

    @property
    def cost(self) -> Decimal | None:
        return None if self.row.cost_unknown else self.row.cost

    @property
    def audit(self) -> Audit | None:
        """The output policies' verdict, when the agent has output policies."""
        return None if self.row.audit is None else Audit.from_json(self.row.audit)

    def cost_breakdown(self) -> CostBreakdown:
        """Usage and cost per model (a run's: per model and per turn of its tree)."""
        return services.cost_breakdown(turn_id=self.row.pk)

    def refresh(self) -> Self:
        """Read the turn's row again (its status, output, usage...)."""
        reload(self.row)
        return self

    def messages(self) -> QuerySet[Message]:
        """The turn's input and its own messages, in sequence order."""
        return Message.objects.visible_to(self.row)

    def tool_executions(self) -> QuerySet[ToolExecution]:
        return ToolExecution.objects.filter(turn_id=self.row.pk).order_by("created_at")

    def preview(self) -> ModelRequest:
        """The exact next model request, built without calling the model or writing anything."""
        return preview(self.row.pk, self.agent)

    def execute(self, *, on_event: EventCallback | None = None) -> Self:
        """Execute the pending turn inline, in this process, and return it finished."""
        input_checks.event_callback(on_event)
        refuse_atomic_block("turn.execute()")
        self.refresh()
        if self.row.status != TurnStatus.PENDING:
            raise InvalidTransition(self.row.pk, self.row.status, "execute")
        services.join_for_inline(self.row)
        execute(self.row.pk, agent=self.agent, on_event=on_event or self._on_event,
                root_id=self.row.root_turn_id)
        return self.refresh()

    def submit(self, callback: Any = None) -> Self:
        """Hand the turn to background execution; returns at once."""
        input_checks.prepared_callback(self._on_event)
        self.row = services.submit(self.row, callback=input_checks.callback_row(callback))
        return self

    def wait_for(self, *targets: Any, principal: Any = _UNSET) -> Self:
        """Run only after ``targets`` finish, given their results as input; call before submit."""
        options = {} if principal is _UNSET else {"principal": principal}
        self.row = services.add_wait(self.row, targets, **options)
        return self

    def cancel(self, cascade: bool = False, principal: Any = None) -> Self:
        """Cancel the turn (and with ``cascade`` its descendants); a finished turn is unchanged."""
        services.cancel(self.row, cascade=cascade, principal=principal)
        return self.refresh()

    def __repr__(self) -> str:
        return f"<Turn {self.row.pk} {self.row.status}>"


class Run(TreeControls, TurnHandle):
    """One bounded task: the root turn of a tree; usage and cost aggregate the tree."""

    @classmethod
    def create(
        cls,
        agent: AgentDefinition,
        task: str,
        *,
        input: Any = None,
        on_event: EventCallback | None = None,
        prompt_mode: str | None = None,
        _submitted: bool = False,
        _turn_id: str | None = None,
        **options: Unpack[TurnOptions | ConversationOptions],  # type: ignore[misc]
    ) -> Run:
        _only("Run.create", {**options, "input": input, "on_event": on_event,
                             "prompt_mode": prompt_mode}, RunOptions)
        input_checks.event_callback(on_event)
        validated = agent.validate_input(input)
        # Runs default to task mode unless the agent chose its own mode.
        mode = prompt_mode or agent.prompt_mode or "task"
        row = services.new_turn(agent, task_parts(task, validated), prompt_mode=mode,
                                submit=_submitted, turn_id=_turn_id, **options)
        run = cls(row, agent)
        run._on_event = on_event
        return run

    @classmethod
    def start(cls, agent: AgentDefinition, task: str, *, input: Any = None,
              on_event: EventCallback | None = None, prompt_mode: str | None = None,
              **options: Any) -> Run:
        """Create the run claimed by this process and execute it inline (``agent.run``)."""
        _only("Run.start", {**options, "input": input, "on_event": on_event,
                            "prompt_mode": prompt_mode}, RunOptions)
        input_checks.event_callback(on_event)
        parts = task_parts(task, agent.validate_input(input))
        mode = prompt_mode or agent.prompt_mode or "task"
        return cls(execute_new(agent, parts, on_event=on_event, prompt_mode=mode, **options),
                   agent)

    @property
    def root_turn_id(self) -> str:
        return self.row.root_turn_id

    @property
    def turn(self) -> TurnHandle:
        """The root turn alone (``run.turn.paint(...)``, ``run.turn.messages()``)."""
        turn = TurnHandle(self.row, self._agent)
        turn._on_event = self._on_event
        return turn

    def turns(self) -> QuerySet[Turn]:
        """The root and its descendants."""
        return Turn.objects.tree(self.row.root_turn_id)

    def messages(self, *, principal: Any = _UNSET) -> QuerySet[Message]:
        """The tree's transcript: its turns' input and own messages; with ``principal=`` only
        the conversations it may read (:func:`~turnkit_django.services.reading.tree_messages`)."""
        return services.tree_messages(self.row, principal, check=principal is not _UNSET)

    def tool_executions(self) -> QuerySet[ToolExecution]:
        return ToolExecution.objects.filter(turn__root_turn_id=self.row.root_turn_id).order_by(
            "created_at")

    @property
    def usage(self) -> Usage:
        return self.cost_breakdown().usage

    @property
    def cost(self) -> Decimal | None:
        return self.cost_breakdown().cost

    def cost_breakdown(self) -> CostBreakdown:
        return services.cost_breakdown(self.row.root_turn_id)

    def __repr__(self) -> str:
        return f"<Run {self.row.pk} {self.row.status}>"


__all__ = ["Run", "TurnHandle"]
