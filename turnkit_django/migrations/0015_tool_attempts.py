"""Durable tool retries: ``ToolExecution.attempt_log``, the failed attempts of a tool with
``retries=`` (each with its error and when the next one is due), so a resumed turn continues
from the recorded attempt count."""

from django.db import migrations

import turnkit_django.base.fields


class Migration(migrations.Migration):

    dependencies = [
        ('turnkit', '0014_tenant_limits'),
    ]

    operations = [
        migrations.AddField(
            model_name='toolexecution',
            name='attempt_log',
            field=turnkit_django.base.fields.StorableJSONField(blank=True, default=list),
        ),
    ]
