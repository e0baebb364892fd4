"""The nemesis soak: a mixed workload under random faults, then every invariant (``make soak``).

``make soak`` (``SOAK_SECONDS``, default 600) starts throwaway PostgreSQL and Redis servers
(``scripts/run-tests.sh soak``, like the e2e tier) and runs ``tests/soak/test_soak.py``; ``make
test`` does not run it (the soak runs only when ``SOAK_SECONDS`` is set). For ``SOAK_SECONDS``
seconds:

* a **fleet** of ``SOAK_WORKERS`` (default 3) real ``celery worker`` processes, started as the
  e2e harness starts them (:class:`tests.e2e.harness.Cluster`), kept at that size: every worker
  the nemesis kills or stops is replaced;
* a **reconcile loop** in the test process (``reconcile()`` and ``cancel_sweep()`` every
  ``RECONCILE_INTERVAL``, the harness's :class:`~tests.e2e.harness.Reconciler`);
* a **workload** (:mod:`tests.soak.workload`) submitted continuously through the public API:
  scripted turns calling tools that are not replay-safe and replay-safe (their effects go to the
  ledger under the execution's idempotency key), background fan-out to sub-agents and the join,
  ``launch_agent`` (with or without a completion callback) and ``wait_for``, ``send_message``
  from a model and from the application, ``submit(callback=...)``, application waits
  (``prepare().wait_for(...).submit()``), turns queued in one conversation, and cancels, plain and
  cascade, of random active turns at random moments; sleeps inside model calls and after tool
  effects widen the windows faults land in;
* a **nemesis** (:mod:`tests.soak.nemesis`) injecting one fault every few seconds: SIGKILL of a
  worker's process group, of its pool child only, or of its main process only (the orphaned
  child is killed a lease later); SIGSTOP past the lease, then SIGCONT; SIGTERM to the process
  group (warm shutdown) and a replacement; Redis killed and restarted empty;
  ``pg_terminate_backend`` of a worker's database sessions; the same ``run_turn`` published twice.

Then the nemesis stops (every stopped worker is resumed, the fleet is full), the workload stops
and everything drains: a poll, with a deadline (``SOAK_DRAIN_SECONDS``, default 300), until no
turn is active and no delivery is pending. The checks (:mod:`tests.soak.checks`):

* every turn is terminal (the stuck ones are listed with their state);
* the shipped checker (:func:`turnkit_django.testing.verify.check_invariants`, I1-I4, I6, I7);
* the e2e-only invariants of :mod:`tests.e2e.invariants`: one terminal event per turn (I1),
  each input stored once (I2), I5 from the ledger (at most one effect per execution of a tool
  that is not replay-safe, exactly one when it completed; one key per replay-safe execution),
  and I10 (no advisory lock held, no session idle in a transaction);
* no error from the reconcile loop, the workload's API calls or the nemesis.

It prints ONE line of figures (``soak: seed=... turns=... faults=... effects=...
violations=...``), also written to ``build/soak-figures.txt``, and fails on any violation (the
violations are listed first). The run is reproducible from ``SOAK_SEED`` (printed; random when
unset): the seed fixes every choice of the workload and of the nemesis, in order; the timing of
processes on a shared machine is not reproducible, so neither is the exact interleaving.
"""
