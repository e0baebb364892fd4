"""Provider waits on the lease: ``Lease.waiting_on`` and ``Lease.waiting_since``, set while a
running turn waits for a provider slot or backs off after a 429, so operators can count them."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('turnkit', '0017_schedules'),
    ]

    operations = [
        migrations.AddField(
            model_name='lease',
            name='waiting_on',
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        migrations.AddField(
            model_name='lease',
            name='waiting_since',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
