"""Indexes for the operator's figures (metrics, ``turnkit_stats``), each partial and small.

* ``turnkit_turn_active`` (status, created_at) where the turn is active: the live-turns gauge's
  one aggregate and the oldest pending turn read only active rows (an index-only scan).
* ``turnkit_turn_completed`` (completed_at) where set: the turns that ended in the last hour
  (dead letters, tokens, cost). Written with the terminal write, which is no HOT update anyway.
* ``turnkit_turn_recovered`` (updated_at) where ``recovery_attempts > 0``: the turns reconcile
  recovered recently; only recovered turns are in it.

Status changes already leave HOT updates (``status`` is in the predicates of the earlier partial
indexes), and a step's state writes change none of these columns, so they stay HOT.
"""


from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('turnkit', '0012_storable_values'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='turn',
            index=models.Index(condition=models.Q(('status__in', ['pending', 'waiting', 'paused', 'running'])), fields=['status', 'created_at'], name='turnkit_turn_active'),
        ),
        migrations.AddIndex(
            model_name='turn',
            index=models.Index(condition=models.Q(('completed_at__isnull', False)), fields=['completed_at'], name='turnkit_turn_completed'),
        ),
        migrations.AddIndex(
            model_name='turn',
            index=models.Index(condition=models.Q(('recovery_attempts__gt', 0)), fields=['updated_at'], name='turnkit_turn_recovered'),
        ),
    ]
