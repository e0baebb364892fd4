"""History costs (issue 41): what keeps reads of live rows flat as finished turns pile up.

* The transition that ends a turn now deletes its lease (store.leases); the leases finished
  turns kept before that are deleted here, so reconcile's expired-lease query
  (``TurnQuerySet.lease_expired``) joins live leases only.
* ``turnkit_turn_listed``, ``turnkit_conv_listed``, ``turnkit_tex_listed``: the admin's turn,
  conversation and tool-execution lists, ``ORDER BY created_at DESC, id DESC LIMIT n`` (the page,
  its bounded count and the filters' recent values read the newest rows of the index).
* ``turnkit_turn_cost_unknown``: the turn list's "tree cost unknown", ``EXISTS (SELECT FROM turn
  WHERE root_turn_id = ... AND cost_unknown)``; only turns whose cost is unknown are in it.
"""

from django.db import migrations, models

#: Terminal turn statuses (states.TERMINAL_TURN_STATUSES as of this migration).
FINISHED = ["completed", "failed", "cancelled", "stale"]


def delete_finished_leases(apps, schema_editor):
    Lease = apps.get_model("turnkit", "Lease")
    Lease.objects.using(schema_editor.connection.alias).filter(
        turn__status__in=FINISHED).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('turnkit', '0019_schedule_every'),
    ]

    operations = [
        migrations.RunPython(delete_finished_leases, migrations.RunPython.noop, elidable=True),
        migrations.AddIndex(
            model_name='conversation',
            index=models.Index(fields=['-created_at', '-id'], name='turnkit_conv_listed'),
        ),
        migrations.AddIndex(
            model_name='toolexecution',
            index=models.Index(fields=['-created_at', '-id'], name='turnkit_tex_listed'),
        ),
        migrations.AddIndex(
            model_name='turn',
            index=models.Index(fields=['-created_at', '-id'], name='turnkit_turn_listed'),
        ),
        migrations.AddIndex(
            model_name='turn',
            index=models.Index(condition=models.Q(('cost_unknown', True)), fields=['root_turn'],
                               name='turnkit_turn_cost_unknown'),
        ),
    ]
