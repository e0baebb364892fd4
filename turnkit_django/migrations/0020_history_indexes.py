"""History costs (issue 41): what keeps reads of live rows flat as finished turns pile up.

* The transition that ends a turn now deletes its lease (store.leases); the leases finished
  turns kept before that are deleted here, so reconcile's expired-lease query
  (``TurnQuerySet.lease_expired``) joins live leases only.
"""

from django.db import migrations

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
    ]
