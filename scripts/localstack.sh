#!/usr/bin/env bash
# Run LocalStack without Docker ("host mode"): its Python runtime in its own
# Python 3.13 venv, started directly (the `localstack` CLI asks for an account).
# Facts behind the settings: /work/shared/localstack.md.
#
# Usage: scripts/localstack.sh install|start|stop|restart|status
# Env:   LOCALSTACK_VENV   venv dir        (default <repo>/.localstack-venv)
#        LOCALSTACK_STATE  pid + log dir   (default <repo>/.localstack)
#        LOCALSTACK_START_TIMEOUT seconds  (default 120)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${LOCALSTACK_VENV:-$REPO_ROOT/.localstack-venv}"
STATE="${LOCALSTACK_STATE:-$REPO_ROOT/.localstack}"
PID_FILE="$STATE/pid"
LOG_FILE="$STATE/localstack.log"
TIMEOUT="${LOCALSTACK_START_TIMEOUT:-120}"
LOCALSTACK_VERSION="2026.3.0"
HOST_PORT="127.0.0.1:4566"
INIT_URL="http://$HOST_PORT/_localstack/init"

log() { echo "localstack.sh: $*" >&2; }

find_python313() {
    local candidate
    if command -v pyenv >/dev/null 2>&1; then
        candidate="$(pyenv root)/versions/3.13.0/bin/python"
        if [[ -x "$candidate" ]]; then echo "$candidate"; return; fi
    fi
    if command -v python3.13 >/dev/null 2>&1; then command -v python3.13; return; fi
    log "Python 3.13 not found (LocalStack $LOCALSTACK_VERSION needs it; 3.11/3.12 fail)"
    exit 1
}

installed_version() {
    [[ -x "$VENV/bin/python" ]] || return 0
    "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("localstack-core"))' 2>/dev/null || true
}

cmd_install() {
    if [[ "$(installed_version)" == "$LOCALSTACK_VERSION" ]]; then
        log "localstack-core $LOCALSTACK_VERSION already installed in $VENV"
        return
    fi
    if [[ ! -x "$VENV/bin/python" ]]; then
        "$(find_python313)" -m venv "$VENV"
    fi
    # The caps keep pip away from releases that break this LocalStack version.
    "$VENV/bin/python" -m pip install --quiet \
        "localstack-core[runtime]==$LOCALSTACK_VERSION" 'cbor2<6' 'pyopenssl<25.2' 'cryptography<46' service_identity \
        2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
    log "installed localstack-core $(installed_version) in $VENV"
}

# Prints the PID from the pid file if that process is alive.
running_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$PID_FILE")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

is_ready() {
    curl -fsS --max-time 2 "$INIT_URL" 2>/dev/null | grep -Eq '"READY": ?true'
}

cmd_start() {
    if running_pid >/dev/null && is_ready; then
        log "already running (pid $(cat "$PID_FILE")) and ready"
        return
    fi
    if ! running_pid >/dev/null && is_ready; then
        log "something not started by this script already answers on $HOST_PORT; leaving it alone"
        return
    fi
    if ! running_pid >/dev/null; then
        [[ -x "$VENV/bin/python" ]] || { log "not installed: run '$0 install' first"; exit 1; }
        mkdir -p "$STATE"
        # setsid: own process group, so stop can end LocalStack and its children together.
        env SERVICES=sqs,s3,events,sns,ses,logs,stepfunctions,apigateway,cloudformation,iam,sts \
            GATEWAY_LISTEN="$HOST_PORT" LOCALSTACK_HOST="$HOST_PORT" \
            SQS_ENDPOINT_STRATEGY=path DNS_ADDRESS=0 DISABLE_EVENTS=1 \
            SKIP_SSL_CERT_DOWNLOAD=1 GATEWAY_SERVER=twisted \
            S3_SKIP_SIGNATURE_VALIDATION=0 \
            setsid "$VENV/bin/python" -m localstack.runtime.main >>"$LOG_FILE" 2>&1 </dev/null &
        echo $! >"$PID_FILE"
        log "started pid $(cat "$PID_FILE"), log $LOG_FILE"
    fi
    local waited=0
    until is_ready; do
        if ! running_pid >/dev/null; then
            log "LocalStack exited during startup; last log lines:"
            tail -n 30 "$LOG_FILE" >&2
            rm -f "$PID_FILE"
            exit 1
        fi
        if (( waited >= TIMEOUT )); then
            log "not ready after ${TIMEOUT}s (see $LOG_FILE)"
            exit 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
    log "ready at http://$HOST_PORT"
}

cmd_stop() {
    local pid
    if ! pid="$(running_pid)"; then
        log "not running"
        rm -f "$PID_FILE"
        return
    fi
    # The pid leads its own process group (setsid in start): signal the group.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    local waited=0
    while kill -0 "$pid" 2>/dev/null; do
        if (( waited >= 30 )); then
            log "still alive after 15s; sending SIGKILL"
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        fi
        sleep 0.5
        waited=$((waited + 1))
    done
    rm -f "$PID_FILE"
    log "stopped (pid $pid)"
}

cmd_status() {
    local pid
    if pid="$(running_pid)"; then
        if is_ready; then
            echo "running (pid $pid), ready at http://$HOST_PORT"
        else
            echo "running (pid $pid), not ready"
            return 1
        fi
    else
        echo "not running"
        return 3
    fi
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    restart) cmd_stop; cmd_start ;;
    status) cmd_status ;;
    *) echo "usage: $0 install|start|stop|restart|status" >&2; exit 2 ;;
esac
