# Message kinds of the media operations: image (Turn.paint) and media_analysis (Turn.view_media).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('turnkit', '0007_step_guard'),
    ]

    operations = [
        migrations.AlterField(
            model_name='message',
            name='kind',
            field=models.CharField(choices=[('text', 'Text'), ('tool_call', 'Tool Call'), ('tool_result', 'Tool Result'), ('context_summary', 'Context Summary'), ('image', 'Image'), ('media_analysis', 'Media Analysis')], default='text', max_length=32),
        ),
    ]
