"""The import paths modules had before they moved into packages, kept working.

0.1 moved the loose top-level modules into packages (``turnkit_django.handles`` is now
``turnkit_django.api.handles``). An old path imports the same module object as the new one (so a
setting, a ``mock.patch`` target or an import in a project's code keeps working); new code and
the docs use the new paths (docs/architecture.md lists where each concept lives).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

#: Old dotted path -> the module it names now.
MOVED: dict[str, str] = {
    "turnkit_django.admin_approvals": "turnkit_django.admin.approvals",
    "turnkit_django.admin_lists": "turnkit_django.admin.lists",
    "turnkit_django.admin_schedules": "turnkit_django.admin.schedules",
    "turnkit_django.admin_views": "turnkit_django.console.admin_views",
    "turnkit_django.arguments": "turnkit_django.store.input_checks",
    "turnkit_django.authorization": "turnkit_django.runtime.authorization",
    "turnkit_django.beat": "turnkit_django.base.beat",
    "turnkit_django.brokers": "turnkit_django.base.brokers",
    "turnkit_django.cron": "turnkit_django.base.cron",
    "turnkit_django.databases": "turnkit_django.base.databases",
    "turnkit_django.delta_channel": "turnkit_django.conf.delta_channel",
    "turnkit_django.deltas": "turnkit_django.conf.deltas",
    "turnkit_django.error_records": "turnkit_django.base.error_records",
    "turnkit_django.failpoints": "turnkit_django.base.failpoints",
    "turnkit_django.fields": "turnkit_django.base.fields",
    "turnkit_django.handles": "turnkit_django.api.handles",
    "turnkit_django.ids": "turnkit_django.base.ids",
    "turnkit_django.interactive": "turnkit_django.api.interactive",
    "turnkit_django.intervals": "turnkit_django.base.intervals",
    "turnkit_django.limits": "turnkit_django.store.limits",
    "turnkit_django.media": "turnkit_django.api.media",
    "turnkit_django.metrics": "turnkit_django.observability.metrics",
    "turnkit_django.options": "turnkit_django.api.options",
    "turnkit_django.provider_settings": "turnkit_django.conf.provider_settings",
    "turnkit_django.querysets": "turnkit_django.models.querysets",
    "turnkit_django.schedules": "turnkit_django.api.schedules",
    "turnkit_django.serialization": "turnkit_django.base.serialization",
    "turnkit_django.setting_errors": "turnkit_django.conf.setting_errors",
    "turnkit_django.shutdown": "turnkit_django.base.shutdown",
    "turnkit_django.states": "turnkit_django.base.states",
    "turnkit_django.terminal": "turnkit_django.base.terminal",
    "turnkit_django.throttles": "turnkit_django.base.throttles",
    "turnkit_django.timeline": "turnkit_django.console.timeline",
    "turnkit_django.timeline_media": "turnkit_django.console.timeline_media",
    "turnkit_django.trace_settings": "turnkit_django.conf.trace_settings",
    "turnkit_django.tracing": "turnkit_django.observability.tracing",
    "turnkit_django.transcript": "turnkit_django.console.transcript_text",
    "turnkit_django.views": "turnkit_django.console.views",
    # Renamed inside their package (a file name names one thing).
    "turnkit_django.clients.base": "turnkit_django.clients.protocol",
    "turnkit_django.console.transcript": "turnkit_django.console.transcript_text",
    "turnkit_django.management.base": "turnkit_django.management.command",
    "turnkit_django.models.coordination": "turnkit_django.models.activity",
    "turnkit_django.runtime.handles": "turnkit_django.runtime.current_turn",
    "turnkit_django.store.arguments": "turnkit_django.store.input_checks",
    "turnkit_django.store.fields": "turnkit_django.store.turn_columns",
    "turnkit_django.testing.rows": "turnkit_django.testing.snapshots",
    "turnkit_django.tools.base": "turnkit_django.tools.tool",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an old path with the module now at the new one (the same object)."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        # The import system sets the returned module's ``__spec__`` to the old path's; the
        # module keeps its own (a repr, a pickle or a reload names the new path).
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when it was imported under its new path."""
        module.__spec__ = module.__spec__.loader_state if module.__spec__ else None


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (idempotent)."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())
