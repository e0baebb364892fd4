"""The limits of one turn tree: a value snapshotted into the root turn at its creation.

Every limit is ROOT-WIDE: a tree shares one ledger (kept on the root row, see
:mod:`turnkit_django.store.locks`); :mod:`turnkit_django.runtime.budget` checks and reserves
against it under the tree lock. A child turn can also have the count limits its agent set itself,
checked on its own counts (``runtime.budget.own_budget``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Protocol

from ..base.serialization import JsonMapping, JsonObject
from ..conf import InvalidSetting, turnkit_settings
from ..conf.setting_values import _by_name, _count, _seconds, _spend
from ..exceptions import ConfigurationError


class _LimitCleaner(Protocol):
    def __call__(self, key: str, value: object, label: str | None = None) -> object: ...


#: The options that override a limit setting (``Agent(max_iterations=...)``): their setting,
#: whose rules (E003, E008, E011) they follow, and its cleaner.
LIMIT_OPTIONS: dict[str, tuple[str, _LimitCleaner]] = {
    "max_iterations": ("MAX_ITERATIONS", _count),
    "max_tool_executions": ("MAX_TOOL_EXECUTIONS", _count),
    "max_tool_executions_by_name": ("MAX_TOOL_EXECUTIONS_BY_NAME", _by_name),
    "max_spend": ("MAX_SPEND", _spend),
    "max_depth": ("MAX_DEPTH", _count),
    "timeout": ("TIMEOUT", _seconds),
}


def clean_limit(option: str, value: object, where: str) -> object:
    """Return ``value`` of the limit ``option`` of ``where`` (for example ``agent 'support'``)
    normalised like its setting; raise ConfigurationError naming both when the setting's rule
    refuses it. None is not checked: it means "use the setting"."""
    if value is None:
        return None
    key, clean = LIMIT_OPTIONS[option]
    try:
        return clean(key, value, f"{where}: {option}")
    except InvalidSetting as exc:
        raise ConfigurationError(f"{exc.problem.message} {exc.problem.hint} Or leave {option} "
                                 f"out to use TURNKIT[{key!r}].") from None


ITERATIONS = "maximum iterations reached"
TOOL_EXECUTIONS = "maximum tool executions reached"
SPEND = "cost limit reached"
DEPTH = "maximum sub-agent depth reached"
TIMEOUT = "turn timed out"
#: The most a run may spend, in USD: a tenth of what a cost column (``Turn.cost``, the root's
#: ``tree_spend``: 18 digits, 8 places) holds, so that SQLite, which adds decimals as floats,
#: still reads every sum back.
MAX_COST = Decimal(1_000_000_000)
#: The denial once a run's spend reached :data:`MAX_COST`: a limit no setting can raise.
SPEND_UNRECORDABLE = (f"cost too large to record: a run's spend is at most {MAX_COST} USD; "
                      "the call that passed it has an unknown cost")

_LIMIT_OF = {ITERATIONS: "max_iterations", TOOL_EXECUTIONS: "max_tool_executions",
             SPEND: "max_spend", SPEND_UNRECORDABLE: "max_spend", DEPTH: "max_depth",
             TIMEOUT: "timeout"}


def limit_of(reason: str) -> str:
    """The name of the limit a denial reason stands for."""
    return _LIMIT_OF.get(reason, "max_tool_executions_by_name")


@dataclass(frozen=True)
class Limits:
    """The limits of one turn tree, snapshotted into the root turn's options at creation."""

    max_iterations: int
    max_tool_executions: int
    max_tool_executions_by_name: dict[str, int] = field(default_factory=dict)
    max_spend: Decimal | None = None
    max_depth: int = 3
    timeout: float | None = None

    def as_json(self) -> JsonObject:
        data: JsonObject = asdict(self)
        data["max_spend"] = None if self.max_spend is None else str(self.max_spend)
        return data

    @classmethod
    def from_json(cls, data: JsonMapping) -> Limits:
        spend = data.get("max_spend")
        timeout = data.get("timeout")
        by_name = data.get("max_tool_executions_by_name") or {}
        if not isinstance(by_name, dict):
            raise ConfigurationError(f"stored limits: max_tool_executions_by_name must be a "
                                     f"JSON object, got {by_name!r}")
        return cls(
            max_iterations=int(_number(data["max_iterations"])),
            max_tool_executions=int(_number(data["max_tool_executions"])),
            max_tool_executions_by_name={str(k): int(_number(v)) for k, v in by_name.items()},
            max_spend=None if spend is None else Decimal(str(spend)),
            max_depth=int(_number(data.get("max_depth", 3))),
            timeout=None if timeout is None else float(_number(timeout)),
        )

    @property
    def lifetime(self) -> timedelta | None:
        """How long the tree may run from its start (None: no deadline)."""
        return None if not self.timeout else timedelta(seconds=float(self.timeout))


def _number(value: object) -> int | float | str:
    """A stored limit as a number (or its text); raise naming it when it is neither."""
    if isinstance(value, int | float | str):
        return value
    raise ConfigurationError(f"stored limits: expected a number, got {value!r}")


def resolve_limits(
    *,
    max_iterations: int | None = None,
    max_tool_executions: int | None = None,
    max_tool_executions_by_name: dict[str, int] | None = None,
    max_spend: Decimal | str | float | None = None,
    max_depth: int | None = None,
    timeout: float | None = None,
    where: str = "limits",
) -> Limits:
    """Return limits from explicit values (None means: use the TURNKIT setting).

    Explicit values follow the rules of their settings (:func:`check_limits`); ``where`` names
    their owner in the error."""
    check_limits(where, max_iterations=max_iterations, max_tool_executions=max_tool_executions,
                 max_tool_executions_by_name=max_tool_executions_by_name, max_spend=max_spend,
                 max_depth=max_depth, timeout=timeout)
    s = turnkit_settings
    spend = s.MAX_SPEND if max_spend is None else max_spend
    return Limits(
        max_iterations=s.MAX_ITERATIONS if max_iterations is None else max_iterations,
        max_tool_executions=(s.MAX_TOOL_EXECUTIONS if max_tool_executions is None
                             else max_tool_executions),
        max_tool_executions_by_name=dict(s.MAX_TOOL_EXECUTIONS_BY_NAME
                                         if max_tool_executions_by_name is None
                                         else max_tool_executions_by_name),
        max_spend=None if spend is None else Decimal(str(spend)),
        max_depth=s.MAX_DEPTH if max_depth is None else max_depth,
        timeout=s.TIMEOUT if timeout is None else timeout,
    )


def check_limits(where: str, **overrides: object) -> None:
    """Raise ConfigurationError naming ``where`` for an override (None: the setting) that the
    rule of its setting refuses: E003 for counts and seconds, E008 for per-tool caps, E011 for
    spend, without reading the settings themselves."""
    for option, value in overrides.items():
        clean_limit(option, value, where)


__all__ = ["DEPTH", "ITERATIONS", "MAX_COST", "SPEND", "SPEND_UNRECORDABLE", "TIMEOUT",
           "TOOL_EXECUTIONS", "Limits", "check_limits", "limit_of", "resolve_limits"]
