#!/usr/bin/env bash
# kvtierd on loopback against the physical limit and a peer, in one run, 2 MiB values:
#   iperf3 single stream, 1 MiB writes           (the link)
#   redis-server GET/SET with redis-benchmark    (the peer)
#   kvtierd RESP GET/SET with the same redis-benchmark, same concurrency; ROUNDS rounds
#   (default 5), each running redis-server and kvtierd back to back: the medians of throughput,
#   p99 and server CPU per GiB are printed, and the median of the rounds' ratios. With 2 or more
#   CPUs and taskset, the two servers share one core and redis-benchmark has another to itself
#   kvtierd native TCP GET/PUT (kvtier_daemon_bench, same concurrency), ROUNDS rounds, each
#   after an iperf3 run of its own: the medians, and the median of the rounds' ratios
#   kvtierd native TCP GET/PUT over TLS 1.3 (a second kvtierd, self-signed certificate; skipped
#   without the openssl CLI)
# and prints the ratios. Usage: bench/daemon_bench.sh BUILD_DIR [clients] [ops_per_client]
# (ops_per_client for the native runs; RESP_OPS=1000 for RESP and ROUNDS=5 in the environment)
# Needs iperf3, redis-server and redis-tools (Debian packages of those names).
set -euo pipefail

BUILD=${1:?usage: daemon_bench.sh BUILD_DIR [clients] [ops_per_client]}
CLIENTS=${2:-4}
OPS=${3:-200}
VALUE=2097152
KVTIERD=$BUILD/src/server/kvtierd
NATIVE_BENCH=$BUILD/src/server/kvtier_daemon_bench
for tool in iperf3 redis-server redis-benchmark python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool"; exit 1; }
done

# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

# 1. iperf3: one stream, 1 MiB writes.
IPERF_GBPS=$(iperf3_gibps 1)
echo "iperf3 single stream -l 1M: $(printf %.2f "$IPERF_GBPS") GiB/s"

# redis-benchmark SET, then GET, against the server PID on PORT; prints "op rps p50_ms p99_ms
# server_cpu_seconds client_busy" lines (server CPU time from /proc; client_busy: the share of
# the run redis-benchmark, one thread, spent on a core). RESP_OPS requests per client and test.
RESP_OPS=${RESP_OPS:-1000}
N=$((CLIENTS * RESP_OPS))
ROUNDS=${ROUNDS:-5}
# redis-benchmark on core 0, the RESP servers on core 1: neither takes the other's core, so a
# client busy all of its run was the limit of both servers' rates.
RESP_CLIENT_CPU=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then RESP_CLIENT_CPU=(taskset -c 0); fi
pin_resp_server() { [ ${#RESP_CLIENT_CPU[@]} -eq 0 ] || taskset -a -p -c 1 "$1" >/dev/null; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
redis_bench() {
  local pid=$1 port=$2 t before after TIMEFORMAT="%U %S %R"
  for t in set get; do
    before=$(cpu_ticks "$pid")
    { time "${RESP_CLIENT_CPU[@]}" redis-benchmark -p "$port" -t "$t" -d "$VALUE" -n "$N" \
        -c "$CLIENTS" --csv 2>/dev/null >"$DIR/rb.csv"; } 2>"$DIR/rb.time"
    after=$(cpu_ticks "$pid")
    python3 -c '
import csv, sys
user, system, real = map(float, open(sys.argv[4]).read().split())
for row in csv.reader(open(sys.argv[1])):
    if row and row[0] in ("SET", "GET"):
        print(row[0], row[1], row[4], row[6], (int(sys.argv[3]) - int(sys.argv[2])) / 100,
              (user + system) / real)' \
      "$DIR/rb.csv" "$before" "$after" "$DIR/rb.time"
  done
}

# 2. redis-server, no persistence.
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --save "" --appendonly no --daemonize no >/dev/null 2>&1 &
REDIS_PID=$!
PIDS+=($REDIS_PID)
wait_port "$REDIS_PORT"
pin_resp_server "$REDIS_PID"

# 3 and 4. kvtierd.
cat >"$DIR/kvtierd.toml" <<EOF
data_dir = "$DIR"
[server]
native_listen = "127.0.0.1:0"
resp_listen = "127.0.0.1:0"
http_listen = "127.0.0.1:0"
[memory]
capacity = "$(( (CLIENTS * OPS * 2 + 64) ))MiB"
warm_restart = false   # a benchmark has no next run to hand G2 to
prefault = true   # measure the protocol, not first-touch page faults of the arena
EOF
"$KVTIERD" --config "$DIR/kvtierd.toml" --port-file "$DIR/ports" 2>"$DIR/kvtierd.log" &
PIDS+=($!)
wait_kvtierd "$!" "$DIR/ports" "$DIR/kvtierd.log"
# shellcheck disable=SC1091
source "$DIR/ports"
# The RESP comparison runs against a kvtierd of its own with one event loop, as redis-server
# serves clients from one thread (on a small machine a second loop takes the core the
# benchmark client needs).
mkdir -p "$DIR/resp"
cat >"$DIR/resp.toml" <<EOF
data_dir = "$DIR/resp"
[server]
native_listen = ""
resp_listen = "127.0.0.1:0"
http_listen = ""
unix_socket = ""
threads = 1
[memory]
capacity = "256MiB"
warm_restart = false   # a benchmark has no next run to hand G2 to
prefault = true
[disk]
dir = ""
EOF
"$KVTIERD" --config "$DIR/resp.toml" --port-file "$DIR/resp_ports" 2>"$DIR/kvtierd_resp.log" &
KVTIERD_PID=$!
PIDS+=($KVTIERD_PID)
wait_kvtierd "$KVTIERD_PID" "$DIR/resp_ports" "$DIR/kvtierd_resp.log"
RESP_PORT=$(sed -n 's/^resp_port=//p' "$DIR/resp_ports")
pin_resp_server "$KVTIERD_PID"
REDIS=""
KV_RESP=""
for _ in $(seq 1 "$ROUNDS"); do
  REDIS+=$(redis_bench "$REDIS_PID" "$REDIS_PORT")$'\n'
  KV_RESP+=$(redis_bench "$KVTIERD_PID" "$RESP_PORT")$'\n'
done
# Native rounds alternate with iperf3 runs of 2 s: each round's ratio is against the link as it
# was just then (one iperf3 run before all of them moved the ratios by a third between runs of
# this script on a shared VM), and the median of the rounds is the target's.
KV_NATIVE=""
for r in $(seq 1 "$ROUNDS"); do
  KV_NATIVE+="iperf,$(iperf3_gibps 1 2)"$'\n'
  KV_NATIVE+=$("$NATIVE_BENCH" --endpoint "127.0.0.1:$native_port" --clients "$CLIENTS" \
    --ops "$OPS" --value-bytes "$VALUE" | tail -n +2)$'\n'
done

# 5. The same native run over TLS 1.3, against a second kvtierd.
KV_TLS=""
if command -v openssl >/dev/null; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 \
    -keyout "$DIR/key.pem" -out "$DIR/cert.pem" >/dev/null 2>&1
  mkdir -p "$DIR/tls"
  sed -e "s|^data_dir = .*|data_dir = \"$DIR/tls\"|" "$DIR/kvtierd.toml" >"$DIR/tls.toml"
  "$KVTIERD" --config "$DIR/tls.toml" --port-file "$DIR/tls_ports" --unix-socket "" \
    --tls-cert "$DIR/cert.pem" --tls-key "$DIR/key.pem" 2>"$DIR/kvtierd_tls.log" &
  PIDS+=($!)
  wait_kvtierd "$!" "$DIR/tls_ports" "$DIR/kvtierd_tls.log"
  TLS_NATIVE_PORT=$(sed -n 's/^native_port=//p' "$DIR/tls_ports")
  KV_TLS=$("$NATIVE_BENCH" --endpoint "127.0.0.1:$TLS_NATIVE_PORT" --tls-ca "$DIR/cert.pem" \
    --clients "$CLIENTS" --ops "$OPS" --value-bytes "$VALUE")
fi

python3 - "$IPERF_GBPS" "$VALUE" "$CLIENTS" "$N" "$ROUNDS" "$(dirname "$0")" <<EOF
import os, statistics, sys
iperf = float(sys.argv[1]); value = int(sys.argv[2]); clients = sys.argv[3]
n = int(sys.argv[4]); rounds = int(sys.argv[5])
sys.path.insert(0, sys.argv[6])
from targets import not_measured, target
def parse_redis(text):
    """Per op, per round: (GiB/s, p50 ms, p99 ms, server CPU seconds per GiB, client busy)."""
    out = {}
    for line in text.strip().splitlines():
        op, rps, p50, p99, cpu, busy = line.split()
        out.setdefault(op, []).append(
            (float(rps) * value / 2**30, float(p50), float(p99), float(cpu) / (n * value / 2**30),
             float(busy)))
    return out
redis_rounds = parse_redis("""$REDIS""")
resp_rounds = parse_redis("""$KV_RESP""")
def median(rows):
    return tuple(statistics.median(r[i] for r in rows) for i in range(len(rows[0])))
redis = {op: median(r) for op, r in redis_rounds.items()}
resp = {op: median(r) for op, r in resp_rounds.items()}
native_rounds = {}  # op -> per round (GiB/s, p50 ms, p99 ms, that round's iperf3 GiB/s)
for line in """$KV_NATIVE""".strip().splitlines():
    f = line.split(",")
    if f[0] == "iperf":
        link = float(f[1])
    else:
        native_rounds.setdefault(f[0], []).append((float(f[5]), float(f[6]), float(f[7]), link))
native = {op: median(rows) for op, rows in native_rounds.items()}
print(f"\n2 MiB values, {clients} clients, loopback")
print(f"{'':28s} {'GiB/s':>8s} {'p50 ms':>8s} {'p99 ms':>8s}  {'vs iperf3':>9s}  {'vs redis':>8s}")
def row(name, r, peer=None):
    ratio = f"{r[0] / peer[0]:8.2f}x" if peer else ""
    print(f"{name:28s} {r[0]:8.2f} {r[1]:8.3f} {r[2]:8.3f}  {r[0] / iperf:8.2f}x  {ratio}")
print(f"{'iperf3 -l 1M (1 stream)':28s} {iperf:8.2f}")
row("redis-server SET", redis["SET"]); row("redis-server GET", redis["GET"])
row("kvtierd RESP SET", resp["SET"], redis["SET"]); row("kvtierd RESP GET", resp["GET"], redis["GET"])
print(f"\nRESP, median over {rounds} rounds of each round's kvtierd / redis-server:")
resp_ratios = {}
for op in ("SET", "GET"):
    pairs = list(zip(resp_rounds[op], redis_rounds[op]))
    rates = [k[0] / r[0] for k, r in pairs]
    tput = statistics.median(rates)
    p99 = statistics.median(k[2] / r[2] for k, r in pairs)
    cpu = statistics.median(k[3] / r[3] for k, r in pairs)
    resp_ratios[op] = (tput, p99, cpu, min(rates), max(rates))
    print(f"  {op}: throughput {tput:.2f}x, p99 {p99:.2f}x, server CPU per GiB {cpu:.2f}x"
          f" ({resp[op][3]:.3f} vs {redis[op][3]:.3f} s/GiB)")
row("kvtierd native PUT", native["PUT"]); row("kvtierd native GET", native["GET"])
native_ratio = {op: statistics.median(r[0] / r[3] for r in rows)
                for op, rows in native_rounds.items()}
links = [r[3] for r in native_rounds["PUT"]]
print(f"\nnative, median over {len(links)} rounds of each round's kvtierd / iperf3 (iperf3 run "
      f"before the round, {min(links):.2f}-{max(links):.2f} GiB/s): "
      f"PUT {native_ratio['PUT']:.2f}x, GET {native_ratio['GET']:.2f}x")
tls = {}
for line in """$KV_TLS""".strip().splitlines()[1:]:
    f = line.split(",")
    tls[f[0]] = (float(f[5]), float(f[6]), float(f[7]))
if tls:
    row("kvtierd native TLS 1.3 PUT", tls["PUT"]); row("kvtierd native TLS 1.3 GET", tls["GET"])
    print(f"\nTLS 1.3 / plaintext native, same run: PUT {tls['PUT'][0] / native['PUT'][0]:.2f}x,"
          f" GET {tls['GET'][0] / native['GET'][0]:.2f}x")
print()
for op in ("PUT", "GET"):
    target(f"native {op} / iperf3", native_ratio[op], ">=", 0.85)
for op in ("SET", "GET"):
    # redis-benchmark reads and writes from one thread; when it is busy all the time, it sets
    # the rate of both servers, and iperf3's -l 1M stream is beyond any RESP server here.
    busy = resp[op][4]
    # Then which server is faster shows in the CPU each spent per GiB, not in the rates: where
    # kvtierd spent no more than redis-server, a round's ratio is the client's noise.
    _, _, cpu, low, high = resp_ratios[op]
    pinned = "${RESP_CLIENT_CPU[*]}" != ""
    client_bound = (
        f"redis-benchmark (one thread{', a core of its own' if pinned else ''}) was busy "
        f"{busy:.0%} of kvtierd's runs and {redis[op][4]:.0%} of redis-server's, so it set both "
        f"rates (rounds {low:.2f}-{high:.2f}x); kvtierd spent {cpu:.2f}x redis-server's CPU per GiB"
        if min(busy, redis[op][4]) >= 0.9 and cpu <= 1.0 else "")
    target(f"RESP {op} / redis-server", resp_ratios[op][0], ">=", 1.0, why_not=client_bound)
    target(f"RESP {op} / iperf3", resp[op][0] / iperf, ">=", 0.8,
           why_not=f"the RESP client (redis-benchmark, one thread) was on a core {busy:.0%} of "
                   "the run, so the client set this rate; the line above compares kvtierd with "
                   "redis-server under the same client"
                   if busy >= 0.9 else "")
    target(f"RESP {op} p99 / redis-server's", resp_ratios[op][1], "<=", 1.0, why_not=client_bound)
# Without kernel TLS each byte is sealed and opened in user space, on the cores the benchmark
# client shares with kvtierd (issue 17's note: out of reach on a 2-core VM without it).
cores = os.cpu_count() or 1
no_ktls = "" if os.path.exists("/proc/net/tls_stat") else (
    f"no kernel TLS here (no /proc/net/tls_stat) and client and server share {cores} cores, "
    "each end sealing or opening every byte in user space")
for op in ("PUT", "GET"):
    if tls:
        target(f"native TLS {op} / plaintext", tls[op][0] / native[op][0], ">=", 0.7,
               why_not=no_ktls)
    else:
        not_measured(f"native TLS {op} / plaintext", "no openssl to make a certificate")
EOF
