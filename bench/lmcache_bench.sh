#!/usr/bin/env bash
# LMCache's own L2 benchmark (`lmcache bench l2`, from the pinned lmcache package in build/venv)
# with its L2 on, in one run, same chunk size, keys per batch and batches in flight:
#   redis-server             through LMCache's `resp` adapter (LMCache's C++ RESP client)
#   kvtierd RESP port        through the same `resp` adapter
#   kvtierd Unix socket      through kvtier's `native_plugin` (kvtier.lmcache.NativeConnector,
#                            shared memory)
#   kvtierd native TCP       through `native_plugin` over the native protocol
# Each is run REPEAT times, interleaved; the medians of store and load throughput are printed with
# their ratios to redis-server, then the targets' lines (bench/all.sh collects them), with
# loopback TCP's speed (iperf3) as the limit of the TCP lines. kvtierd runs with G2 only (G3
# off), as redis-server keeps everything in DRAM; LMCache's data verification runs on the last
# round of each. kvtierd runs an event loop per core and redis-server one: with two CPUs or more,
# each round also runs redis-server and a kvtierd with one loop through `resp`, each on a CPU that
# the client (on another) does not use, and a RESP line not met gives that pair's ratio.
# kvtierd is emptied before each of its runs, so that each stores new chunks (a chunk kvtierd
# already holds is not stored again); redis-server is not, so that its memory stays allocated (an
# untimed run first fills it): each run overwrites the chunks of the run before, its fastest case.
# Usage: bench/lmcache_bench.sh BUILD_DIR [chunk_kb] [keys_per_batch] [in_flight] [rounds] [repeat]
# Needs redis-server, iperf3 and build/venv (scripts/deps.sh; `pip install ./python` into it).
set -euo pipefail

BUILD=${1:?usage: lmcache_bench.sh BUILD_DIR [chunk_kb] [keys_per_batch] [in_flight] [rounds] [repeat]}
CHUNK_KB=${2:-2048}
KEYS=${3:-32}
IN_FLIGHT=${4:-4}
ROUNDS=${5:-10}
REPEAT=${6:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KVTIERD=$BUILD/src/server/kvtierd
LMCACHE=$ROOT/build/venv/bin/lmcache
PY=$ROOT/build/venv/bin/python
for tool in redis-server redis-cli curl iperf3 "$LMCACHE" "$KVTIERD"; do
  command -v "$tool" >/dev/null || { echo "missing $tool"; exit 1; }
done
"$PY" -c 'import kvtier.lmcache' || { echo "kvtier is not installed in build/venv: pip install ./python"; exit 1; }

# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
export LMCACHE_DISABLE_BANNER=1 LMCACHE_TRACK_USAGE=false PYTHONWARNINGS=ignore

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --save "" --appendonly no --daemonize no >/dev/null 2>&1 &
PIDS+=($!)
REDIS_PID=$!
wait_port "$REDIS_PORT"

# Room for every chunk the runs store (LMCache's benchmark stores new keys each round, and
# redis-server, without maxmemory, keeps them all): nothing is evicted before it is loaded.
BYTES_MIB=$(( CHUNK_KB * KEYS * IN_FLIGHT * (ROUNDS + 1) * 3 / 1024 + 256 ))
cat >"$DIR/kvtierd.toml" <<TOML
data_dir = "$DIR"
[server]
native_listen = "127.0.0.1:0"
resp_listen = "127.0.0.1:0"
http_listen = "127.0.0.1:0"
unix_socket = "kvtierd.sock"
[memory]
capacity = "${BYTES_MIB}MiB"
warm_restart = false   # a benchmark has no next run to hand G2 to
prefault = true
[disk]
dir = ""
TOML
"$KVTIERD" --config "$DIR/kvtierd.toml" --port-file "$DIR/ports" >"$DIR/kvtierd.log" 2>&1 &
PIDS+=($!)
wait_kvtierd "$!" "$DIR/ports" "$DIR/kvtierd.log"
KV_RESP=$(sed -n 's/^resp_port=//p' "$DIR/ports")
KV_NATIVE=$(sed -n 's/^native_port=//p' "$DIR/ports")
KV_SOCK=$(sed -n 's/^unix_socket=//p' "$DIR/ports")
KV_HTTP=$(sed -n 's/^http_port=//p' "$DIR/ports")
empty_kvtierd() {  # [HTTP_PORT]
  curl -sf -X DELETE "http://127.0.0.1:${1:-$KV_HTTP}/admin/tenants/default" >/dev/null
}

# The one-loop pair: the client on the first CPU this script may use, the servers on the second.
mapfile -t CPUS < <(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)), sep="\n")')
ALL_CPUS=$(IFS=,; echo "${CPUS[*]}")
PINNED=()
if [ "${#CPUS[@]}" -ge 2 ]; then
  CLIENT_CPU=${CPUS[0]}
  SERVER_CPU=${CPUS[1]}
  mkdir -p "$DIR/one-loop"
  # Emptied before each run as the other kvtierd: room for one run's chunks, twice over.
  ONE_MIB=$(( CHUNK_KB * KEYS * IN_FLIGHT * (ROUNDS + 1) * 2 / 1024 + 256 ))
  sed -e "s#^data_dir = .*#data_dir = \"$DIR/one-loop\"#" -e 's#^\[server\]$#[server]\nthreads = 1#' \
    -e "s#^capacity = .*#capacity = \"${ONE_MIB}MiB\"#" "$DIR/kvtierd.toml" >"$DIR/one-loop.toml"
  taskset -c "$SERVER_CPU" "$KVTIERD" --config "$DIR/one-loop.toml" \
    --port-file "$DIR/one-loop.ports" >"$DIR/one-loop.log" 2>&1 &
  PIDS+=($!)
  wait_kvtierd "$!" "$DIR/one-loop.ports" "$DIR/one-loop.log"
  ONE_RESP=$(sed -n 's/^resp_port=//p' "$DIR/one-loop.ports")
  ONE_HTTP=$(sed -n 's/^http_port=//p' "$DIR/one-loop.ports")
  PINNED=(redis-server/resp-one-cpu kvtierd/resp-one-loop-one-cpu)
fi

resp_adapter() {  # PORT: LMCache's resp adapter on a server's RESP port
  echo "{\"type\":\"resp\",\"host\":\"127.0.0.1\",\"port\":$1,\"num_workers\":$IN_FLIGHT}"
}
declare -A ADAPTER=(
  [redis-server/resp]=$(resp_adapter "$REDIS_PORT")
  [kvtierd/resp]=$(resp_adapter "$KV_RESP")
  [redis-server/resp-one-cpu]=$(resp_adapter "$REDIS_PORT")
  [kvtierd/resp-one-loop-one-cpu]=$(resp_adapter "${ONE_RESP:-0}")
  [kvtierd/native_plugin-shm]="{\"type\":\"native_plugin\",\"module_path\":\"kvtier.lmcache\",\"class_name\":\"NativeConnector\",\"adapter_params\":{\"url\":\"unix://$KV_SOCK\",\"num_workers\":$IN_FLIGHT}}"
  [kvtierd/native_plugin-tcp]="{\"type\":\"native_plugin\",\"module_path\":\"kvtier.lmcache\",\"class_name\":\"NativeConnector\",\"adapter_params\":{\"url\":\"tcp://127.0.0.1:$KV_NATIVE\",\"num_workers\":$IN_FLIGHT}}"
)
ORDER=(redis-server/resp kvtierd/resp kvtierd/native_plugin-shm kvtierd/native_plugin-tcp)

echo "lmcache bench l2: chunks of $CHUNK_KB KiB, $KEYS keys per batch, $IN_FLIGHT batches in flight, $ROUNDS rounds, $REPEAT repeats"
bench_run() {  # ADAPTER_JSON OUTPUT [CPU: the client's]
  ${3:+taskset -c "$3"} "$LMCACHE" bench l2 --l2-adapter "$1" --num-keys "$KEYS" --in-flight "$IN_FLIGHT" \
    --data-size-kb "$CHUNK_KB" --rounds "$ROUNDS" --warmup-rounds 1 --no-skip-verify \
    --format json --output "$2" >"$2.log" 2>&1 || { tail -20 "$2.log"; exit 1; }
}
# The link every TCP line shares: loopback TCP with one stream and with as many as LMCache's
# workers, whichever is faster.
LINK_GIBPS=$(iperf3_gibps 1)
LINK_GIBPS=$(python3 -c 'import sys; print(max(map(float, sys.argv[1:])))' "$LINK_GIBPS" "$(iperf3_gibps "$IN_FLIGHT")")
echo "loopback TCP (iperf3, 1 or $IN_FLIGHT streams, the faster): $(printf %.2f "$LINK_GIBPS") GiB/s"
bench_run "${ADAPTER[redis-server/resp]}" "$DIR/redis-warmup.json"
for r in $(seq 1 "$REPEAT"); do
  for name in "${ORDER[@]}" "${PINNED[@]}"; do
    client_cpu=
    case $name in
      redis-server/resp) ;;
      redis-server/resp-one-cpu)
        client_cpu=$CLIENT_CPU
        taskset -a -p -c "$SERVER_CPU" "$REDIS_PID" >/dev/null ;;
      kvtierd/resp-one-loop-one-cpu)
        client_cpu=$CLIENT_CPU
        empty_kvtierd "$ONE_HTTP" ;;
      *) empty_kvtierd ;;
    esac
    out="$DIR/$(echo "$name" | tr / _)-$r.json"
    bench_run "${ADAPTER[$name]}" "$out" "$client_cpu"
    [ "$name" != redis-server/resp-one-cpu ] || taskset -a -p -c "$ALL_CPUS" "$REDIS_PID" >/dev/null
    grep -q "data verified OK" "$out.log" || { echo "$name: LMCache's verification failed"; tail -20 "$out.log"; exit 1; }
  done
done

"$PY" - "$DIR" "$REPEAT" "$ROOT/bench" "$LINK_GIBPS" "$(nproc)" "${ORDER[@]}" "${PINNED[@]}" <<'PYEOF'
import json, statistics, sys
from pathlib import Path
d, repeat, cores, names = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[5]), sys.argv[6:]
link = float(sys.argv[4]) * 2**30 / 1e6  # MB/s, as LMCache reports
sys.path.insert(0, sys.argv[3])
from targets import target
def medians(name):
    store, load = [], []
    for r in range(1, repeat + 1):
        m = json.loads((d / f"{name.replace('/', '_')}-{r}.json").read_text())["metrics"]
        ops = {v["operation"]: v for v in m.values() if isinstance(v, dict) and "operation" in v}
        store.append(ops["Store"]["throughput_avg_mbps"])
        load.append(ops["Load"]["throughput_avg_mbps"])
    return statistics.median(store), statistics.median(load)
results = {n: medians(n) for n in names}
base_store, base_load = results[names[0]]
print(f"{'L2':30} {'store MB/s':>11} {'x redis':>8} {'load MB/s':>11} {'x redis':>8}")
for n in names:
    s, l = results[n]
    print(f"{n:30} {s:11.0f} {s / base_store:8.2f} {l:11.0f} {l / base_load:8.2f}")
print()
pair = results.get("kvtierd/resp-one-loop-one-cpu"), results.get("redis-server/resp-one-cpu")
for op, i, base in (("store", 0, base_store), ("load", 1, base_load)):
    # Where kvtierd with one loop, on a CPU of its own, is at or above redis-server on that CPU,
    # the default's shortfall is its loops' share of the cores the client needs.
    one_loop = pair[0][i] / pair[1][i] if pair[0] else 0
    loops = (f"kvtierd's event loops (one per core, {min(cores, 8)} here) share the {cores} cores "
             f"with LMCache's client; with one loop as redis-server, each server on a CPU the "
             f"client does not use (same run), kvtierd {op}s at {one_loop:.2f}x redis-server"
             if one_loop >= 1.0 else "")
    target(f"LMCache kvtierd RESP {op} / redis-server", results["kvtierd/resp"][i] / base, ">=",
           1.0, why_not=loops)
    tcp = results["kvtierd/native_plugin-tcp"][i]
    # Where 1.5x redis-server is faster than loopback TCP itself, no TCP client can reach it.
    over_link = (f"1.5x redis-server is {1.5 * base:.0f} MB/s, above loopback TCP's {link:.0f} "
                 f"(iperf3, same run); kvtierd's TCP {op} runs at {tcp / link:.2f}x of it"
                 if 1.5 * base > link else "")
    target(f"LMCache native_plugin TCP {op} / redis-server", tcp / base, ">=", 1.5,
           why_not=over_link)
PYEOF
