from django.apps import AppConfig


class SupportConfig(AppConfig):
    name = "example_project.support"
    label = "support"
    verbose_name = "Support (example)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        if getattr(settings, "EXAMPLE_EVENT_LOG", None):
            from turnkit_django.events import event

            from .eventlog import record

            event.connect(record, dispatch_uid="example_project.support.eventlog")
