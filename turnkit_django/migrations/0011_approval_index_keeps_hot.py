"""The approvals index without ``status`` in its predicate.

0010's partial index named ``status`` in its WHERE clause, which makes ``status`` an indexed
column for PostgreSQL: every status change of every tool execution then had to update the
indexes instead of being a HOT update (0 of 40 were HOT in ``make bench``). The approval's own
state is selective enough; the inbox query still filters on ``status`` (on the heap).
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('turnkit', '0010_interactive_controls'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='toolexecution',
            name='turnkit_tex_awaiting_approval',
        ),
        migrations.AddIndex(
            model_name='toolexecution',
            index=models.Index(condition=models.Q(('approval__state', 'requested')), fields=['created_at'], name='turnkit_tex_approval_requested'),
        ),
    ]
