# Sourced by the end-to-end scripts (agent_e2e.sh, apis_e2e.sh): the skip/fail exits, the node
# check, a temporary directory $TMP that is removed on exit, and starting and stopping
# `cedar serve` ($CEDAR) with every server it started stopped on exit, whatever happens.
#
#   . "$SRC/tests/e2e/common.sh"
#   e2e_setup cedar-apis          # node >= 18 or skip; TMP=$(mktemp -d .../cedar-apis-XXXXXX); traps
#   start_server NAME ARGS...     # `cedar serve --model ${MODEL_DIR:-$TMP/tiny} ARGS`, waits for "listening"
#   stop_server NAME              # SIGTERM; it must exit 0 within 30 s

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

PIDS=()
e2e_cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  rm -rf "$TMP"
}

# e2e_setup PREFIX: skips without node >= 18; makes $TMP and the exit traps.
e2e_setup() {
  command -v node >/dev/null 2>&1 || skip "node is not installed"
  local major
  major=$(node -p 'process.versions.node.split(".")[0]')
  [ "$major" -ge 18 ] || skip "node $major is older than 18"
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/$1-XXXXXX")
  trap e2e_cleanup EXIT
  trap 'exit 1' INT TERM
}

# start_server NAME ARGS...: starts `cedar serve`, waits for its "listening" line (output in
# $TMP/NAME.out, errors in $TMP/NAME.err); SERVER_PID is its process.
start_server() {
  local name=$1; shift
  "$CEDAR" serve --model "${MODEL_DIR:-$TMP/tiny}" --drain-timeout 5 "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  for _ in $(seq 300); do
    grep -q '"event":"listening"' "$TMP/$name.out" 2>/dev/null && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$TMP/$name.err"; fail "$name: the server exited at start"; }
    sleep 0.1
  done
  fail "$name: the server did not start within 30 s"
}

# stop_server NAME: SIGTERM, then it must exit 0 within 30 s.
stop_server() {
  local name=$1
  kill -TERM "$SERVER_PID"
  for _ in $(seq 300); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$SERVER_PID" 2>/dev/null && fail "$name: still running 30 s after SIGTERM"
  wait "$SERVER_PID"
  local rc=$?
  [ "$rc" -eq 0 ] || { cat "$TMP/$name.err"; fail "$name: exit status $rc after SIGTERM"; }
}
