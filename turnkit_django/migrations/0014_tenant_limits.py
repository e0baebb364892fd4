"""Tenant limits: ``Turn.tenant``, the ``TENANT_LIMITS`` key of a turn's principal (nullable: a
cheap column to add), and a partial index over the running background turns that have one, which
a claim counts. Rows written before have no tenant: no limit applies to them."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('turnkit', '0013_turn_metrics_indexes'),
    ]

    operations = [
        migrations.AddField(
            model_name='turn',
            name='tenant',
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        migrations.AddIndex(
            model_name='turn',
            index=models.Index(condition=models.Q(('status', 'running'), ('tenant__isnull', False), ('submitted_at__isnull', False)), fields=['tenant'], name='turnkit_turn_tenant_running'),
        ),
    ]
