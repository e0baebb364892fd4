from __future__ import annotations

from django.apps import AppConfig


class TurnkitConfig(AppConfig):
    name = "turnkit_django"
    label = "turnkit"
    verbose_name = "TurnKit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
        from .registry import autodiscover

        autodiscover()
