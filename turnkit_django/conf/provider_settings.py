"""The settings of provider limits: ``PROVIDER_LIMITS`` and ``LIMITS_REDIS_URL`` (system check
``turnkit.E024``), cleaned here for :mod:`turnkit_django.conf`."""

from __future__ import annotations

from collections.abc import Mapping

from .setting_errors import InvalidSetting, SettingProblem

#: The limits one ``PROVIDER_LIMITS`` entry may set, each a positive integer.
LIMIT_KINDS = ("concurrency", "requests_per_minute", "input_tokens_per_minute")
EXAMPLE = ("{'anthropic': {'concurrency': 200, 'requests_per_minute': 4000, "
           "'input_tokens_per_minute': 2000000}}")
MAX_LIMIT = 2**63 - 1


def _problem(key: str, message: str, hint: str) -> InvalidSetting:
    return InvalidSetting(SettingProblem("turnkit.E024", key, message, hint))


def clean_provider_limits(key: str, value: object) -> Mapping[str, Mapping[str, int]]:
    """``{provider or 'provider:model': {limit kind: positive int}}``, or raise naming the
    entry that is wrong."""
    if not isinstance(value, Mapping):
        raise _problem(key, f"TURNKIT[{key!r}] must be a dict; got {value!r}.",
                       f"For example {EXAMPLE}.")
    cleaned: dict[str, dict[str, int]] = {}
    for name, limits in value.items():
        if (not isinstance(name, str) or not name.strip() or name != name.strip()
                or name.count(":") > 1 or name.startswith(":") or name.endswith(":")):
            raise _problem(key, f"TURNKIT[{key!r}] has the key {name!r}, which is not a client's "
                                "provider name or 'provider:model'.",
                           "Use the provider attribute of the client (AnthropicClient: "
                           "'anthropic'), or 'anthropic:claude-sonnet-5-5' for one model.")
        if not isinstance(limits, Mapping) or not limits:
            raise _problem(key, f"TURNKIT[{key!r}][{name!r}] must be a non-empty dict of "
                                f"limits; got {limits!r}.", f"For example {EXAMPLE}.")
        for kind, limit in limits.items():
            if kind not in LIMIT_KINDS:
                raise _problem(key, f"TURNKIT[{key!r}][{name!r}] has the unknown limit "
                                    f"{kind!r}.", "Known limits: " + ", ".join(LIMIT_KINDS) + ".")
            if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_LIMIT:
                raise _problem(key, f"TURNKIT[{key!r}][{name!r}][{kind!r}] must be a positive "
                                    f"integer; got {limit!r}.",
                               "Leave a limit out to have none.")
        cleaned[name] = dict(limits)
    return cleaned


def clean_redis_url(key: str, value: object) -> str | None:
    """None (the Celery broker when it is Redis, else limits held in this process) or a
    ``redis://`` / ``rediss://`` / ``unix://`` URL."""
    if value is None or (isinstance(value, str)
                         and value.split("://", 1)[0] in ("redis", "rediss", "unix")
                         and "://" in value):
        return value
    raise _problem(key, f"TURNKIT[{key!r}] must be None or a redis:// URL; got {value!r}.",
                   "For example 'redis://localhost:6379/0'; None uses the Celery broker when it "
                   "is Redis, else limits held in each process.")


__all__ = ["LIMIT_KINDS", "clean_provider_limits", "clean_redis_url"]
