"""URLs of turnkit's views: ``path("turnkit/", include("turnkit_django.urls"))``."""

from __future__ import annotations

from django.urls import path

from .console import views

app_name = "turnkit"

urlpatterns = [
    path("runs/<str:run_id>/events", views.event_stream, name="run-events"),
    path("runs/<str:run_id>/", views.run_page, name="run-page"),
]
