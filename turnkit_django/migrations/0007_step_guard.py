"""The guard a fenced step's single statement ends with (PostgreSQL only).

``turnkit_step_guard(held)`` raises SQLSTATE TK409 when ``held`` is false, which rolls back the
whole statement; see ``turnkit_django/store/steps.py``. A function, not a constant expression,
so the planner cannot evaluate it early.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION turnkit_step_guard(held boolean) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF held IS NOT TRUE THEN
        RAISE EXCEPTION 'turnkit: the step''s fence, status or ledger moved'
            USING ERRCODE = 'TK409';
    END IF;
    RETURN true;
END
$$
"""

DROP = "DROP FUNCTION IF EXISTS turnkit_step_guard(boolean)"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):

    dependencies = [
        ("turnkit", "0006_turn_lease"),
    ]

    operations = [migrations.RunPython(create, drop, elidable=False)]
