"""Cost rates of the scenario's model (imported by settings, so free of Django imports)."""

RATES = {"scripted": {"input": "3", "output": "15"}}
