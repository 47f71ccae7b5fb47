# Sourced by bench/daemon_bench.sh, bench/lmcache_bench.sh and bench/shm_bench.sh: a scratch
# directory ($DIR) and the processes to stop at exit ($PIDS), free loopback ports, waiting for
# one to open or for a kvtierd to be ready, and loopback TCP's speed (iperf3).
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
# wait_kvtierd PID PORTS LOG: until the kvtierd PID, started with --port-file PORTS and logging
# to LOG, serves and G2 has taken its memory (with `prefault = true` it does so on a thread of its
# own while it serves: measured meanwhile, the first phase would be charged for clearing every
# page of G2): its port file says g2_provisioned=1. bench/kvtierd.py's wait_ready, in shell.
wait_kvtierd() {
  for _ in $(seq 1 12000); do
    if [ -f "$2" ] && grep -qx "g2_provisioned=1" "$2"; then return 0; fi
    kill -0 "$1" 2>/dev/null || break
    sleep 0.01
  done
  cat "$3"
  echo "kvtierd did not start, or G2 did not take its memory"
  exit 1
}

# iperf3_gibps STREAMS [SECONDS]: loopback TCP's speed in GiB/s, as iperf3 measures it with
# STREAMS parallel streams of 1 MiB writes for SECONDS (default 5; its own server, stopped
# before it returns).
iperf3_gibps() {
  local port pid json server_log
  port=$(free_port)
  json="$DIR/iperf-$1.json"
  server_log="$DIR/iperf-server-$1.log"
  iperf3 -s -p "$port" >"$server_log" 2>&1 &
  pid=$!
  # Retry until the server is up (a bare connect probe would be taken for an iperf3 client).
  # With -J, iperf3 3.12 exits 0 when its connection is refused, with the error in its JSON:
  # a client that ran before the server listened ended the loop, and the run had no result.
  for _ in $(seq 1 200); do
    iperf3 -c 127.0.0.1 -p "$port" -P "$1" -l 1M -t "${2:-5}" -J >"$json" 2>/dev/null
    grep -q '"unable to connect to server' "$json" || break
    kill -0 "$pid" 2>/dev/null || { echo "iperf3's server on port $port exited:" >&2; tail -5 "$server_log" >&2; exit 1; }
    sleep 0.02
  done
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
r = d.get("end", {}).get("sum_received")
if r is None: sys.exit("iperf3 gave no result: " + json.dumps(d.get("error", d))[:2000])
print(r["bits_per_second"] / 8 / 2**30)' "$json"
}
