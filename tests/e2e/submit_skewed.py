"""Submit one scripted turn from a process of its own whose doorbell is lost (prints its id).

Run by tests/e2e/test_clocks.py under a skewed clock: ``python -m tests.e2e.submit_skewed``.
"""

from __future__ import annotations

import django


def lost(turn_id: str) -> None:
    """A dispatcher whose message never arrives."""


def main() -> None:
    django.setup()
    from django.conf import settings
    from django.test import override_settings

    from tests.e2e.harness import submit

    with override_settings(TURNKIT={**settings.TURNKIT,
                                    "DISPATCHER": "tests.e2e.submit_skewed.lost"}):
        print(submit({"reply": "found without its doorbell"}))


if __name__ == "__main__":
    main()
