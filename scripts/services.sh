#!/usr/bin/env bash
# Throwaway PostgreSQL and Redis servers for the test suite.
#
# Each server listens on 127.0.0.1 only, on a free port, with its data under build/ (state dirs
# build/pg-<pid>-<rand> and build/redis-<pid>-<rand>), and is thrown away when stopped; the
# server logs are kept in build/logs/. Never depend on a server started by hand.
#
# Command line:
#   eval "$(scripts/services.sh start [pg] [redis])"   start (default both), print `export` lines
#   scripts/services.sh stop [STATE_DIR...]           stop the given servers (default: the ones
#                                                     named by TURNKIT_PG_STATE_DIR and
#                                                     TURNKIT_REDIS_STATE_DIR, else all)
#   scripts/services.sh stop-all                      stop every server recorded under build/
#   scripts/services.sh status                        list recorded servers
#
# Sourced (scripts/run-tests.sh does this): services_start_pg, services_start_redis,
# services_stop_started, services_stop_dir DIR, services_stop_all, services_stop_orphans (stops
# servers recorded with an owner pid, TURNKIT_SERVICES_OWNER, that is no longer running).
#
# Exported after a start:
#   TURNKIT_TEST_DATABASE_URL  postgres://turnkit@127.0.0.1:PORT/turnkit (superuser, trust auth)
#   TURNKIT_TEST_REDIS_URL     redis://127.0.0.1:PORT/0
#   TURNKIT_PG_BINDIR          PostgreSQL binaries used (pg_ctl, psql ...)
#   TURNKIT_REDIS_SERVER       redis-server binary used (for tests that restart Redis)
#   TURNKIT_PG_STATE_DIR, TURNKIT_REDIS_STATE_DIR  state dirs, for `stop`
#
# Read at start: TURNKIT_PG_EXTRA_CONF, lines appended to the server's postgresql.conf (the
# benchmarks load pg_stat_statements this way: scripts/bench.sh).
#
# PostgreSQL refuses to run as root: as root the server runs as the system user
# $TURNKIT_PG_OS_USER (default turnkit-pg, created with useradd -r when missing). When that user
# cannot reach build/ (a clone under /root or under a mktemp -d directory is mode 700), or the
# socket path would be too long, the data directory goes to /tmp/turnkit-pg.XXXXXX instead and is
# removed on stop all the same.
#
# Missing servers are installed with apt-get (PostgreSQL when /usr/lib/postgresql/*/bin is absent,
# redis-server when it is not on PATH); package scripts are kept from starting system services.
# services_ensure_chromium (sourced only) installs Debian's chromium the same way when
# /usr/bin/chromium is missing, for the browser tier, and exports TURNKIT_CHROMIUM.

_svc_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SERVICES_BUILD_DIR=${TURNKIT_BUILD_DIR:-$_svc_repo/build}
TURNKIT_PG_STATE_DIR=${TURNKIT_PG_STATE_DIR:-}
TURNKIT_REDIS_STATE_DIR=${TURNKIT_REDIS_STATE_DIR:-}
_svc_apt_updated=""

_svc_log() { echo "services: $*" >&2; }

_svc_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        _svc_log "root is needed to run: $*"
        return 1
    fi
}

_svc_apt_install() {
    local policy=/usr/sbin/policy-rc.d created="" rc=0
    _svc_log "installing $* with apt-get"
    # Keep the packages' maintainer scripts from starting system-wide servers.
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | _svc_root tee "$policy" >/dev/null && _svc_root chmod 755 "$policy" && created=1
    fi
    if [ -z "$_svc_apt_updated" ]; then
        _svc_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 && _svc_apt_updated=1 || rc=$?
    fi
    if [ "$rc" -eq 0 ]; then
        _svc_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" </dev/null >&2 || rc=$?
    fi
    [ -n "$created" ] && _svc_root rm -f "$policy"
    return "$rc"
}

_svc_free_port() {
    local py
    py=$(command -v python3 || command -v python) || { _svc_log "python3 not found"; return 1; }
    "$py" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

_svc_alive() {  # PID: running and not a zombie
    local stat
    [ -n "${1:-}" ] || return 1
    stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ -n "$stat" && "$stat" != Z* ]]
}

_svc_wait_dead() {  # PID SECONDS
    local deadline=$((SECONDS + $2))
    while _svc_alive "$1"; do
        [ "$SECONDS" -ge "$deadline" ] && return 1
        sleep 0.1
    done
}

_svc_save_log() {  # FILE NAME
    [ -s "$1" ] || return 0
    mkdir -p "$SERVICES_BUILD_DIR/logs" && cp "$1" "$SERVICES_BUILD_DIR/logs/$2" 2>/dev/null || true
}

# Servers run as children of this shell (not daemonized, so that this shell reaps them: the
# container's PID 1 may not reap orphans, which would leave zombies behind), in their own session
# so a Ctrl-C reaches the test run but not the servers; the cleanup trap stops them.
_svc_spawned=""
_svc_spawn() {  # LOGFILE CMD...: start CMD in the background, its pid in $_svc_spawned
    local log=$1
    shift
    (cd / && exec setsid "$@") >>"$log" 2>&1 </dev/null &
    _svc_spawned=$!
}

_svc_reap() {  # PID: collect the exit status of a server launched by this shell, if it was
    [ -n "${1:-}" ] && wait "$1" 2>/dev/null
    return 0
}

# ---------------------------------------------------------------------------------- PostgreSQL

_svc_pg_bindir() {
    local dir
    if [ -n "${TURNKIT_PG_BINDIR:-}" ] && [ -x "$TURNKIT_PG_BINDIR/initdb" ]; then
        echo "$TURNKIT_PG_BINDIR"
        return
    fi
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$dir" ] || [ ! -x "$dir/initdb" ]; then
        _svc_apt_install postgresql || return 1
        dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    fi
    [ -n "$dir" ] && [ -x "$dir/initdb" ] || { _svc_log "no PostgreSQL binaries found"; return 1; }
    echo "$dir"
}

_svc_pg_os_user() {  # prints the user to run the server as, empty when not root
    local user=${TURNKIT_PG_OS_USER:-turnkit-pg}
    [ "$(id -u)" -eq 0 ] || return 0
    if ! getent passwd "$user" >/dev/null; then
        useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
            "$user" >&2 || getent passwd "$user" >/dev/null || return 1
    fi
    echo "$user"
}

_svc_as_cmd() {  # USER: print the command prefix that runs a command as USER (nothing if empty)
    [ -n "$1" ] && printf '%s\n' setpriv "--reuid=$1" "--regid=$(id -g "$1")" --init-groups
}

_svc_as() {  # USER CMD...: run CMD as USER (or as ourselves when USER is empty), from /
    local -a prefix
    mapfile -t prefix < <(_svc_as_cmd "$1")
    shift
    (cd / && exec "${prefix[@]}" "$@")
}

services_start_pg() {
    local bindir osuser state pgroot port attempt deadline started=""
    bindir=$(_svc_pg_bindir) || return 1
    osuser=$(_svc_pg_os_user) || return 1
    mkdir -p "$SERVICES_BUILD_DIR" || return 1
    state=$(mktemp -d "$SERVICES_BUILD_DIR/pg-$$-XXXXXX") || return 1
    TURNKIT_PG_STATE_DIR=$state  # set first, so a cleanup trap finds a half-started server
    chmod 755 "$state"  # mktemp -d makes it 700; the server user must reach server/ inside

    pgroot=$state/server
    mkdir "$pgroot" || return 1
    [ -n "$osuser" ] && chown "$osuser" "$pgroot"
    chmod 700 "$pgroot"
    # The socket path (pgroot/sock/.s.PGSQL.NNNNN) must fit in 107 bytes.
    if [ "${#pgroot}" -gt 80 ] || { [ -n "$osuser" ] && ! _svc_as "$osuser" test -w "$pgroot"; }; then
        rmdir "$pgroot"
        pgroot=$(mktemp -d /tmp/turnkit-pg.XXXXXX) || return 1
        [ -n "$osuser" ] && chown "$osuser" "$pgroot"
        _svc_log "PostgreSQL data in $pgroot (build/ is not reachable by ${osuser:-the server user} or too deep)"
    fi
    printf 'kind=pg\nowner=%q\nbindir=%q\nosuser=%q\npgroot=%q\n' \
        "${TURNKIT_SERVICES_OWNER:-}" "$bindir" "$osuser" "$pgroot" >"$state/state"

    if ! _svc_as "$osuser" "$bindir/initdb" -D "$pgroot/data" -U turnkit --auth=trust \
        --encoding=UTF8 --locale=C --no-sync >"$state/initdb.log" 2>&1 </dev/null; then
        _svc_log "initdb failed:"
        cat "$state/initdb.log" >&2
        return 1
    fi
    _svc_as "$osuser" mkdir -m 700 "$pgroot/sock" || return 1
    cat >>"$pgroot/data/postgresql.conf" <<EOF

# turnkit test server
listen_addresses = '127.0.0.1'
unix_socket_directories = '$pgroot/sock'
max_connections = 200
fsync = on
log_line_prefix = '%m [%p] %d '
EOF
    if [ -n "${TURNKIT_PG_EXTRA_CONF:-}" ]; then
        printf '%s\n' "$TURNKIT_PG_EXTRA_CONF" >>"$pgroot/data/postgresql.conf" || return 1
    fi

    local -a as_pg
    mapfile -t as_pg < <(_svc_as_cmd "$osuser")
    for attempt in 1 2 3; do
        port=$(_svc_free_port) || return 1
        _svc_spawn "$state/postgres.log" "${as_pg[@]}" "$bindir/postgres" -D "$pgroot/data" -p "$port"
        printf 'launcher=%q\n' "$_svc_spawned" >>"$state/state"
        deadline=$((SECONDS + 60))
        while [ "$SECONDS" -lt "$deadline" ] && _svc_alive "$_svc_spawned"; do
            if "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" -d postgres -U turnkit -t 2 </dev/null; then
                started=1
                break 2
            fi
            sleep 0.1
        done
        _svc_log "PostgreSQL did not start on port $port (attempt $attempt)"
        kill -TERM "$_svc_spawned" 2>/dev/null
        _svc_wait_dead "$_svc_spawned" 10 || kill -KILL "$_svc_spawned" 2>/dev/null
        _svc_reap "$_svc_spawned"
    done
    if [ -z "$started" ]; then
        tail -n 30 "$state/postgres.log" >&2
        return 1
    fi
    printf 'port=%q\n' "$port" >>"$state/state"

    if ! "$bindir/createdb" -h 127.0.0.1 -p "$port" -U turnkit turnkit >>"$state/postgres.log" 2>&1 </dev/null; then
        _svc_log "createdb turnkit failed"
        tail -n 30 "$state/postgres.log" >&2
        return 1
    fi
    export TURNKIT_TEST_DATABASE_URL="postgres://turnkit@127.0.0.1:$port/turnkit"
    export TURNKIT_PG_BINDIR=$bindir TURNKIT_PG_STATE_DIR
    _svc_log "PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') at $TURNKIT_TEST_DATABASE_URL${osuser:+ (as $osuser)}"
}

_svc_stop_pg() {  # STATE_DIR; state variables already sourced
    local data=$pgroot/data pid="" children="" child
    [ -f "$data/postmaster.pid" ] && pid=$(head -n 1 "$data/postmaster.pid")
    if _svc_alive "$pid"; then
        children=$(pgrep -P "$pid" || true)
        _svc_as "$osuser" "$bindir/pg_ctl" stop -D "$data" -m fast -w -t 30 -s >>"$1/postgres.log" 2>&1 </dev/null \
            || _svc_as "$osuser" "$bindir/pg_ctl" stop -D "$data" -m immediate -w -t 10 -s >>"$1/postgres.log" 2>&1 </dev/null
        if _svc_alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null
            _svc_wait_dead "$pid" 5
        fi
        # Backends notice the postmaster is gone and exit; make sure of it.
        for child in $children; do
            _svc_wait_dead "$child" 5 || kill -KILL "$child" 2>/dev/null
        done
    fi
    _svc_reap "${launcher:-}"
    _svc_save_log "$1/postgres.log" "$(basename "$1").log"
    case $pgroot in /tmp/turnkit-pg.*) rm -rf "$pgroot" ;; esac
}

# ---------------------------------------------------------------------------------------- Redis

_svc_redis_server() {
    local bin
    bin=${TURNKIT_REDIS_SERVER:-$(command -v redis-server || true)}
    [ -z "$bin" ] && [ -x /usr/bin/redis-server ] && bin=/usr/bin/redis-server
    if [ -z "$bin" ] || [ ! -x "$bin" ]; then
        _svc_apt_install redis-server || return 1
        bin=$(command -v redis-server || echo /usr/bin/redis-server)
    fi
    [ -x "$bin" ] || { _svc_log "redis-server not found"; return 1; }
    echo "$bin"
}

_svc_redis_cmd() {  # PORT COMMAND...: send one inline command, print the first reply line
    local reply="" fd
    { exec {fd}<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
    shift
    printf '%s\r\n' "$*" >&"$fd"
    IFS= read -r -t 2 reply <&"$fd" || true
    exec {fd}>&-
    printf '%s\n' "${reply%$'\r'}"
}

services_start_redis() {
    local bin state port attempt deadline started=""
    bin=$(_svc_redis_server) || return 1
    mkdir -p "$SERVICES_BUILD_DIR" || return 1
    state=$(mktemp -d "$SERVICES_BUILD_DIR/redis-$$-XXXXXX") || return 1
    TURNKIT_REDIS_STATE_DIR=$state
    printf 'kind=redis\nowner=%q\nbin=%q\n' "${TURNKIT_SERVICES_OWNER:-}" "$bin" >"$state/state"
    for attempt in 1 2 3; do
        port=$(_svc_free_port) || return 1
        printf 'port=%q\n' "$port" >>"$state/state"
        _svc_spawn "$state/redis.log" "$bin" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
            --daemonize no --dir "$state" --pidfile "$state/redis.pid"
        printf 'launcher=%q\n' "$_svc_spawned" >>"$state/state"
        deadline=$((SECONDS + 10))
        while [ "$SECONDS" -lt "$deadline" ]; do
            if [ "$(_svc_redis_cmd "$port" PING 2>/dev/null)" = "+PONG" ]; then
                started=1
                break 2
            fi
            # The server exited (port taken?): try another port.
            _svc_alive "$_svc_spawned" || break
            sleep 0.1
        done
        _svc_log "Redis did not answer on port $port (attempt $attempt)"
        kill -KILL "$_svc_spawned" 2>/dev/null
        _svc_reap "$_svc_spawned"
        rm -f "$state/redis.pid"
    done
    if [ -z "$started" ]; then
        tail -n 30 "$state/redis.log" >&2
        return 1
    fi
    export TURNKIT_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
    export TURNKIT_REDIS_SERVER=$bin TURNKIT_REDIS_STATE_DIR
    _svc_log "Redis $("$bin" --version | grep -o 'v=[^ ]*' | cut -c3-) at $TURNKIT_TEST_REDIS_URL"
}

_svc_stop_redis() {  # STATE_DIR; state variables already sourced
    local pid=${launcher:-}
    [ -f "$1/redis.pid" ] && pid=$(cat "$1/redis.pid")
    # SHUTDOWN by port also stops a server a test restarted on the same port.
    [ -n "${port:-}" ] && _svc_redis_cmd "$port" SHUTDOWN NOSAVE >/dev/null 2>&1
    if _svc_alive "$pid" && ! _svc_wait_dead "$pid" 5; then
        kill -TERM "$pid" 2>/dev/null
        _svc_wait_dead "$pid" 5 || { kill -KILL "$pid" 2>/dev/null; _svc_wait_dead "$pid" 2; }
    fi
    _svc_reap "${launcher:-}"
    _svc_save_log "$1/redis.log" "$(basename "$1").log"
}

# ------------------------------------------------------------------------------------ Chromium

# The browser tier drives Debian's Chromium through Playwright (never `playwright install`, which
# downloads a browser build of its own). TURNKIT_CHROMIUM overrides the binary.
services_ensure_chromium() {
    local bin=${TURNKIT_CHROMIUM:-/usr/bin/chromium}
    if [ ! -x "$bin" ]; then
        _svc_apt_install chromium || return 1
    fi
    [ -x "$bin" ] || { _svc_log "chromium not found at $bin"; return 1; }
    export TURNKIT_CHROMIUM=$bin
    _svc_log "$("$bin" --version 2>/dev/null | head -n 1) at $bin"
}

# --------------------------------------------------------------------------------- libfaketime

# The e2e tier runs some workers with a skewed wall clock (tests/e2e/harness.py skewed_clock)
# through Debian's libfaketime.
services_ensure_faketime() {
    local lib=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
    if [ ! -e "$lib" ]; then
        _svc_apt_install libfaketime || return 1
    fi
    [ -e "$lib" ] || { _svc_log "libfaketime not found at $lib"; return 1; }
}

# ---------------------------------------------------------------------------------------- stop

services_stop_dir() {  # STATE_DIR: stop that server and remove its files
    local dir=$1 kind="" owner="" bindir="" osuser="" pgroot="" port="" bin="" launcher=""
    [ -n "$dir" ] && [ -d "$dir" ] || return 0
    if [ -f "$dir/state" ]; then
        # shellcheck disable=SC1091
        . "$dir/state"
        case $kind in
            pg) _svc_stop_pg "$dir" ;;
            redis) _svc_stop_redis "$dir" ;;
        esac
    fi
    rm -rf "$dir"
    _svc_log "stopped ${kind:-?} ($(basename "$dir"))"
}

services_stop_started() {  # stop what this shell started
    services_stop_dir "$TURNKIT_REDIS_STATE_DIR"
    services_stop_dir "$TURNKIT_PG_STATE_DIR"
    TURNKIT_REDIS_STATE_DIR="" TURNKIT_PG_STATE_DIR=""
}

services_stop_orphans() {  # stop servers whose owning test run is gone (killed with SIGKILL)
    local dir owner
    for dir in "$SERVICES_BUILD_DIR"/pg-* "$SERVICES_BUILD_DIR"/redis-*; do
        [ -f "$dir/state" ] || continue
        owner=$(sed -n 's/^owner=//p' "$dir/state")
        if [ -n "$owner" ] && ! _svc_alive "$owner"; then
            _svc_log "stopping a server left by a dead test run ($(basename "$dir"))"
            services_stop_dir "$dir"
        fi
    done
    return 0
}

services_stop_all() {
    local dir
    for dir in "$SERVICES_BUILD_DIR"/pg-* "$SERVICES_BUILD_DIR"/redis-*; do
        [ -d "$dir" ] && services_stop_dir "$dir"
    done
    return 0
}

# ------------------------------------------------------------------------------------ commands

_svc_main() {
    local cmd=${1:-}
    [ $# -gt 0 ] && shift
    case $cmd in
        start)
            local want_pg="" want_redis="" arg
            [ $# -eq 0 ] && set -- pg redis
            for arg in "$@"; do
                case $arg in
                    pg | postgres | postgresql) want_pg=1 ;;
                    redis) want_redis=1 ;;
                    *) _svc_log "unknown service: $arg"; return 2 ;;
                esac
            done
            if { [ -n "$want_pg" ] && ! services_start_pg; } || { [ -n "$want_redis" ] && ! services_start_redis; }; then
                services_stop_started
                return 1
            fi
            [ -n "$want_pg" ] && printf 'export TURNKIT_TEST_DATABASE_URL=%q TURNKIT_PG_BINDIR=%q TURNKIT_PG_STATE_DIR=%q\n' \
                "$TURNKIT_TEST_DATABASE_URL" "$TURNKIT_PG_BINDIR" "$TURNKIT_PG_STATE_DIR"
            [ -n "$want_redis" ] && printf 'export TURNKIT_TEST_REDIS_URL=%q TURNKIT_REDIS_SERVER=%q TURNKIT_REDIS_STATE_DIR=%q\n' \
                "$TURNKIT_TEST_REDIS_URL" "$TURNKIT_REDIS_SERVER" "$TURNKIT_REDIS_STATE_DIR"
            return 0
            ;;
        stop)
            if [ $# -gt 0 ]; then
                local dir
                for dir in "$@"; do services_stop_dir "$dir"; done
            elif [ -n "$TURNKIT_PG_STATE_DIR$TURNKIT_REDIS_STATE_DIR" ]; then
                services_stop_started
            else
                services_stop_all
            fi
            ;;
        stop-all) services_stop_all ;;
        status)
            local dir
            for dir in "$SERVICES_BUILD_DIR"/pg-* "$SERVICES_BUILD_DIR"/redis-*; do
                [ -f "$dir/state" ] && echo "$dir: $(grep -E '^(kind|port)=' "$dir/state" | tr '\n' ' ')"
            done
            return 0
            ;;
        *)
            sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
            return 2
            ;;
    esac
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -uo pipefail
    _svc_main "$@"
fi
