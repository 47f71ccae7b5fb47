# Sourced by bench/daemon_bench.sh and bench/lmcache_bench.sh: a scratch directory ($DIR) and
# the processes to stop at exit ($PIDS), free loopback ports, and waiting for one to open.
DIR=$(mktemp -d)
PIDS=()
bench_cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap bench_cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 500); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.01
  done
  echo "port $1 never opened"; exit 1
}
