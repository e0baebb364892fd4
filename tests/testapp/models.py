"""Application models the tests need: an upload with a FileField, as a support app would have."""

from __future__ import annotations

from django.db import models


class Upload(models.Model):
    """A file a customer uploaded (a photo of a broken item, an invoice)."""

    file = models.FileField(upload_to="uploads/")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "testapp"

    def __str__(self) -> str:
        return self.file.name or ""
