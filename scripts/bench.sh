#!/usr/bin/env bash
# Run the benchmarks under bench/ against throwaway servers, stopped on exit; print one markdown
# report at the end (bench/report.py). Benchmarks measure; nothing is asserted.
#
# Usage: scripts/bench.sh [PART...]
#   steps       per-step overhead on PostgreSQL: floor, inline, background (bench/step_overhead.py)
#   sqlite      the same on a SQLite file (IMMEDIATE mode) with its own sqlite3 floor
#   growth      ask 1..200 of one conversation, compaction off and on (bench/growth.py)
#   streaming   one inline turn streamed and not streamed: statements per step, deltas
#               (bench/streaming.py)
#   throughput  300 turns on real Celery workers against a bare task (bench/throughput.py)
#   inflight    1,000 and 5,000 live turns of 2-second model calls on one threads worker with a
#               pool of 20 sessions: time, peak sessions, peak RSS (bench/inflight.py)
#   tenants     one tenant's 2,000 turns of a 2-second model call, then another tenant's one, with
#               TENANT_LIMITS concurrency 20: its time against one turn alone (bench/tenants.py;
#               about four minutes, so not in the default list)
#   kill        SIGKILL of a threads worker holding 1,000 live turns; a second worker finishes
#               them: time, recoveries, invariant checker (bench/kill.py; not in the default list)
#   history     10,000 active turns, then 1,000,000 finished turns added by SQL: the admin lists,
#               reconcile, prune and run.events() before and after, with the heaviest statement's
#               plan (bench/history.py; not in the default list: BENCH_HISTORY_TURNS to shrink)
#   wal         where an inline turn's WAL (by relation and record type, pg_walinspect) and server
#               time (by statement family) go, rows per table (bench/wal_breakdown.py; not in
#               the default list)
#   peers       LangGraph, DBOS, turnkit-django and the floor side by side (bench/peers.py;
#               needs .venv-peers: `make bench-peers`)
# Default: steps sqlite growth streaming throughput inflight (what `make bench` runs).
#
# PostgreSQL is started with pg_stat_statements loaded and no timed checkpoint within a run (the
# server-side blocks CHECKPOINT themselves) through TURNKIT_PG_EXTRA_CONF, read by
# scripts/services.sh; Redis only for the throughput part. Results go to build/bench/*.json.
# Knobs: BENCH_ROUNDS, BENCH_STATS_TURNS, BENCH_GROWTH_ASKS, BENCH_THROUGHPUT_TURNS,
# BENCH_THROUGHPUT_ROUNDS (see bench/README.md).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(steps sqlite growth streaming throughput inflight)
for part in "${parts[@]}"; do
    case $part in
        steps | sqlite | growth | streaming | throughput | inflight | tenants | kill | history | wal | peers) ;;
        *) echo "bench: unknown part '$part' (steps, sqlite, growth, streaming, throughput, inflight, tenants, kill, history, wal, peers)" >&2; exit 2 ;;
    esac
done
want() { [[ " ${parts[*]} " == *" $1 "* ]]; }

PYTHON=$repo/.venv/bin/python
PEERS_PYTHON=$repo/.venv-peers/bin/python
[ -x "$PYTHON" ] || { echo "bench: $PYTHON not found; run 'make venv' first" >&2; exit 2; }
if want peers && [ ! -x "$PEERS_PYTHON" ]; then
    echo "bench: $PEERS_PYTHON not found; run 'make bench-peers'" >&2
    exit 2
fi

out=$repo/build/bench
mkdir -p "$out"
export TURNKIT_BENCH_OUT=$out
for part in "${parts[@]}"; do
    rm -f "$out/$part.json" "$out/$part"-*.json
done

# shellcheck source=scripts/services.sh
source scripts/services.sh
export TURNKIT_SERVICES_OWNER=$$
# services.sh is written for a shell without errexit (as scripts/run-tests.sh runs it): each
# call is the left side of a || so that set -e stays off inside it.
services_stop_orphans || true
trap 'services_stop_started || true' EXIT
trap 'echo "bench: interrupted" >&2; exit 130' INT
trap 'echo "bench: terminated" >&2; exit 143' TERM HUP

if want steps || want growth || want streaming || want throughput || want inflight || want tenants || want kill || want history || want wal || want peers; then
    export TURNKIT_PG_EXTRA_CONF="shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.track_utility = on
pg_stat_statements.max = 10000
checkpoint_timeout = '30min'"
    services_start_pg || { echo "bench: could not start PostgreSQL" >&2; exit 1; }
    export TURNKIT_BENCH_DATABASE_URL=$TURNKIT_TEST_DATABASE_URL
fi
if want throughput || want inflight || want tenants || want kill; then
    services_start_redis || { echo "bench: could not start Redis" >&2; exit 1; }
    export TURNKIT_BENCH_REDIS_URL=$TURNKIT_TEST_REDIS_URL
fi
unset TURNKIT_TEST_DATABASE_URL TURNKIT_TEST_REDIS_URL DJANGO_SETTINGS_MODULE

run() {  # TITLE CMD...
    local title=$1
    shift
    echo
    echo "==================== bench: $title ===================="
    "$@"
}

want steps && run "per step, PostgreSQL" "$PYTHON" bench/step_overhead.py
if want sqlite; then
    rm -f "$out/bench.sqlite3"
    run "per step, SQLite" env "TURNKIT_BENCH_DATABASE_URL=sqlite:///$out/bench.sqlite3" \
        "$PYTHON" bench/step_overhead.py
fi
want growth && run "growth of one conversation" "$PYTHON" bench/growth.py
want streaming && run "streaming, statements per step" "$PYTHON" bench/streaming.py
want throughput && run "throughput on Celery workers" "$PYTHON" bench/throughput.py
want inflight && run "live turns on one threads worker" "$PYTHON" bench/inflight.py
want tenants && run "fairness between tenants" "$PYTHON" bench/tenants.py
want kill && run "SIGKILL of a threads worker holding live turns" "$PYTHON" bench/kill.py
want history && run "history: 10,000 active turns, then a million finished" "$PYTHON" bench/history.py
want wal && run "where an inline turn's WAL and server time go" "$PYTHON" bench/wal_breakdown.py
if want peers; then
    run "peers" "$PEERS_PYTHON" bench/peers.py --turnkit-python "$PYTHON"
fi

echo
echo "==================== bench: report (markdown) ===================="
"$PYTHON" bench/report.py "${parts[@]}"
