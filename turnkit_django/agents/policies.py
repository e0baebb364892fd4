"""Output policies: check a turn's output, then publish, fail, or ask the model to revise.

A policy is a callable, an object with ``check()``, a markdown policy file (judged by a model
call charged to the turn) or a skill (judged the same way), or a list of these. A policy returns
``None`` or ``True`` when the output is clean; ``False``, a string, a dict, a :class:`Violation`
or a list of them report violations.

In a turn, the output phase (:mod:`turnkit_django.runtime.output`) runs the policies on the
candidate output. With violations left and
``output_retries`` not used up, one fenced transaction appends a revision request and sends the
turn back to the model phase, recording the count in ``Turn.state["revisions"]``; a crash after it
resumes at the model phase without a second request. Judge verdicts are stored in the state with
their usage, so a resumed turn never pays twice for one verdict.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..base.serialization import JsonMapping, JsonObject
from ..clients.protocol import Client, ModelRequest, ModelResponse
from ..exceptions import BudgetExceeded, ConfigurationError, LostClaim
from ..messages import ChatMessage, TextPart
from .prompting import data_block, escape, render_value
from .skills import Skill, read_prompt_file

logger = logging.getLogger("turnkit_django.policies")

Mode = Literal["fail", "report"]
MODES: tuple[Mode, ...] = ("fail", "report")
POLICY_SUFFIXES = (".md", ".markdown", ".txt")
_CONTEXT_KEYWORDS = ("turn", "output_text", "output_data")

JUDGE_INSTRUCTIONS = (
    "You review an output against a policy. Judge only what the policy says; quote the "
    "offending text in each violation. Reply with JSON only: "
    '{"approved": true|false, "violations": [{"rule": "...", "message": "..."}]}.'
)
VERDICT_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "violations": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"rule": {"type": "string"}, "message": {"type": "string"}},
                "required": ["rule", "message"],
            },
        },
    },
    "required": ["approved", "violations"],
}


@dataclass(frozen=True)
class Violation:
    """One broken rule: which rule, what is wrong, and which policy found it."""

    rule: str
    message: str
    policy: str = ""
    metadata: JsonObject = field(default_factory=dict)

    def as_json(self) -> JsonObject:
        return {"rule": self.rule, "message": self.message, "policy": self.policy,
                "metadata": self.metadata}

    @classmethod
    def from_json(cls, data: JsonMapping) -> Violation:
        metadata = data.get("metadata")
        return cls(str(data.get("rule", "")), str(data.get("message", "")),
                   str(data.get("policy", "")),
                   dict(metadata) if isinstance(metadata, dict) else {})


@dataclass(frozen=True)
class Audit:
    """The result of running output policies: clean, or the violations found."""

    violations: tuple[Violation, ...] = ()
    policies: tuple[str, ...] = ()
    mode: str | None = None
    revisions: int = 0
    history: tuple[Audit, ...] = ()

    @property
    def clean(self) -> bool:
        return not self.violations

    def as_json(self) -> JsonObject:
        return {"clean": self.clean, "mode": self.mode, "revisions": self.revisions,
                "policies": list(self.policies),
                "violations": [v.as_json() for v in self.violations],
                "history": [a.as_json() for a in self.history]}

    @classmethod
    def from_json(cls, data: JsonMapping) -> Audit:
        mode, revisions = data.get("mode"), data.get("revisions")
        return cls(
            tuple(Violation.from_json(v) for v in _objects(data.get("violations"))),
            tuple(str(p) for p in _items(data.get("policies"))),
            mode if isinstance(mode, str) else None,
            int(revisions) if isinstance(revisions, int | float | str) and revisions else 0,
            tuple(cls.from_json(a) for a in _objects(data.get("history"))),
        )


def _items(value: object) -> list[object]:
    """The items of a stored JSON list (none when it is missing)."""
    return list(value) if isinstance(value, list | tuple) else []


def _objects(value: object) -> list[JsonMapping]:
    """The JSON objects of a stored JSON list."""
    return [item for item in _items(value) if isinstance(item, dict)]


class Policy:
    """A normalised policy: local (``check``) or judged by a model (``content``)."""

    def __init__(self, name: str, *, check: Callable[..., object] | None = None,
                 content: str = "") -> None:
        self.name = name
        self.content = content
        self._check = check
        self._keywords = _keywords(check) if check is not None else ()

    @property
    def judged(self) -> bool:
        return self._check is None

    def run(self, output: object, text: str, data: object, turn: object) -> list[Violation]:
        """Run a local policy; an exception in it counts as a violation (and is logged), except
        a lost claim or a budget error (an evaluation it made), which stop the turn."""
        if self._check is None:
            raise TypeError(f"policy {self.name!r} is judged by a model, not run locally")
        context = {"turn": turn, "output_text": text, "output_data": data}
        try:
            result = self._check(output, **{k: context[k] for k in self._keywords})
            return normalise(result, self.name)  # an unusable result is the policy's fault too
        except (LostClaim, BudgetExceeded):
            raise  # the turn stops (revoked, or out of time or money): not a verdict
        except Exception as exc:
            logger.exception("output policy %r raised", self.name)
            return [Violation(self.name, f"the policy raised {type(exc).__name__}: {exc}",
                              self.name, {"error": True})]

    def __repr__(self) -> str:
        return f"<Policy {self.name!r}{' (judged)' if self.judged else ''}>"


def _check_shape(func: Callable[..., object], name: str, agent: str) -> None:
    """Refuse a callable that cannot be called as ``func(output, **the keywords it names)``."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return  # a builtin without a signature: trusted
    try:
        signature.bind(None, **dict.fromkeys(_keywords(func)))
    except TypeError:
        raise ConfigurationError(
            f"{agent!r}: output policy {name!r} must take the output as its first argument "
            f"(and optionally {', '.join(_CONTEXT_KEYWORDS)} by keyword); its signature is "
            f"{signature}"
        ) from None


def _keywords(func: Callable[..., object]) -> tuple[str, ...]:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return ()
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return _CONTEXT_KEYWORDS
    return tuple(k for k in _CONTEXT_KEYWORDS if k in params)


def normalise(result: object, policy: str) -> list[Violation]:
    """Turn what a policy returned into violations (none when clean)."""
    if result is None or result is True or (isinstance(result, str) and not result.strip()):
        return []
    if result is False:
        return [Violation(policy, "the output does not satisfy this policy", policy)]
    if isinstance(result, Violation):
        return [result if result.policy else Violation(result.rule, result.message, policy,
                                                       result.metadata)]
    if isinstance(result, Audit):
        return list(result.violations)
    if isinstance(result, str):
        return [Violation(policy, result, policy)]
    if isinstance(result, dict):
        extra = {k: v for k, v in result.items() if k not in ("rule", "message", "metadata")}
        metadata = result.get("metadata")
        if not isinstance(metadata, dict):  # kept, under its key, rather than dropped
            metadata = {} if metadata is None else {"metadata": metadata}
        return [Violation(str(result.get("rule") or policy),
                          str(result.get("message") or "policy violated"), policy,
                          {**metadata, **extra})]
    if isinstance(result, list | tuple):
        return [v for item in result for v in normalise(item, policy)]
    raise ConfigurationError(
        f"output policy {policy!r} returned {result!r}; return None or True when clean, or a "
        "string, dict, Violation or list of them"
    )


def build(value: object, *, agent: str = "check_output_policy") -> tuple[Policy, ...]:
    """Normalise ``output_policy`` / ``constraints`` into policies, reading policy files."""
    if value is None:
        return ()
    items = list(value) if isinstance(value, list | tuple) else [value]
    policies: list[Policy] = []
    for item in items:
        if isinstance(item, Policy):
            policies.append(item)
        elif isinstance(item, Skill):
            policies.append(Policy(item.key, content=item.content))
        elif isinstance(item, str | Path):
            policies.append(_file_policy(Path(item), agent))
        elif isinstance(item, type):
            raise ConfigurationError(
                f"{agent!r}: output policy {item.__name__} is a class; pass an instance "
                f"({item.__name__}()) or a function"
            )
        elif callable(check := getattr(item, "check", None)):
            name = str(getattr(item, "name", "") or type(item).__name__)
            _check_shape(check, name, agent)
            policies.append(Policy(name, check=check))
        elif callable(item):
            name = str(getattr(item, "__name__", "") or type(item).__name__)
            _check_shape(item, name, agent)
            policies.append(Policy(name, check=item))
        else:
            raise ConfigurationError(
                f"{agent!r}: output policy {item!r} is not a callable, an object with check(), "
                "a policy file (.md, .markdown, .txt) or a Skill"
            )
    return tuple(policies)


def _file_policy(path: Path, agent: str) -> Policy:
    if path.suffix.lower() not in POLICY_SUFFIXES:
        raise ConfigurationError(
            f"{agent!r}: output policy {str(path)!r} is a string but not a policy file; name "
            f"a file ending in {', '.join(POLICY_SUFFIXES)} or pass a callable"
        )
    content = read_prompt_file(path, "policy file", f"{agent!r}: ").strip()
    if not content:
        raise ConfigurationError(f"{agent!r}: policy file {str(path)!r} is empty")
    return Policy(path.stem, content=content)


# --------------------------------------------------------------------------- judging


def judge_request(policy: Policy, output: object, model: str) -> ModelRequest:
    """The request asking a model whether ``output`` follows ``policy``."""
    text = (f"## Policy {escape(policy.name)}\n\n{policy.content}\n\n## Output to review\n\n"
            f"{data_block('output', output, len(render_value(output)))}")
    return ModelRequest(
        model=model, messages=(ChatMessage("user", (TextPart(text),)),),
        stable_instructions=JUDGE_INSTRUCTIONS, output_schema=VERDICT_SCHEMA,
        metadata={"purpose": "output_policy", "policy": policy.name},
    )


def verdict(response: ModelResponse, policy: str) -> list[Violation]:
    """Read a judge's verdict, tolerating fenced or embedded JSON; garbage is a violation."""
    data = response.output_data
    if not isinstance(data, dict):
        data = _json_object(response.text)
    if not isinstance(data, dict) or not isinstance(data.get("approved"), bool):
        return [Violation(policy, "the policy judge did not return a valid verdict", policy,
                          {"judge_output": response.text[:500]})]
    items = data.get("violations")
    items = items if isinstance(items, list) else []
    # The verdict is model output: anything that is not a dict or a string becomes text.
    found = normalise([i if isinstance(i, dict | str) else str(i) for i in items], policy)
    if not data["approved"] and not found:
        found = [Violation(policy, "the policy judge did not approve the output", policy)]
    return found


def _json_object(text: str) -> object:
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    candidates = [fenced.group(1)] if fenced else []
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        candidates.append(text[start:end + 1])
    for candidate in (text, *candidates):
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None


def check_output_policy(
    output: object,
    constraints: object = (),
    *,
    output_text: str | None = None,
    output_data: object = None,
    turn: object = None,
    client: Client | None = None,
    model: str = "",
) -> Audit:
    """Run policies on ``output`` outside any turn; judged policies need ``client``."""
    policies = build(constraints)
    text = output if output_text is None and isinstance(output, str) else (output_text or "")
    data = output if output_data is None and not isinstance(output, str) else output_data
    violations: list[Violation] = []
    for policy in policies:
        if not policy.judged:
            violations += policy.run(output, text, data, turn)
            continue
        if client is None:
            raise ConfigurationError(
                f"policy {policy.name!r} is judged by a model; pass client= (a ScriptedClient "
                "in tests) to check_output_policy"
            )
        violations += verdict(client.complete(judge_request(policy, output, model)), policy.name)
    return Audit(tuple(violations), tuple(p.name for p in policies))


def revision_text(audit: Audit, policies: Sequence[Policy], attempt: int, retries: int,
                  terminal_tool: str | None) -> str:
    """The user message asking the model to fix the violations."""
    lines = [f"Your answer did not pass its output checks (revision {attempt} of {retries}). "
             "Fix every point below and give your complete answer again.", ""]
    lines += [f"{i}. [{v.rule}] {v.message}" for i, v in enumerate(audit.violations, start=1)]
    broken = {v.policy for v in audit.violations}
    for policy in policies:
        if policy.content and policy.name in broken:
            lines += ["", f"The policy {policy.name!r} you must follow:", "", policy.content]
    if terminal_tool:
        lines += ["", f"Resubmit via {terminal_tool}."]
    return "\n".join(lines)


def check_options(agent: str, mode: object, retries: object) -> None:
    """Validate ``output_policy_mode`` and ``output_retries``."""
    if mode not in MODES:
        raise ConfigurationError(
            f"agent {agent!r}: output_policy_mode must be 'fail' or 'report', got {mode!r}"
        )
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ConfigurationError(
            f"agent {agent!r}: output_retries must be a non-negative integer, got {retries!r}"
        )


__all__ = ["MODES", "Audit", "Policy", "Violation", "build", "check_options", "check_output_policy",
           "judge_request", "normalise", "revision_text", "verdict"]
