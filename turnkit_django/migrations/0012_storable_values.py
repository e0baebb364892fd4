"""Storable fields: the columns that keep model and tool output clean what no database stores.

PostgreSQL refuses NUL and lone surrogates in text and jsonb, and NaN or infinity in jsonb; the
fields (``turnkit_django.base.fields``) replace them on the way in, on every database alike. The
columns are unchanged, so the migration changes the migration state only (SQLite would
otherwise rebuild each table once per altered field).
"""

from django.db import migrations

import turnkit_django.base.fields


class Migration(migrations.Migration):

    dependencies = [
        ('turnkit', '0011_approval_index_keeps_hot'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.AlterField(
                model_name='conversation',
                name='context',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, default=dict),
            ),
            migrations.AlterField(
                model_name='conversation',
                name='metadata',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, default=dict),
            ),
            migrations.AlterField(
                model_name='conversation',
                name='principal',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, null=True),
            ),
            migrations.AlterField(
                model_name='delivery',
                name='payload',
                field=turnkit_django.base.fields.StorableJSONField(default=dict),
            ),
            migrations.AlterField(
                model_name='event',
                name='payload',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, default=dict),
            ),
            migrations.AlterField(
                model_name='message',
                name='content',
                field=turnkit_django.base.fields.StorableJSONField(default=list),
            ),
            migrations.AlterField(
                model_name='message',
                name='metadata',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, default=dict),
            ),
            migrations.AlterField(
                model_name='toolexecution',
                name='approval',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, null=True),
            ),
            migrations.AlterField(
                model_name='toolexecution',
                name='arguments',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, default=dict),
            ),
            migrations.AlterField(
                model_name='toolexecution',
                name='error',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, null=True),
            ),
            migrations.AlterField(
                model_name='toolexecution',
                name='result',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, null=True),
            ),
            migrations.AlterField(
                model_name='toolexecution',
                name='tool_call_id',
                field=turnkit_django.base.fields.StorableCharField(max_length=200),
            ),
            migrations.AlterField(
                model_name='toolexecution',
                name='tool_name',
                field=turnkit_django.base.fields.StorableCharField(max_length=200),
            ),
            migrations.AlterField(
                model_name='turn',
                name='audit',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, null=True),
            ),
            migrations.AlterField(
                model_name='turn',
                name='controls',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, default=dict),
            ),
            migrations.AlterField(
                model_name='turn',
                name='error',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, null=True),
            ),
            migrations.AlterField(
                model_name='turn',
                name='fence_log',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, default=list),
            ),
            migrations.AlterField(
                model_name='turn',
                name='options',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, default=dict),
            ),
            migrations.AlterField(
                model_name='turn',
                name='output_data',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, null=True),
            ),
            migrations.AlterField(
                model_name='turn',
                name='output_text',
                field=turnkit_django.base.fields.StorableTextField(blank=True, default=''),
            ),
            migrations.AlterField(
                model_name='turn',
                name='principal',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, null=True),
            ),
            migrations.AlterField(
                model_name='turn',
                name='state',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, default=dict),
            ),
            migrations.AlterField(
                model_name='turn',
                name='tree_tool_counts',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, default=dict),
            ),
            migrations.AlterField(
                model_name='turn',
                name='usage',
                field=turnkit_django.base.fields.StorableJSONField(blank=True, default=dict),
            ),
        ]),
    ]
