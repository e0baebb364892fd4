#!/usr/bin/env bash
# Run the benchmarks under bench/ against a throwaway PostgreSQL, stopped on exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/services.sh
source scripts/services.sh
export TURNKIT_SERVICES_OWNER=$$
services_start_pg >/dev/null
trap services_stop_started EXIT
export TURNKIT_BENCH_DATABASE_URL=$TURNKIT_TEST_DATABASE_URL
.venv/bin/python bench/step_overhead.py
