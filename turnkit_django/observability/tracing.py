"""Traces through OpenTelemetry's tracing API, with ``TURNKIT["TRACING"]`` on and
``opentelemetry-api`` installed.

Off (the default), every function here is one settings check and OpenTelemetry is never
imported. On, spans follow the GenAI semantic conventions (see docs/howto/integrations.md):

- ``invoke_agent <agent>`` for each execution of a turn (a resumed turn has one per worker run);
- ``chat <model>`` for each model call (``gen_ai.operation.name``, ``gen_ai.provider.name`` and
  ``gen_ai.system``, ``gen_ai.request.model``, ``gen_ai.response.model``,
  ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``);
- ``execute_tool <name>`` for each tool call (``gen_ai.tool.name``, ``gen_ai.tool.call.id``).

Every span carries ``turnkit.turn_id`` and ``turnkit.agent``. A new turn records the W3C trace
context it was created in (``Turn.options["trace"]``, :func:`carrier`): the caller's span for a
turn ``submit()`` creates, the running turn's span for a sub-agent or a delivery's continuation.
The worker's turn span continues it, so one trace runs from the request through the workers.
Message text (model input and output, tool arguments and results, error messages) is put in
spans only with ``TRACING = {"capture_content": True}``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..base.serialization import JsonObject
from ..conf import turnkit_settings
from ..conf.trace_settings import TracingOptions
from ..messages import dump_parts

if TYPE_CHECKING:
    from ..clients import ModelRequest, ModelResponse

#: The keys of a recorded trace context (W3C Trace Context headers).
CONTEXT_KEYS = ("traceparent", "tracestate")

_provider: Any = None  # the provider given to configure(); None: the global one


@dataclass(frozen=True)
class _Otel:
    trace: Any  # the opentelemetry.trace module
    tracer: Any
    propagator: Any


@functools.cache
def _otel() -> _Otel | None:
    try:
        # Optional dependency, imported on first use: no cost, no error without it.
        from opentelemetry import trace  # noqa: PLC0415
        from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
            TraceContextTextMapPropagator,
        )
    except ImportError:
        return None
    provider = _provider if _provider is not None else trace.get_tracer_provider()
    return _Otel(trace, provider.get_tracer("turnkit_django"), TraceContextTextMapPropagator())


def configure(tracer_provider: Any = None) -> bool:
    """Take spans' tracer from ``tracer_provider`` (None: the global one, the default); return
    whether OpenTelemetry is installed. Spans are made only while ``TRACING`` is on."""
    global _provider
    _provider = tracer_provider
    _otel.cache_clear()
    return _otel() is not None


def _active() -> tuple[_Otel, TracingOptions] | None:
    options = turnkit_settings.TRACING
    if options is None:
        return None
    otel = _otel()
    return None if otel is None else (otel, options)


def enabled() -> bool:
    """Whether spans are made: ``TRACING`` is on and OpenTelemetry is installed."""
    return _active() is not None


class _TurnSpan:
    def __init__(self, turn_id: str, span: Any, otel: _Otel, options: TracingOptions) -> None:
        self.turn_id, self.span, self.otel, self.options = turn_id, span, otel, options

    def ended(self, transition: str | None) -> None:
        """How this execution ended its claim (``publish``, ``fail``, ``suspend`` ...)."""
        if transition:
            self.span.set_attribute("turnkit.turn.transition", transition)

    def failed(self, error: object) -> None:
        record = error if isinstance(error, Mapping) else {}
        _set_error(self.span, self.otel, self.options, str(record.get("type") or "error"),
                   str(record.get("message") or ""))


class _Null:
    """What a span function yields when tracing is off: every record is a no-op."""

    def ended(self, transition: str | None) -> None: ...
    def response(self, response: ModelResponse) -> None: ...
    def outcome(self, status: str, content: object) -> None: ...


NULL = _Null()
#: The turn whose span runs in this context (a sub-agent's turn run inline replaces it).
_running: ContextVar[_TurnSpan | None] = ContextVar("turnkit_turn_span", default=None)


def carrier(inherited: object = None) -> JsonObject | None:
    """The trace context a new turn records: the running turn's span when a turn runs here (a
    sub-agent, a continuation a delivery wakes), else ``inherited`` (its parent's or tree's
    recorded context, for a turn maintenance creates), else the caller's current span; None
    when tracing is off or there is no span."""
    active = _active()
    if active is None:
        return None
    if _running.get() is None and isinstance(inherited, Mapping) and inherited.get(
            "traceparent"):
        return {k: str(inherited[k]) for k in CONTEXT_KEYS if inherited.get(k)}
    found: dict[str, str] = {}
    active[0].propagator.inject(found)
    return {**found} if found else None


def _base(turn_id: str, agent: str, operation: str) -> dict[str, Any]:
    return {"gen_ai.operation.name": operation, "turnkit.turn_id": turn_id,
            "turnkit.agent": agent}


def _set_error(span: Any, otel: _Otel, options: TracingOptions, type_: str,
               message: str) -> None:
    span.set_attribute("error.type", type_)
    # The message can quote the model or a tool (message text): only with capture_content.
    span.set_status(otel.trace.Status(otel.trace.StatusCode.ERROR,
                                      f"{type_}: {message}" if options.capture_content
                                      and message else type_))


@contextmanager
def _span(otel: _Otel, options: TracingOptions, name: str, attributes: dict[str, Any],
          kind: str = "INTERNAL", context: Any = None) -> Iterator[Any]:
    with otel.tracer.start_as_current_span(
            name, context=context, kind=getattr(otel.trace.SpanKind, kind),
            attributes=attributes, record_exception=False,
            set_status_on_exception=False) as span:
        try:
            yield span
        except BaseException as exc:
            _set_error(span, otel, options, type(exc).__name__, str(exc))
            if options.capture_content:
                span.record_exception(exc)
            raise


@contextmanager
def turn_span(turn_id: str, agent: str, recorded: object, *, model: str = "",
              conversation_id: str = "") -> Iterator[_TurnSpan | _Null]:
    """The span of one execution of a turn, current while it runs; its parent is the running
    turn's span (a sub-agent run inline), else the context the turn ``recorded``, else the
    caller's current span."""
    active = _active()
    if active is None:
        yield NULL
        return
    otel, options = active
    context = None
    if _running.get() is None and isinstance(recorded, Mapping) and recorded.get("traceparent"):
        context = otel.propagator.extract({k: str(recorded[k]) for k in CONTEXT_KEYS
                                           if recorded.get(k)})
    attributes = {**_base(turn_id, agent, "invoke_agent"), "gen_ai.agent.name": agent}
    if model:
        attributes["gen_ai.request.model"] = model
    if conversation_id:
        attributes["gen_ai.conversation.id"] = conversation_id
    with _span(otel, options, f"invoke_agent {agent}", attributes, context=context) as span:
        handle = _TurnSpan(turn_id, span, otel, options)
        token = _running.set(handle)
        try:
            yield handle
        finally:
            _running.reset(token)


def turn_event(type_: str, turn_id: str | None, payload: Mapping[str, Any]) -> None:
    """A turn's failure sets its span's status (when its span runs here)."""
    if type_ != "turn.failed":
        return
    running = _running.get()
    if running is not None and running.turn_id == turn_id:
        running.failed(payload.get("error"))


def _json(value: object) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


class _ModelSpan(_Null):
    def __init__(self, span: Any, options: TracingOptions) -> None:
        self.span, self.options = span, options

    def response(self, response: ModelResponse) -> None:
        set_ = self.span.set_attribute
        if response.model:
            set_("gen_ai.response.model", response.model)
        if response.stop_reason:
            set_("gen_ai.response.finish_reasons", (response.stop_reason,))
        if response.usage_reported:
            set_("gen_ai.usage.input_tokens", response.usage.input_tokens)
            set_("gen_ai.usage.output_tokens", response.usage.output_tokens)
        if self.options.capture_content:
            set_("gen_ai.output.messages", _json([{
                "role": "assistant", "parts": dump_parts(response.parts),
                "finish_reason": response.stop_reason}]))


@contextmanager
def model_span(turn_id: str, agent: str, provider: str,
               request: ModelRequest) -> Iterator[_ModelSpan | _Null]:
    """The span of one model call; record its response with ``.response(response)``."""
    active = _active()
    if active is None:
        yield NULL
        return
    otel, options = active
    attributes = {**_base(turn_id, agent, "chat"), "gen_ai.provider.name": provider,
                  "gen_ai.system": provider, "gen_ai.request.model": request.model}
    if options.capture_content:
        attributes["gen_ai.input.messages"] = _json(
            [{"role": m.role, "parts": dump_parts(m.parts)} for m in request.messages])
        instructions = "\n\n".join(filter(None, (request.stable_instructions,
                                                  request.dynamic_instructions)))
        if instructions:
            attributes["gen_ai.system_instructions"] = instructions
    with _span(otel, options, f"chat {request.model}", attributes, "CLIENT") as span:
        yield _ModelSpan(span, options)


class _ToolSpan(_Null):
    def __init__(self, span: Any, otel: _Otel, options: TracingOptions) -> None:
        self.span, self.otel, self.options = span, otel, options

    def outcome(self, status: str, content: object) -> None:
        self.span.set_attribute("turnkit.tool.status", status)
        if self.options.capture_content:
            self.span.set_attribute("gen_ai.tool.call.result", _json(content))
        if status == "failed":
            record = content if isinstance(content, Mapping) else {}
            _set_error(self.span, self.otel, self.options, str(record.get("error") or "error"),
                       str(record.get("message") or ""))


@contextmanager
def tool_span(turn_id: str, agent: str, name: str, call_id: str,
              arguments: object) -> Iterator[_ToolSpan | _Null]:
    """The span of one tool call; record its result with ``.outcome(status, content)``."""
    active = _active()
    if active is None:
        yield NULL
        return
    otel, options = active
    attributes = {**_base(turn_id, agent, "execute_tool"), "gen_ai.tool.name": name,
                  "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function"}
    if options.capture_content:
        attributes["gen_ai.tool.call.arguments"] = _json(arguments)
    with _span(otel, options, f"execute_tool {name}", attributes) as span:
        yield _ToolSpan(span, otel, options)


__all__ = ["CONTEXT_KEYS", "NULL", "carrier", "configure", "enabled", "model_span",
           "tool_span", "turn_event", "turn_span"]
