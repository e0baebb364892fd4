"""History costs (issue 41): what keeps reads of live rows flat as finished turns pile up.

* The transition that ends a turn now deletes its lease (store.leases); the leases finished
  turns kept before that are deleted here, so reconcile's expired-lease query
  (``TurnQuerySet.lease_expired``) joins live leases only.
* ``turnkit_turn_listed``, ``turnkit_conv_listed``, ``turnkit_tex_listed``: the admin's turn,
  conversation and tool-execution lists, ``ORDER BY created_at DESC, id DESC LIMIT n`` (the page,
  its bounded count and the filters' recent values read the newest rows of the index).
* No index for the list's "tree cost unknown" (``EXISTS (SELECT FROM turn WHERE root_turn_id =
  ... AND cost_unknown)``): evaluated for the page's rows only, it reads the tree through the
  root_turn foreign key's index, as the tree cost's sum does. A partial index on cost-unknown
  turns was tried and dropped: it made one more of each turn's updates non-HOT (18 more index
  entries per turn, tests/integration/test_step_costs.py).
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
    ]
