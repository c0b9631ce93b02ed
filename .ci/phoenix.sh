#!/usr/bin/env bash
# Arize Phoenix as a real OTLP trace backend for neuronscope's tests.
#
#   .ci/phoenix.sh install   create its own venv and pip install the pinned arize-phoenix (idempotent)
#   .ci/phoenix.sh start     start `phoenix serve` on 127.0.0.1, detached; wait for /healthz == OK
#   .ci/phoenix.sh stop      stop the server started by `start`
#   .ci/phoenix.sh status    exit 0 if the server answers /healthz
#
# Phoenix lives in its OWN virtual environment: its dependency set (~850 MB) must not leak into
# the project's venv. Non-interactive: works with CI=true and no stdin.
#
# Environment (all optional):
#   PHOENIX_VENV        venv location        (default ~/.cache/neuronscope/phoenix-venv)
#   PHOENIX_PORT        HTTP (UI, REST, OTLP/HTTP) port  (default 6006)
#   PHOENIX_GRPC_PORT   OTLP/gRPC port       (default 4317; Phoenix binds it on all interfaces)
#   PHOENIX_STATE_DIR   pid + log files      (default ~/.cache/neuronscope/phoenix-run-$PHOENIX_PORT)
#   PHOENIX_START_TIMEOUT  seconds to wait for /healthz (default 90)
#   PYTHON              interpreter used to create the venv (default python3.11)
set -euo pipefail
exec </dev/null

# Verified on this project's machines: install, start, OTLP/HTTP ingest, REST read-back.
PHOENIX_VERSION="20.26.1"

PHOENIX_VENV="${PHOENIX_VENV:-$HOME/.cache/neuronscope/phoenix-venv}"
PHOENIX_PORT="${PHOENIX_PORT:-6006}"
PHOENIX_GRPC_PORT="${PHOENIX_GRPC_PORT:-4317}"
PHOENIX_STATE_DIR="${PHOENIX_STATE_DIR:-$HOME/.cache/neuronscope/phoenix-run-$PHOENIX_PORT}"
PHOENIX_START_TIMEOUT="${PHOENIX_START_TIMEOUT:-90}"
PYTHON="${PYTHON:-python3.11}"
PID_FILE="$PHOENIX_STATE_DIR/phoenix.pid"
LOG_FILE="$PHOENIX_STATE_DIR/phoenix.log"
URL="http://127.0.0.1:$PHOENIX_PORT"

log() { echo "phoenix.sh: $*" >&2; }

healthy() {
    # curl if present, else the venv's python (always present after install).
    if command -v curl >/dev/null 2>&1; then
        [ "$(curl -s --max-time 2 "$URL/healthz" 2>/dev/null || true)" = "OK" ]
    else
        "$PHOENIX_VENV/bin/python" - "$URL/healthz" <<'EOF' 2>/dev/null
import sys, urllib.request
sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).read().strip() == b"OK" else 1)
EOF
    fi
}

installed_version() {
    "$PHOENIX_VENV/bin/python" - <<'EOF' 2>/dev/null || true
from importlib.metadata import version
print(version("arize-phoenix"))
EOF
}

cmd_install() {
    if [ -x "$PHOENIX_VENV/bin/phoenix" ] && [ "$(installed_version)" = "$PHOENIX_VERSION" ]; then
        log "arize-phoenix $PHOENIX_VERSION already installed in $PHOENIX_VENV"
        return 0
    fi
    if [ ! -x "$PHOENIX_VENV/bin/python" ]; then
        log "creating venv $PHOENIX_VENV"
        mkdir -p "$(dirname "$PHOENIX_VENV")"
        "$PYTHON" -m venv "$PHOENIX_VENV"
    fi
    log "installing arize-phoenix==$PHOENIX_VERSION into $PHOENIX_VENV (~1 min, ~850 MB)"
    # (grep drops the noise of pip's unreachable local find-links; pipefail keeps pip's status)
    PIP_NO_INPUT=1 "$PHOENIX_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "arize-phoenix==$PHOENIX_VERSION" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
    log "installed arize-phoenix $(installed_version)"
}

cmd_start() {
    [ -x "$PHOENIX_VENV/bin/phoenix" ] || cmd_install
    mkdir -p "$PHOENIX_STATE_DIR"
    if [ -f "$PID_FILE" ] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null && healthy; then
        log "already running (pid $(cat "$PID_FILE")) at $URL"
        echo "$URL"
        return 0
    fi
    if healthy; then
        log "something else already answers $URL/healthz; refusing to start a second server"
        exit 1
    fi
    local workdir SETSID=""
    command -v setsid >/dev/null 2>&1 && SETSID=setsid  # (absent on macOS: then a plain nohup)
    workdir="$(mktemp -d "${TMPDIR:-/tmp}/neuronscope-phoenix.XXXXXX")"
    echo "$workdir" >"$PHOENIX_STATE_DIR/workdir"
    log "starting phoenix serve on $URL (gRPC :$PHOENIX_GRPC_PORT, working dir $workdir, log $LOG_FILE)"
    # setsid: own session/process group, so `stop` can kill the whole group and the server
    # survives the shell (or pytest process) that started it.
    PHOENIX_HOST=127.0.0.1 PHOENIX_PORT="$PHOENIX_PORT" PHOENIX_GRPC_PORT="$PHOENIX_GRPC_PORT" \
    PHOENIX_WORKING_DIR="$workdir" PYTHONUNBUFFERED=1 \
        $SETSID nohup "$PHOENIX_VENV/bin/phoenix" serve >"$LOG_FILE" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$PID_FILE"
    local t0=$SECONDS
    while ! healthy; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "phoenix exited during startup; log tail:"
            tail -n 40 "$LOG_FILE" >&2 || true
            rm -f "$PID_FILE"
            exit 1
        fi
        if [ $((SECONDS - t0)) -ge "$PHOENIX_START_TIMEOUT" ]; then
            log "not healthy after ${PHOENIX_START_TIMEOUT}s; log tail:"
            tail -n 40 "$LOG_FILE" >&2 || true
            cmd_stop || true
            exit 1
        fi
        sleep 0.5
    done
    log "ready after $((SECONDS - t0))s (pid $pid)"
    echo "$URL"
}

cmd_stop() {
    if [ ! -f "$PID_FILE" ]; then
        log "not running (no pid file $PID_FILE)"
        return 0
    fi
    local pid
    pid="$(cat "$PID_FILE")"
    if kill -0 "$pid" 2>/dev/null; then
        # The server leads its own process group (setsid): signal the group.
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -0 "$pid" 2>/dev/null && { kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; }
        log "stopped pid $pid"
    fi
    rm -f "$PID_FILE"
    if [ -f "$PHOENIX_STATE_DIR/workdir" ]; then
        rm -rf "$(cat "$PHOENIX_STATE_DIR/workdir")"
        rm -f "$PHOENIX_STATE_DIR/workdir"
    fi
}

cmd_status() {
    if healthy; then echo "$URL"; else log "not answering $URL/healthz"; exit 1; fi
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) echo "usage: $0 install|start|stop|status" >&2; exit 2 ;;
esac
