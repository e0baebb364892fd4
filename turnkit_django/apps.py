from __future__ import annotations

from django.apps import AppConfig


class TurnkitConfig(AppConfig):
    name = "turnkit_django"
    label = "turnkit"
    verbose_name = "TurnKit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at the top: they import models, which need the app registry.
        from . import (
            checks,  # noqa: F401 - registers the system checks
            handles,  # noqa: F401 - gives tools their turn handles
        )
        from .agents.registry import autodiscover

        autodiscover()
