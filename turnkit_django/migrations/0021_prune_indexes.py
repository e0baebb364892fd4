"""Prune's costs (issue 41): its checks read active turns only, its cascade neither sorts nor joins.

* ``turnkit_turn_active_conv`` (conversation WHERE status is active): ``prunable()``'s
  ``NOT EXISTS (SELECT FROM turn WHERE status IN (active) AND conversation_id = ...)`` for each
  candidate and for its child conversations, and ``store.retention._blocked``'s active turns of
  the batch's conversations. Without it these read every turn (a seq scan, or the whole
  ``turnkit_turn_active`` index and each active turn's row). It costs one index entry on a
  turn's insert and on each of its updates that is not HOT.
* ``base_manager_name = "unordered"`` on conversations, turns, messages and tool executions:
  Django's delete collector reads the rows a cascade deletes through the base manager, which
  applied the default ordering (a sort of every row collected; for messages a join to their
  conversation, whose creation orders them). The default manager and its ordering are unchanged.
"""

import django.db.models.manager
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('turnkit', '0020_history_indexes'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='conversation',
            options={'base_manager_name': 'unordered', 'ordering': ['-created_at'], 'verbose_name': 'conversation', 'verbose_name_plural': 'conversations'},
        ),
        migrations.AlterModelOptions(
            name='message',
            options={'base_manager_name': 'unordered', 'ordering': ['conversation', 'sequence'], 'verbose_name': 'message', 'verbose_name_plural': 'messages'},
        ),
        migrations.AlterModelOptions(
            name='toolexecution',
            options={'base_manager_name': 'unordered', 'ordering': ['created_at'], 'permissions': [('decide_approval', 'Can approve or deny tool calls')], 'verbose_name': 'tool execution', 'verbose_name_plural': 'tool executions'},
        ),
        migrations.AlterModelOptions(
            name='turn',
            options={'base_manager_name': 'unordered', 'ordering': ['created_at'], 'permissions': [('cancel_turn', 'Can cancel turns'), ('view_transcript', 'Can view transcripts, run context and principals')], 'verbose_name': 'turn', 'verbose_name_plural': 'turns'},
        ),
        migrations.AlterModelManagers(
            name='conversation',
            managers=[
                ('objects', django.db.models.manager.Manager()),
                ('unordered', django.db.models.manager.Manager()),
            ],
        ),
        migrations.AlterModelManagers(
            name='message',
            managers=[
                ('objects', django.db.models.manager.Manager()),
                ('unordered', django.db.models.manager.Manager()),
            ],
        ),
        migrations.AlterModelManagers(
            name='toolexecution',
            managers=[
                ('objects', django.db.models.manager.Manager()),
                ('unordered', django.db.models.manager.Manager()),
            ],
        ),
        migrations.AlterModelManagers(
            name='turn',
            managers=[
                ('objects', django.db.models.manager.Manager()),
                ('unordered', django.db.models.manager.Manager()),
            ],
        ),
        migrations.AddIndex(
            model_name='turn',
            index=models.Index(condition=models.Q(('status__in', ['pending', 'waiting', 'paused', 'running'])), fields=['conversation'], name='turnkit_turn_active_conv'),
        ),
    ]
