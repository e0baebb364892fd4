# Message kinds added after 0004: image (Turn.paint), media_analysis (Turn.view_media) and
# dynamic_context (snapshots of the dynamic part of the prompt, for clients that keep it in the
# history). Choices only: the column is unchanged.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('turnkit', '0008_write_path_indexes'),
    ]

    operations = [
        migrations.AlterField(
            model_name='message',
            name='kind',
            field=models.CharField(choices=[('text', 'Text'), ('tool_call', 'Tool Call'), ('tool_result', 'Tool Result'), ('context_summary', 'Context Summary'), ('image', 'Image'), ('media_analysis', 'Media Analysis'), ('dynamic_context', 'Dynamic Context')], default='text', max_length=32),
        ),
    ]
