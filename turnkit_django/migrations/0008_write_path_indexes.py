"""Indexes for the write path: every index a step's writes maintain is one something reads.

Why each index of the turnkit tables exists after this migration (PostgreSQL; SQLite keeps the
same b-trees minus the PostgreSQL-only parts):

* primary keys; ``turnkit_message_sequence_unique`` (conversation, sequence): the transcript in
  order and the sequence allocation's guard; ``turnkit_tool_call_unique`` (turn, tool_call_id):
  one execution per call; ``turnkit_wait_edge_unique``; ``turnkit_delivery_key_key``: the
  delivery's idempotency key; ``turnkit_one_running_submitted_turn``: one background turn runs
  per conversation.
* ``turnkit_turn_conv`` (conversation, created_at): a conversation's turns and the lane order;
  it also serves lookups by conversation, so the plain index on ``turn.conversation_id`` goes.
  The same holds for ``message.conversation_id`` (the sequence index), ``toolexecution.turn_id``
  (the call index) and ``wait.waiter_id`` (the edge index).
* ``turn.root_turn_id`` and ``message.turn_id``: the tree and a turn's messages (every row has
  one). The partial ``turnkit_turn_running``, ``turnkit_turn_actionable``,
  ``turnkit_turn_inline_running``, ``turnkit_conv_idle`` and ``turnkit_delivery_pending``:
  reconcile, maintenance and pruning scan only the rows they act on.
* Nullable foreign keys that are null on most rows (a sub-agent's parents, a tool result's
  execution, a subject) are indexed where set only: ``turnkit_*_parent_*``,
  ``turnkit_msg_tool_execution``, ``turnkit_conv_subject_type``. Lookups by value (the tree,
  deletes' cascades) imply "is not null", so the planner uses them.

Dropped on PostgreSQL: Django's ``*_like`` companions (``varchar_pattern_ops``) of every varchar
key. They serve ``LIKE 'prefix%'`` under a non-C collation; nothing in turnkit queries ids by
prefix (the admin's search is ``UPPER(...) LIKE '%...%'``, which no b-tree serves), and each
one is written on every insert. A later ``AlterField`` of such a key may create its companion
again; drop it the same way.

``fillfactor = 70`` on the turn and conversation tables leaves room in each page, so a step's
update of the turn (state, usage) and of the conversation (the last sequence) stays a HOT update
(no index touched; none of those columns is indexed) instead of moving the row to a new page.
"""

import django.db.models.deletion
from django.db import migrations, models

HOT_TABLES = ("turnkit_turn", "turnkit_conversation")


def drop_like_indexes(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT tablename, indexname, indexdef FROM pg_indexes"
                       " WHERE schemaname = current_schema()")
        names = [name for table, name, definition in cursor.fetchall()
                 if table.startswith("turnkit_") and name.endswith("_like")
                 and "varchar_pattern_ops" in definition]
    for name in names:
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table in HOT_TABLES:
            schema_editor.execute(
                f"ALTER TABLE {schema_editor.quote_name(table)} SET (fillfactor = 70)")


def unset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table in HOT_TABLES:
            schema_editor.execute(
                f"ALTER TABLE {schema_editor.quote_name(table)} RESET (fillfactor)")


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('turnkit', '0007_step_guard'),
    ]

    operations = [
        migrations.AlterField(
            model_name='conversation',
            name='parent_conversation',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='child_conversations', to='turnkit.conversation'),
        ),
        migrations.AlterField(
            model_name='conversation',
            name='parent_tool_execution',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='turnkit.toolexecution'),
        ),
        migrations.AlterField(
            model_name='conversation',
            name='parent_turn',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='turnkit.turn'),
        ),
        migrations.AlterField(
            model_name='conversation',
            name='subject_type',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, to='contenttypes.contenttype'),
        ),
        migrations.AlterField(
            model_name='message',
            name='conversation',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='messages', to='turnkit.conversation'),
        ),
        migrations.AlterField(
            model_name='message',
            name='tool_execution',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='messages', to='turnkit.toolexecution'),
        ),
        migrations.AlterField(
            model_name='toolexecution',
            name='turn',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='tool_executions', to='turnkit.turn'),
        ),
        # Django's AlterField drops every single-column b-tree on the column when db_index goes
        # off, constraints' unique indexes included: take the lane's constraint off first and put
        # it back after.
        migrations.RemoveConstraint(model_name='turn', name='turnkit_one_running_submitted_turn'),
        migrations.AlterField(
            model_name='turn',
            name='conversation',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='turns', to='turnkit.conversation'),
        ),
        migrations.AddConstraint(
            model_name='turn',
            constraint=models.UniqueConstraint(condition=models.Q(('status', 'running'), ('submitted_at__isnull', False)), fields=('conversation',), name='turnkit_one_running_submitted_turn'),
        ),
        migrations.AlterField(
            model_name='turn',
            name='parent_tool_execution',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='child_turns', to='turnkit.toolexecution'),
        ),
        migrations.AlterField(
            model_name='turn',
            name='parent_turn',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='child_turns', to='turnkit.turn'),
        ),
        migrations.AlterField(
            model_name='wait',
            name='waiter',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='waits', to='turnkit.turn'),
        ),
        migrations.AddIndex(
            model_name='conversation',
            index=models.Index(condition=models.Q(('parent_conversation__isnull', False)), fields=['parent_conversation'], name='turnkit_conv_parent_conv'),
        ),
        migrations.AddIndex(
            model_name='conversation',
            index=models.Index(condition=models.Q(('parent_turn__isnull', False)), fields=['parent_turn'], name='turnkit_conv_parent_turn'),
        ),
        migrations.AddIndex(
            model_name='conversation',
            index=models.Index(condition=models.Q(('parent_tool_execution__isnull', False)), fields=['parent_tool_execution'], name='turnkit_conv_parent_tex'),
        ),
        migrations.AddIndex(
            model_name='conversation',
            index=models.Index(condition=models.Q(('subject_type__isnull', False)), fields=['subject_type'], name='turnkit_conv_subject_type'),
        ),
        migrations.AddIndex(
            model_name='message',
            index=models.Index(condition=models.Q(('tool_execution__isnull', False)), fields=['tool_execution'], name='turnkit_msg_tool_execution'),
        ),
        migrations.AddIndex(
            model_name='turn',
            index=models.Index(condition=models.Q(('parent_turn__isnull', False)), fields=['parent_turn'], name='turnkit_turn_parent_turn'),
        ),
        migrations.AddIndex(
            model_name='turn',
            index=models.Index(condition=models.Q(('parent_tool_execution__isnull', False)), fields=['parent_tool_execution'], name='turnkit_turn_parent_tex'),
        ),
        migrations.RunPython(drop_like_indexes, migrations.RunPython.noop, elidable=False),
        migrations.RunPython(set_fillfactor, unset_fillfactor),
    ]
