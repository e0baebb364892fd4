#!/usr/bin/env bash
# Run the test tiers against throwaway servers (called by `make test`, `make test-unit` ...).
#
# Usage: scripts/run-tests.sh [TIER...] [-- PYTEST_ARGS...]
#   TIER: all (default) | unit | integration (integration + concurrency) | browser | e2e
#         | unit-django61 | integration-django61 | soak
#
#   unit         pytest tests/unit                            SQLite in memory, no servers
#   integration  pytest tests/integration tests/concurrency   + TURNKIT_TEST_DATABASE_URL
#   browser      pytest tests/browser                         + PostgreSQL, headless Chromium
#   e2e          pytest tests/e2e                             + TURNKIT_TEST_REDIS_URL
#   *-django61   the same tier with .venv-django61 (Django 6.1 / Python 3.13, else 3.12)
#   all          unit integration browser e2e unit-django61 integration-django61
#   soak         pytest tests/soak                            the e2e servers, no coverage;
#                                                             SOAK_SECONDS of faults (default
#                                                             600), SOAK_SEED to replay one.
#                                                             Never part of all: `make soak`
#
# The browser tier drives Debian's /usr/bin/chromium with Playwright (installed with apt-get
# when missing, like the servers; never `playwright install`) under tests.browser.settings, and
# saves its screenshots in build/screenshots/.
#
# Starts only the servers the chosen tiers need (scripts/services.sh) and stops them on exit,
# whatever happens (failure, Ctrl-C). Coverage accumulates across the reference tiers
# (build/.coverage) and is reported at the end. Stops at the first failing tier.
#
# A tier that collects no tests (pytest exit 5) FAILS. When PYTEST_ARGS are given (they may
# filter with -k/-m), an empty tier is only reported, but then at least one tier must run tests.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 1
PYTHON=${TURNKIT_PYTHON:-$repo/.venv/bin/python}
PYTHON61=${TURNKIT_PYTHON_DJANGO61:-$repo/.venv-django61/bin/python}

tiers=()
pytest_args=()
while [ $# -gt 0 ]; do
    case $1 in
        --) shift; pytest_args=("$@"); break ;;
        all) tiers+=(unit integration browser e2e unit-django61 integration-django61) ;;
        unit | integration | browser | e2e | unit-django61 | integration-django61 | soak)
            tiers+=("$1") ;;
        -h | --help) sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//p}' "$0"; exit 0 ;;
        *) echo "run-tests: unknown tier '$1' (unit, integration, browser, e2e, unit-django61," \
                "integration-django61, soak, all)" >&2; exit 2 ;;
    esac
    shift
done
[ ${#tiers[@]} -eq 0 ] && tiers=(unit integration browser e2e)

want() { [[ " ${tiers[*]} " == *" $1 "* ]]; }

if [ ! -x "$PYTHON" ]; then
    echo "run-tests: $PYTHON not found; run 'make venv' first" >&2
    exit 2
fi
if { want unit-django61 || want integration-django61; } && [ ! -x "$PYTHON61" ]; then
    echo "run-tests: $PYTHON61 not found; run 'make venv-django61' first" >&2
    exit 2
fi

# Servers, stopped on any exit. INT/TERM go through exit so the EXIT trap runs once.
# shellcheck source=scripts/services.sh
source "$repo/scripts/services.sh"
export TURNKIT_SERVICES_OWNER=$$
services_stop_orphans  # servers of an earlier run that was killed outright (SIGKILL)
trap 'services_stop_started' EXIT
trap 'echo "run-tests: interrupted" >&2; exit 130' INT
trap 'echo "run-tests: terminated" >&2; exit 143' TERM HUP

if want integration || want browser || want e2e || want integration-django61 || want soak; then
    services_start_pg || { echo "run-tests: could not start PostgreSQL" >&2; exit 1; }
fi
if want browser; then
    services_ensure_chromium || { echo "run-tests: could not install Chromium" >&2; exit 1; }
fi
if want e2e || want soak; then
    services_start_redis || { echo "run-tests: could not start Redis" >&2; exit 1; }
    services_ensure_faketime || { echo "run-tests: could not install libfaketime" >&2; exit 1; }
fi
db_url=${TURNKIT_TEST_DATABASE_URL:-}
redis_url=${TURNKIT_TEST_REDIS_URL:-}
# Each tier gets exactly the servers it is meant to use; the settings come from pyproject.toml.
unset TURNKIT_TEST_DATABASE_URL TURNKIT_TEST_REDIS_URL DJANGO_SETTINGS_MODULE

export COVERAGE_FILE=$repo/build/.coverage
mkdir -p "$repo/build"
"$PYTHON" -m coverage erase

summary=()
ran_tests=""

# run_tier NAME EMPTY_OK PYTHON [VAR=VALUE...] -- PYTEST_PATHS...
run_tier() {
    local name=$1 empty_ok=$2 python=$3 start rc
    shift 3
    local -a envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    echo
    echo "==================== tier: $name ($*) ===================="
    echo "    $("$python" -c 'import sys, django; print("Python %d.%d.%d" % sys.version_info[:3], "/ Django", django.__version__)')"
    [ ${#envs[@]} -gt 0 ] && printf '    %s\n' "${envs[@]}"
    start=$SECONDS
    # Coverage is measured on the reference stack only (it doubles the time of a tier); not in
    # the soak either: it covers nothing the other tiers do not, and would slow its workers.
    local -a cov=(--cov=turnkit_django --cov-report= --cov-append)
    [[ $name == *-django61 || $name == soak ]] && cov=()
    env "${envs[@]}" "$python" -m pytest "$@" "${cov[@]}" "${pytest_args[@]}"
    rc=$?
    local took=$((SECONDS - start))s
    case $rc in
        0)
            ran_tests=1
            summary+=("passed   $name ($took)")
            return 0
            ;;
        5)
            if [ "$empty_ok" = yes ]; then
                echo "run-tests: no $name tests yet (pytest collected nothing); tier skipped"
                summary+=("empty    $name: no tests yet")
                return 0
            fi
            if [ ${#pytest_args[@]} -gt 0 ]; then
                echo "run-tests: no $name tests selected by PYTEST_ARGS (${pytest_args[*]})"
                summary+=("empty    $name: nothing selected by PYTEST_ARGS")
                return 0
            fi
            echo "run-tests: tier $name collected NO tests (pytest exit 5); an empty tier fails" >&2
            summary+=("FAILED   $name: no tests collected (pytest exit 5)")
            return 1
            ;;
        *)
            summary+=("FAILED   $name: pytest exit $rc ($took)")
            return 1
            ;;
    esac
}

finish() {  # RC
    echo
    echo "==================== summary ===================="
    printf '  %s\n' "${summary[@]}"
    if [ "$1" -eq 0 ]; then
        echo
        "$PYTHON" -m coverage report --skip-empty 2>&1 || echo "(no coverage data)"
    fi
    exit "$1"
}

failed=""
for tier in unit integration browser e2e unit-django61 integration-django61 soak; do
    want "$tier" || continue
    case $tier in
        unit)
            run_tier unit no "$PYTHON" -- tests/unit || failed=$tier
            ;;
        integration)
            run_tier integration no "$PYTHON" "TURNKIT_TEST_DATABASE_URL=$db_url" \
                -- tests/integration tests/concurrency || failed=$tier
            ;;
        browser)
            run_tier browser no "$PYTHON" "TURNKIT_TEST_DATABASE_URL=$db_url" \
                "DJANGO_SETTINGS_MODULE=tests.browser.settings" \
                "TURNKIT_CHROMIUM=${TURNKIT_CHROMIUM:-/usr/bin/chromium}" \
                -- tests/browser || failed=$tier
            ;;
        e2e)
            run_tier e2e no "$PYTHON" "TURNKIT_TEST_DATABASE_URL=$db_url" \
                "TURNKIT_TEST_REDIS_URL=$redis_url" -- tests/e2e || failed=$tier
            ;;
        unit-django61)
            run_tier unit-django61 no "$PYTHON61" -- tests/unit || failed=$tier
            ;;
        integration-django61)
            run_tier integration-django61 no "$PYTHON61" "TURNKIT_TEST_DATABASE_URL=$db_url" \
                -- tests/integration tests/concurrency || failed=$tier
            ;;
        soak)
            # Its one line of figures joins the summary.
            rm -f "$repo/build/soak-figures.txt"
            run_tier soak no "$PYTHON" "TURNKIT_TEST_DATABASE_URL=$db_url" \
                "TURNKIT_TEST_REDIS_URL=$redis_url" "SOAK_SECONDS=${SOAK_SECONDS:-600}" \
                -- tests/soak || failed=$tier
            [ -s "$repo/build/soak-figures.txt" ] && summary+=("         $(cat "$repo/build/soak-figures.txt")")
            ;;
    esac
    if [ -n "$failed" ]; then
        echo
        echo "run-tests: tier '$failed' FAILED; later tiers not run" >&2
        finish 1
    fi
done

if [ -z "$ran_tests" ] && [ ${#pytest_args[@]} -gt 0 ]; then
    summary+=("FAILED   PYTEST_ARGS selected no test in any tier")
    finish 1
fi
finish 0
