from __future__ import annotations

from django.apps import AppConfig


class TurnkitConfig(AppConfig):
    name = "turnkit_django"
    label = "turnkit"
    verbose_name = "TurnKit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at the top: they import models, which need the app registry.
        # checks and databases register the system checks; handles gives tools their turn handles.
        from . import checks  # noqa: F401, PLC0415
        from .agents.registry import autodiscover  # noqa: PLC0415
        from .api import handles  # noqa: F401, PLC0415
        from .base import databases  # noqa: F401, PLC0415

        autodiscover()
