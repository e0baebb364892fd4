"""The public application API behind ``from turnkit_django import ...``: agents' handles
(:mod:`.handles`), a turn's controls (:mod:`.interactive`), media methods (:mod:`.media`), run
options (:mod:`.options`) and schedules (:mod:`.schedules`). The ready-made specialists keep
their own module, :mod:`turnkit_django.specialists`.

Import the names from :mod:`turnkit_django`; the module paths before 0.1 (for example
``turnkit_django.handles``) still import the same modules."""
