"""The package's layout: a short top level, and a file name that names one thing
(docs/architecture.md, Layers)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import turnkit_django

PACKAGE = Path(turnkit_django.__file__).parent

#: File names used in several packages for the same concept, one part per layer (the use case
#: in services/, its transitions in store/, ...). A name shared by two different things is not
#: added here: one of them is renamed.
SAME_CONCEPT = {
    "approvals", "cancellation", "compaction", "controls", "coordination", "deliveries", "events",
    "forks", "media", "recovery", "retention", "schedules", "sources", "streaming", "turns",
    "waits",
}


def shared_names() -> dict[str, list[str]]:
    where = defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] != "migrations" and path.name != "__init__.py":
            where[path.stem].append(relative.as_posix())
    return {name: sorted(paths) for name, paths in where.items() if len(paths) > 1}


def test_the_top_level_holds_at_most_twelve_modules():
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top


def test_a_file_name_shared_by_two_modules_names_one_concept():
    assert {name: paths for name, paths in shared_names().items()
            if name not in SAME_CONCEPT} == {}


def test_the_shared_names_list_has_no_stale_entry():
    assert SAME_CONCEPT <= set(shared_names())
