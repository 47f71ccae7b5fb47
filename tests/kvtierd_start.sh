# Sourced by the shell tests that start a kvtierd. fail MESSAGE... ends the test.
fail() {
  echo "FAIL: $*"
  exit 1
}

# stop_kvtierd: SIGTERM to the kvtierd start_kvtierd started, and waits for it to exit.
stop_kvtierd() {
  if [ -n "${PID:-}" ]; then
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
    PID=""
  fi
}

# start_kvtierd BINARY CONFIG DIR starts it in the background (its pid in $PID, its stderr in
# DIR/log), waits, bounded, for the port file it writes once it serves, and sources that file
# ($native_port, $resp_port, $http_port, $unix_socket, $g2_arena_file). Exits the test when
# kvtierd dies or does not start.
start_kvtierd() {
  local binary=$1 config=$2 dir=$3
  rm -f "$dir/ports"  # A previous run's.
  "$binary" --config "$config" --port-file "$dir/ports" 2>"$dir/log" &
  PID=$!
  for _ in $(seq 600); do
    [ -f "$dir/ports" ] && break
    kill -0 "$PID" 2>/dev/null || { echo "FAIL: kvtierd exited"; cat "$dir/log"; exit 1; }
    sleep 0.05  # Polling for readiness, bounded.
  done
  [ -f "$dir/ports" ] || { echo "FAIL: kvtierd did not start"; exit 1; }
  # shellcheck disable=SC1091
  source "$dir/ports"
}

# wait_provisioned DIR: waits, bounded, until the kvtierd start_kvtierd started with DIR has
# taken G2's memory (with prefault, on a thread of its own while it already serves): its port
# file says g2_provisioned=1; for a test that looks at the memory G2 holds (kvtier admin arenas).
wait_provisioned() {
  local dir=$1
  for _ in $(seq 600); do
    grep -qx "g2_provisioned=1" "$dir/ports" && return
    kill -0 "$PID" 2>/dev/null || { echo "FAIL: kvtierd exited"; cat "$dir/log"; exit 1; }
    sleep 0.05  # Polling for readiness, bounded.
  done
  echo "FAIL: kvtierd did not take G2's memory"
  cat "$dir/log"
  exit 1
}
