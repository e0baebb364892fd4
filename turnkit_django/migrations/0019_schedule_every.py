"""Interval schedules (``schedule(agent, every=seconds, ...)``).

* ``Schedule.every``: seconds between firings (at least 1), firing at the multiples of it since
  the Unix epoch; null for a cron schedule, whose ``cron`` is then set (``cron`` may now be
  empty, for an interval schedule).
* ``turnkit_schedule_cron_or_every``: exactly one of the two.
"""

import django.core.validators
from django.db import migrations, models

import turnkit_django.models.schedules


class Migration(migrations.Migration):

    dependencies = [
        ('turnkit', '0018_lease_provider_wait'),
    ]

    operations = [
        migrations.AddField(
            model_name='schedule',
            name='every',
            field=models.PositiveIntegerField(blank=True, help_text='Seconds between firings (at least 1), instead of a cron expression.', null=True, validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AlterField(
            model_name='schedule',
            name='cron',
            field=models.CharField(blank=True, help_text="5 fields: minute hour day-of-month month day-of-week, in TIME_ZONE; for example '0 9 * * 1-5'. Empty when the schedule fires every N seconds.", max_length=200, validators=[turnkit_django.models.schedules.validate_cron]),
        ),
        migrations.AddConstraint(
            model_name='schedule',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('every__isnull', True), models.Q(('cron', ''), _negated=True)), models.Q(('every__isnull', False), ('cron', '')), _connector='OR'), name='turnkit_schedule_cron_or_every', violation_error_message='Give exactly one of a cron expression or every (seconds).'),
        ),
    ]
