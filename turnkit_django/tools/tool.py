"""Tool definitions: the ``@tool`` decorator, the ``Tool`` class, and ``ToolContext``."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ..base.error_records import ErrorRecord
from ..base.serialization import JsonMapping, JsonObject, JsonValue, render_result
from ..clients.protocol import ToolSpec
from ..exceptions import ConfigurationError, ToolError
from .turn_view import TurnView

Recovery = Literal["unknown", "replay_safe"]
Terminal = bool | str | Callable[[Any], str]
#: Whether a call waits for a person's approval: always, or decided per call from its
#: validated arguments and its ToolContext.
Approval = bool | Callable[[Any, "ToolContext"], bool]
#: The exceptions a tool's calls are retried after: a class or a tuple of classes.
RetryOn = type[Exception] | tuple[type[Exception], ...] | None
#: The longest tool name providers accept (and so the longest a tool may have).
NAME_LENGTH = 64
_NAME = re.compile(rf"^[a-zA-Z][a-zA-Z0-9_-]{{0,{NAME_LENGTH - 1}}}$")


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows about the call it serves. ``principal`` comes from the application.

    ``turn`` is the :class:`turnkit_django.Turn` handle of the turn running the tool (typed as
    the :class:`~turnkit_django.tools.turn_view.TurnView` protocol).
    """

    turn: TurnView
    conversation_id: str
    execution_id: str
    tool_call_id: str
    #: Whatever the application passed as the turn's principal.
    principal: Any = None
    context: JsonObject = field(default_factory=dict)

    @property
    def idempotency_key(self) -> str:
        """A key stable for this execution across worker crashes and replays."""
        return f"turnkit:{self.execution_id}"


class _StrictArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Tool:
    """Base class for tools with dependencies; subclass with ``name``, ``Args`` and ``call``."""

    name: str = ""
    description: str = ""
    Args: type[BaseModel] = _StrictArgs
    terminal: Terminal = False
    recovery: Recovery = "unknown"
    #: Seconds a call may take before its turn stops waiting for it (None: TOOL_TIMEOUT).
    timeout: float | None = None
    #: Declared by tools that change nothing (trusted metadata, not a sandbox); specialists
    #: such as ``oracle`` accept only read-only tools.
    read_only: bool = False
    #: The one call that may still run from the response that exhausted the spend limit (a
    #: final save); only on a terminal, replay-safe tool.
    budget_completion: bool = False
    #: A call waits for a person's approval before it runs (see ``run.approve``).
    approval: Approval = False
    #: Seconds an approval request stays open; maintenance denies it when they pass.
    approval_timeout: float | None = None
    #: Durable retries (replay-safe tools only): how many times a failed call is tried again,
    #: after which exceptions (None: any but ToolError), and the first backoff in seconds (it
    #: doubles per retry, with jitter, capped; see runtime.retries).
    retries: int = 0
    retry_on: RetryOn = None
    backoff: float = 1.0
    #: Set on built-in tools the runtime executes itself (sub-agents, coordination tools).
    builtin: ClassVar[str | None] = None

    def call(self, ctx: ToolContext, args: Any) -> object:
        """Run the tool; ``args`` is an instance of ``Args`` (subclasses annotate it so)."""
        raise NotImplementedError(f"{type(self).__name__}.call() is not implemented")

    # -- derived ---------------------------------------------------------------

    @property
    def tool_name(self) -> str:
        return self.name or _snake(type(self).__name__)

    @property
    def tool_description(self) -> str:
        return self.description or inspect.cleandoc(type(self).__doc__ or "") or self.tool_name

    @property
    def replay_safe(self) -> bool:
        return self.recovery == "replay_safe"

    def spec(self) -> ToolSpec:
        return ToolSpec(self.tool_name, self.tool_description, arguments_schema(self.Args))

    def validate(self, arguments: JsonMapping) -> BaseModel:
        """Validate model-supplied arguments; raises pydantic's ``ValidationError``."""
        return self.Args.model_validate(arguments)

    def retryable(self, exc: Exception) -> bool:
        """Whether a call that raised ``exc`` is tried again (while retries are left)."""
        if self.retries <= 0:
            return False
        if self.retry_on is None:
            return not isinstance(exc, ToolError)
        return isinstance(exc, self.retry_on)

    def needs_approval(self, args: Any, ctx: ToolContext) -> bool:
        """Whether this call (its validated arguments) waits for a person's approval."""
        approval = self.approval
        if callable(approval):
            return approval(args, ctx) is True
        return approval is True

    def completion_text(self, result: object) -> str:
        """The turn's output text when this terminal tool ends it."""
        terminal = self.terminal
        if isinstance(terminal, str):
            return terminal
        if callable(terminal):
            return str(terminal(result))
        return result if isinstance(result, str) else render_result(result)

    def check(self) -> None:
        """Raise ConfigurationError if the definition is unusable."""
        if not isinstance(self.tool_name, str) or not _NAME.fullmatch(self.tool_name):
            raise ConfigurationError(
                f"tool name {self.tool_name!r} must match {_NAME.pattern} (provider limit)"
            )
        if self.recovery not in ("unknown", "replay_safe"):
            raise ConfigurationError(
                f"tool {self.tool_name!r}: recovery must be 'unknown' or 'replay_safe'"
            )
        timeout = self.timeout
        if timeout is not None and (not isinstance(timeout, int | float)
                                    or isinstance(timeout, bool) or timeout <= 0):
            raise ConfigurationError(
                f"tool {self.tool_name!r}: timeout must be a positive number of seconds or "
                f"None, got {timeout!r}"
            )
        if not isinstance(self.read_only, bool):
            raise ConfigurationError(f"tool {self.tool_name!r}: read_only must be True or False")
        if self.budget_completion and not (self.terminal and self.replay_safe):
            raise ConfigurationError(
                f"tool {self.tool_name!r}: budget_completion=True needs terminal=True and "
                "recovery='replay_safe' (it is the final save after the spend limit, so it must "
                "end the turn and be safe to run again after a crash)"
            )
        if not (isinstance(self.approval, bool) or callable(self.approval)):
            raise ConfigurationError(
                f"tool {self.tool_name!r}: approval must be True, False or a callable "
                f"(args, ctx) -> bool, got {self.approval!r}")
        wait = self.approval_timeout
        if wait is not None and (not isinstance(wait, int | float) or isinstance(wait, bool)
                                 or wait <= 0):
            raise ConfigurationError(
                f"tool {self.tool_name!r}: approval_timeout must be a positive number of "
                f"seconds or None, got {wait!r}")
        _check_retries(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.tool_name!r}>"


class FunctionTool(Tool):
    """A tool built from a function by ``@tool``."""

    def __init__(
        self,
        func: Callable[..., object],
        *,
        name: str | None = None,
        description: str | None = None,
        terminal: Terminal = False,
        recovery: Recovery = "unknown",
        timeout: float | None = None,
        read_only: bool = False,
        budget_completion: bool = False,
        approval: Approval = False,
        approval_timeout: float | None = None,
        retries: int = 0,
        retry_on: RetryOn = None,
        backoff: float = 1.0,
    ) -> None:
        self.func = func
        self.retries = retries
        self.retry_on = (retry_on,) if isinstance(retry_on, type) else retry_on
        self.backoff = backoff
        self.approval = approval
        self.approval_timeout = approval_timeout
        self.name = name or func.__name__
        self.description = description or inspect.cleandoc(func.__doc__ or "") or self.name
        self.terminal = terminal
        self.recovery = recovery
        self.timeout = timeout
        self.read_only = read_only
        self.budget_completion = budget_completion
        self.Args, self._takes_ctx = _args_from_signature(func, self.name)
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def call(self, ctx: ToolContext, args: BaseModel) -> object:
        kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        if self._takes_ctx:
            return self.func(ctx, **kwargs)
        return self.func(**kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (handy in unit tests of the tool itself)."""
        return self.func(*args, **kwargs)


def _args_from_signature(
    func: Callable[..., object], name: str
) -> tuple[type[BaseModel], bool]:
    signature = inspect.signature(func)
    try:
        hints = get_type_hints(func, include_extras=True)
    except NameError as exc:
        raise ConfigurationError(f"tool {name!r}: cannot resolve type hints: {exc}") from exc
    params = list(signature.parameters.values())
    takes_ctx = bool(params) and (
        params[0].name in ("ctx", "context") or hints.get(params[0].name) is ToolContext
    )
    if takes_ctx:
        params = params[1:]
    fields: dict[str, Any] = {}  # create_model(**fields) needs Any: its other keywords share it
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationError(f"tool {name!r}: *args and **kwargs are not supported")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, default)
    model = create_model(
        f"{_camel(name)}Args", __base__=_StrictArgs, **fields
    )
    return model, takes_ctx


@overload
def tool(func: Callable[..., object], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    terminal: Terminal = False,
    recovery: Recovery = "unknown",
    timeout: float | None = None,
    read_only: bool = False,
    budget_completion: bool = False,
    approval: Approval = False,
    approval_timeout: float | None = None,
    retries: int = 0,
    retry_on: RetryOn = None,
    backoff: float = 1.0,
) -> Callable[[Callable[..., object]], FunctionTool]: ...


def tool(
    func: Callable[..., object] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    terminal: Terminal = False,
    recovery: Recovery = "unknown",
    timeout: float | None = None,
    read_only: bool = False,
    budget_completion: bool = False,
    approval: Approval = False,
    approval_timeout: float | None = None,
    retries: int = 0,
    retry_on: RetryOn = None,
    backoff: float = 1.0,
) -> FunctionTool | Callable[[Callable[..., object]], FunctionTool]:
    """Turn a function into a tool. Its docstring is the description given to the model."""

    def build(f: Callable[..., object]) -> FunctionTool:
        built = FunctionTool(f, name=name, description=description, terminal=terminal,
                             recovery=recovery, timeout=timeout, read_only=read_only,
                             budget_completion=budget_completion, approval=approval,
                             approval_timeout=approval_timeout, retries=retries,
                             retry_on=retry_on, backoff=backoff)
        built.check()
        return built

    return build(func) if func is not None else build


@functools.lru_cache(maxsize=1024)
def arguments_schema(args: type[BaseModel]) -> JsonObject:
    """The JSON schema of an arguments model, built once per model (it is asked every step)."""
    schema: JsonObject = args.model_json_schema()
    schema.pop("title", None)
    schema.setdefault("properties", {})
    return schema


def validation_error(tool_name: str, exc: ValidationError) -> ErrorRecord:
    """A readable tool error for invalid arguments: what was wrong, per field."""
    problems: list[JsonValue] = [
        {"field": ".".join(str(p) for p in err["loc"]) or "(arguments)", "problem": err["msg"]}
        for err in exc.errors(include_url=False, include_input=False)
    ]
    return ErrorRecord("invalid_arguments",
                       f"The arguments for {tool_name!r} are invalid; fix them and call again.",
                       {"problems": problems})


def _check_retries(tool: Tool) -> None:
    """Raise ConfigurationError unless ``retries``, ``retry_on`` and ``backoff`` are usable."""
    name, retries, retry_on, backoff = tool.tool_name, tool.retries, tool.retry_on, tool.backoff
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigurationError(
            f"tool {name!r}: retries must be a non-negative whole number (how many times a "
            f"failed call is tried again), got {retries!r}")
    classes = (retry_on,) if isinstance(retry_on, type) else retry_on
    if classes is not None and (not isinstance(classes, tuple) or not classes or not all(
            isinstance(c, type) and issubclass(c, Exception) for c in classes)):
        raise ConfigurationError(
            f"tool {name!r}: retry_on must be an exception class or a non-empty tuple of "
            f"them, such as (TimeoutError, ConnectionError), got {retry_on!r}")
    if isinstance(backoff, bool) or not isinstance(backoff, int | float) or not (
            0 <= backoff < float("inf")):
        raise ConfigurationError(
            f"tool {name!r}: backoff must be a non-negative number of seconds (the wait before "
            f"the first retry; it doubles for each next one), got {backoff!r}")
    if retries and not tool.replay_safe:
        raise ConfigurationError(
            f"tool {name!r}: retries={retries} needs recovery='replay_safe': a retry runs the "
            "call again, which could repeat an effect the failed attempt already had (a charge, "
            "an email). Make the tool safe to run twice (use ctx.idempotency_key with the "
            "service it calls) and declare recovery='replay_safe', or drop retries= and let the "
            "model decide what to do with the error")


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[_\-]", name) if part)
