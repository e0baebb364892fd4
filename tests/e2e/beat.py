"""``celery beat`` processes for e2e tests: started, stopped and restarted like workers.

A beat is a :class:`~tests.e2e.harness.Worker` of the cluster (so its teardown stops it), running
``tests.e2e.beat_app`` with its schedule file in the test's directory; it is ready once it has
sent its first ``turnkit.schedules`` tick.
"""

from __future__ import annotations

import subprocess
import sys

from tests.e2e.harness import _DIE_WITH_PARENT, REPO, Cluster, Worker, wait_for

SENT_TICK = "Sending due task turnkit-schedules"


def _sent_tick(beat: Worker) -> bool:
    text = beat.log.read_text(errors="replace") if beat.log.exists() else ""
    if not beat.alive():
        raise AssertionError(f"beat {beat.name} exited with {beat.proc.returncode}:\n{text}")
    return SENT_TICK in text


def start_beat(cluster: Cluster, *, timeout: float = 60) -> Worker:
    """Start ``celery beat`` with turnkit's entries; wait until it sent a schedules tick."""
    name = f"beat{sum(1 for n in cluster.workers if n.startswith('beat')) + 1}"
    log = cluster.root / f"{name}.log"
    command = [*_DIE_WITH_PARENT, sys.executable, "-m", "celery", "-A", "tests.e2e.beat_app",
               "beat", "-s", str(cluster.root / "celerybeat-schedule"), "-l", "INFO"]
    with log.open("ab") as out:
        proc = subprocess.Popen(command, cwd=REPO, env=cluster.env(name), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    beat = Worker(name, proc, log)
    cluster.workers[name] = beat
    wait_for(lambda: _sent_tick(beat), timeout=timeout, what=f"{name} to send a tick")
    return beat


__all__ = ["start_beat"]
