"""URLs of the example project: the admin, where turns and transcripts can be inspected."""

from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]
