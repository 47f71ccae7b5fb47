#!/usr/bin/env bash
# The shared-memory fast path against single-core memcpy, in one run, 2 MiB values: starts a
# kvtierd with only its Unix socket (G3 off, G2 warm: the bench fills it first) and runs kvtier_shm_bench, which
# prints SHM PUT/GET throughput and p50/p99 next to memcpy, and the ratios (target: GET, copied
# out of the mapping, >= 0.9x memcpy).
# Usage: bench/shm_bench.sh BUILD_DIR [ops] [rounds]   (environment: VALUE, BUSY_POLL_US)
set -euo pipefail

BUILD=${1:?usage: shm_bench.sh BUILD_DIR [ops] [rounds]}
OPS=${2:-200}
# 15 passes: each read phase then lasts about 0.4 s. At 3 (75 ms a phase) a scheduling hiccup on
# a shared VM moved the medians of 7 repeats between 0.66x and 1.15x of memcpy from one run to
# the next, on the same build; at 15 they stay within 0.67x-0.75x.
ROUNDS=${3:-15}
VALUE=${VALUE:-2097152}
BUSY_POLL_US=${BUSY_POLL_US:-200}  # [server] busy_poll_us of the kvtierd it starts
KVTIERD=$BUILD/src/server/kvtierd
BENCH=$BUILD/src/server/kvtier_shm_bench

# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

cat >"$DIR/kvtierd.toml" <<EOT
data_dir = "$DIR"
[server]
native_listen = ""
resp_listen = ""
http_listen = ""
unix_socket = "kvtierd.sock"
busy_poll_us = $BUSY_POLL_US   # one client thread leaves a core: the loop polls through a 2 MiB copy
[memory]
capacity = "$(( OPS * VALUE / 1048576 + 64 ))MiB"
warm_restart = false   # a benchmark has no next run to hand G2 to
prefault = true   # blocks take and map their pages when allocated, not at the first write
[disk]
dir = ""
[store]
max_block_bytes = "4MiB"
EOT
"$KVTIERD" --config "$DIR/kvtierd.toml" --port-file "$DIR/ports" 2>"$DIR/kvtierd.log" &
PIDS+=($!)
wait_kvtierd "$!" "$DIR/ports" "$DIR/kvtierd.log"
SOCKET=$(sed -n 's/^unix_socket=//p' "$DIR/ports")
echo "kvtierd $(nproc) cores, $(uname -r), server.busy_poll_us = $BUSY_POLL_US; $((VALUE >> 10)) KiB values, $OPS blocks, $ROUNDS GET passes, 1 client thread"
# kvtierd says at start when G2 sits on 4 KiB pages, and why: the reason a missed target gives.
SMALL_PAGES=$(sed -n 's/^.*G2 is on 4 KiB pages[^:]*: \(.*\), or put memory.arena_file.*$/\1/p' \
  "$DIR/kvtierd.log")
${PERF:-} "$BENCH" --socket "$SOCKET" --ops "$OPS" --rounds "$ROUNDS" --value-bytes "$VALUE" \
  --g2-small-pages "$SMALL_PAGES"
