"""The nemesis soak (see :mod:`tests.soak`): ``SOAK_SECONDS`` of faults, then zero violations.

Environment: ``SOAK_SECONDS`` (required; ``make soak`` sets 600), ``SOAK_SEED`` (random when
unset, always printed), ``SOAK_WORKERS`` (default 3), ``SOAK_DRAIN_SECONDS`` (default 300).
"""

from __future__ import annotations

import logging
import os
import random
import time
from pathlib import Path

import pytest

from tests.e2e.harness import REPO, Cluster
from tests.e2e.worker_settings import E2E_TURNKIT
from tests.soak.checks import Progress, diagnose, drain, figures, violations
from tests.soak.nemesis import Nemesis
from tests.soak.workload import Workload

pytestmark = pytest.mark.django_db(transaction=True)

SECONDS = float(os.environ.get("SOAK_SECONDS") or 600)
SEED = int(os.environ.get("SOAK_SEED") or random.SystemRandom().randrange(10**9))
WORKERS = int(os.environ.get("SOAK_WORKERS") or 3)
DRAIN_SECONDS = float(os.environ.get("SOAK_DRAIN_SECONDS") or 300)
FIGURES = REPO / "build" / "soak-figures.txt"


def report(line: str, capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\n{line}", flush=True)


@pytest.mark.timeout(SECONDS + DRAIN_SECONDS + 600)
def test_nemesis_soak_ends_with_every_turn_terminal_and_no_violation(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    report(f"soak: SOAK_SEED={SEED} SOAK_SECONDS={SECONDS:.0f} SOAK_WORKERS={WORKERS}", capsys)
    log = logging.FileHandler(cluster.root / "test-process.log")
    log.setLevel(logging.INFO)
    logging.getLogger("turnkit_django").addHandler(log)
    logging.getLogger("turnkit_django").setLevel(logging.INFO)
    rng = random.Random(SEED)
    nemesis = Nemesis(cluster, random.Random(rng.getrandbits(64)), size=WORKERS,
                      lease=float(E2E_TURNKIT["LEASE"]))
    workload = Workload(random.Random(rng.getrandbits(64)))
    started = time.monotonic()
    nemesis.replenish()  # the fleet first
    reconciler = cluster.start_reconciler(sweep=True)
    workload.start()
    progress = Progress(cluster.root / "progress.log")
    try:  # the nemesis in this thread (see tests/soak/nemesis.py), the workload in its own
        nemesis.run(SECONDS - (time.monotonic() - started),
                    lambda: progress.log(f"soak faults={sum(nemesis.injected.values())}"))
    finally:
        workload.stop()
        nemesis.heal()
    soaked = time.monotonic() - started
    drained = drain(DRAIN_SECONDS, progress)
    diagnosis = None
    if drained > DRAIN_SECONDS:
        diagnosis = diagnose(cluster, nemesis.fleet)  # while the workers still run
        for worker in nemesis.fleet:
            worker.stop()  # the checker needs data nobody writes any more
    reconciler.halt()
    problems = [*violations(cluster),
                *(f"reconcile raised: {type(e).__name__}: {e}" for e in reconciler.errors),
                *(f"workload: {e}" for e in workload.errors),
                *(f"nemesis: {e}" for e in nemesis.errors)]
    line = figures(seed=SEED, seconds=soaked, workers=WORKERS, roots=len(workload.roots),
                   actions=workload.actions, faults=nemesis.injected,
                   sessions=nemesis.terminated_sessions, entries=cluster.ledger(),
                   problems=len(problems), drained=drained,
                   elapsed=time.monotonic() - started)
    Path(FIGURES).parent.mkdir(parents=True, exist_ok=True)
    Path(FIGURES).write_text(line + "\n")
    if problems:
        diagnosis = diagnosis or diagnose(cluster, nemesis.fleet)
        problems.append(f"diagnosis (sessions, stacks in the worker logs, dump.json, "
                        f"progress.log) in {diagnosis}")
    report("\n".join([*problems[:200], line]), capsys)

    assert not problems, f"{len(problems)} problem(s), first: {problems[:20]}"
