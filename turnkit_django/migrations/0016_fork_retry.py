"""Fork and retry: ``Conversation.forked_from`` / ``forked_at`` (the conversation and the last
sequence a fork copied) and ``Turn.retry_of`` (the run a retry runs again). Nullable columns,
cheap to add; each indexed only where set (deleting an original reads its forks and retries)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('turnkit', '0015_tool_attempts'),
    ]

    operations = [
        migrations.AddField(
            model_name='conversation',
            name='forked_at',
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='conversation',
            name='forked_from',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='forks', to='turnkit.conversation'),
        ),
        migrations.AddField(
            model_name='turn',
            name='retry_of',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='retries', to='turnkit.turn'),
        ),
        migrations.AddIndex(
            model_name='conversation',
            index=models.Index(condition=models.Q(('forked_from__isnull', False)), fields=['forked_from'], name='turnkit_conv_forked_from'),
        ),
        migrations.AddIndex(
            model_name='turn',
            index=models.Index(condition=models.Q(('retry_of__isnull', False)), fields=['retry_of'], name='turnkit_turn_retry_of'),
        ),
    ]
