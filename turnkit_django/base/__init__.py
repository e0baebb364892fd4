"""The foundation every layer may import: ids, states, JSON values, stored fields, clocks and
switches that know nothing of turns (cron and intervals, failpoints, shutdown, brokers,
databases, throttles, terminal-safe text, the stored form of an error).

Nothing here imports Django's ORM models or another turnkit package except
:mod:`turnkit_django.exceptions`."""
