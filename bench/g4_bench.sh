#!/usr/bin/env bash
# G4 against its storage's own limits, in one run on one machine (DESIGN.md, "How it is
# measured"):
#   1. shared file system: fio writing and reading 2 MiB files (one file per block, fsync on
#      close, like a publish) against SharedFsTier putting and getting 2 MiB blocks in the
#      same directory tree, both one stream at a time; reads start cold for both (fio's
#      invalidate, the driver's POSIX_FADV_DONTNEED); target >= 0.8x;
#   2. S3: curl (with its own SigV4 signing, UNSIGNED-PAYLOAD) PUTting and GETting 2 MiB
#      objects against a local s3rver, PARALLEL transfers at once, against S3Tier with the
#      same parallelism and payload signing (batches of BATCH blocks, PARALLEL in flight);
#      target >= 0.9x.
# Each round runs the baseline and the tier back to back (alternating which goes first), so
# both see the same background load; the ratio printed is the median of the rounds' ratios
# (with each side's median MB/s beside it), which this VM's drifting speed moves far less
# than a ratio of medians taken minutes apart. With PIN=1 (needs taskset and 2+ CPUs) s3rver runs
# on CPU 0 and both clients on the others, as a service on its own machine would: a client
# that verifies what it reads (the tier) then cannot take CPU from the server, as it can
# unpinned, while curl writes to /dev/null. s3rver also loses its other threads' CPUs.
#
# usage: bench/g4_bench.sh BUILD_DIR [DIR] [BLOCKS]
#   BUILD_DIR a build with kvtier_g4_bench (build/release)
#   DIR     the "shared" directory (default: BUILD_DIR/g4-bench); emptied, then removed
#   BLOCKS  2 MiB blocks per measurement (default 128)
# environment: ROUNDS (3), PARALLEL (4), BATCH (32: blocks
#   per S3Tier call, as one engine request's misses), PARTS ("fs s3": which parts run), CHECK_BEFORE_PUT
#   (0; 1 = the tier HEADs each block before its PUT, as s3_check_before_put = true), PIN (0;
#   see above),
#   KVTIER_S3RVER (default build/npm/node_modules/.bin/s3rver; S3 part skipped without it)
# needs: fio, curl, python3 (Debian), a build with kvtier_g4_bench.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:?usage: g4_bench.sh BUILD_DIR [DIR] [BLOCKS]}
BIN=$BUILD/kvtier_g4_bench
DIR=${2:-$BUILD/g4-bench}
BLOCKS=${3:-128}
source "$ROOT/bench/target.sh"
ROUNDS=${ROUNDS:-3}
PARALLEL=${PARALLEL:-4}
BATCH=${BATCH:-32}
PIN=${PIN:-0}
PARTS=${PARTS:-fs s3}
if ! command -v taskset >/dev/null || [ "$(nproc)" -lt 2 ]; then PIN=0; fi
SERVER_CPU=(); CLIENT_CPU=()
if [ "$PIN" = 1 ]; then SERVER_CPU=(taskset -c 0); CLIENT_CPU=(taskset -c "1-$(($(nproc) - 1))"); fi
CHECK_BEFORE_PUT=${CHECK_BEFORE_PUT:-0}
S3RVER=${KVTIER_S3RVER:-$ROOT/build/npm/node_modules/.bin/s3rver}
[ -x "$BIN" ] || { echo "missing $BIN: build the kvtier_g4_bench target" >&2; exit 1; }

rm -rf "$DIR"
mkdir -p "$DIR"
S3PID=""
cleanup() {
  # s3rver dies of the SIGTERM: its status (143) is not the benchmark's (set -e would take it).
  if [ -n "$S3PID" ]; then kill "$S3PID" 2>/dev/null || true; wait "$S3PID" 2>/dev/null || true; fi
  rm -rf "$DIR"
}
trap cleanup EXIT

# summary OP TIER_VALUES BASE_VALUES (space-separated, one per round): the median of the rounds'
# tier/baseline ratios, then each side's median.
summary() {
  python3 -c 'import sys, statistics as st
t = [float(x) for x in sys.argv[2].split()]; b = [float(x) for x in sys.argv[3].split()]
print("%s %.2fx (%.1f vs %.1f MB/s)" % (sys.argv[1], st.median(x / y for x, y in zip(t, b)), st.median(t), st.median(b)))' "$@"
}
# median_ratio TIER_VALUES BASE_VALUES: the median of the rounds' ratios alone.
median_ratio() {
  python3 -c 'import sys, statistics as st
t = [float(x) for x in sys.argv[1].split()]; b = [float(x) for x in sys.argv[2].split()]
print(st.median(x / y for x, y in zip(t, b)))' "$@"
}
now() { date +%s.%N; }
mbps() { python3 -c 'import sys; print("%.1f" % (float(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2]))))' "$1" "$2" "$3"; }
TOTAL_MB=$(python3 -c "print($BLOCKS * 2 * 1048576 / 1e6)")

# fio bandwidth (MB/s) of one job from its JSON output.
fio_mbps() {
  python3 -c 'import json, sys; j = json.load(sys.stdin)["jobs"][0]; rw = sys.argv[1]; print("%.1f" % (j[rw]["bw_bytes"] / 1e6))' "$1"
}

if [[ " $PARTS " == *" fs "* ]]; then
echo "== G4 shared file system: $BLOCKS x 2 MiB in $DIR, $ROUNDS rounds"
raw_w=(); raw_r=(); tier_w=(); tier_r=()
for round in $(seq "$ROUNDS"); do
  rm -rf "$DIR/raw" "$DIR/tier"; mkdir -p "$DIR/raw" "$DIR/tier"
  common=(--name=raw --directory="$DIR/raw" --bs=2M --filesize=2M --nrfiles="$BLOCKS"
          --size=$((2 * BLOCKS))M --openfiles=1 --file_service_type=sequential --ioengine=psync
          --fallocate=none
          --output-format=json)
  raw_w+=("$(fio "${common[@]}" --rw=write --fsync_on_close=1 | fio_mbps write)")
  raw_r+=("$(fio "${common[@]}" --rw=read | fio_mbps read)")
  out=$("$BIN" fs --root "$DIR/tier" --blocks "$BLOCKS" --block-mib 2 --batch 1 --threads 0 --drop-cache 1)
  tier_w+=("$(echo "$out" | sed -n 's/.*put_MBps=\([0-9.]*\).*/\1/p')")
  tier_r+=("$(echo "$out" | sed -n 's/.*get_MBps=\([0-9.]*\).*/\1/p')")
  echo "round $round: fio write ${raw_w[-1]} read ${raw_r[-1]} MB/s | SharedFsTier put ${tier_w[-1]} get ${tier_r[-1]} MB/s"
done
echo "SharedFsTier/fio: $(summary put "${tier_w[*]}" "${raw_w[*]}"), $(summary get "${tier_r[*]}" "${raw_r[*]}")"
target "G4 shared FS put / fio" "$(median_ratio "${tier_w[*]}" "${raw_w[*]}")" ">=" 0.8
target "G4 shared FS get / fio" "$(median_ratio "${tier_r[*]}" "${raw_r[*]}")" ">=" 0.8
fi
[[ " $PARTS " == *" s3 "* ]] || exit 0

if [ ! -x "$S3RVER" ]; then
  echo "== S3: skipped (s3rver not found at $S3RVER; run scripts/deps.sh)"
  not_measured "G4 S3 put and get / curl" "s3rver not found at $S3RVER"
  exit 0
fi
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$DIR/s3rver"
"${SERVER_CPU[@]}" "$S3RVER" -d "$DIR/s3rver" -a 127.0.0.1 -p "$PORT" --silent --configure-bucket bench >/dev/null 2>&1 &
S3PID=$!
for _ in $(seq 200); do
  curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break
  sleep 0.1
done
EP="http://127.0.0.1:$PORT"
head -c $((2 * 1048576)) /dev/urandom > "$DIR/block.bin"
# curl 7.88 signs with SigV4 but does not hash the body: UNSIGNED-PAYLOAD, and so does the tier.
SIGN=(--aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
echo "== G4 S3 (s3rver on $EP): $BLOCKS x 2 MiB, $PARALLEL in parallel, $ROUNDS rounds, check_before_put=$CHECK_BEFORE_PUT, pinned=$PIN"
raw_w=(); raw_r=(); tier_w=(); tier_r=()
for round in $(seq "$ROUNDS"); do
  put_cfg="$DIR/put.cfg"; get_cfg="$DIR/get.cfg"; : > "$put_cfg"; : > "$get_cfg"
  # Keys shaped like the tier's (kvtier-g4/v1/objects/<tenant>/<kk>/<64 hex>): s3rver's cost
  # depends on the key's depth and length.
  for i in $(seq "$BLOCKS"); do
    hex=$(printf 'raw%d-%d' "$round" "$i" | sha256sum | cut -c1-64)
    key="kvtier-g4/v1/objects/raw/${hex:0:2}/$hex"
    printf 'url = "%s/bench/%s"\nupload-file = "%s"\noutput = "/dev/null"\n' "$EP" "$key" "$DIR/block.bin" >> "$put_cfg"
    printf 'url = "%s/bench/%s"\noutput = "/dev/null"\n' "$EP" "$key" >> "$get_cfg"
  done
  run_curl() {
    t0=$(now); "${CLIENT_CPU[@]}" curl -sf --no-progress-meter --parallel --parallel-max "$PARALLEL" "${SIGN[@]}" -K "$put_cfg"; t1=$(now)
    "${CLIENT_CPU[@]}" curl -sf --no-progress-meter --parallel --parallel-max "$PARALLEL" \
      "${SIGN[@]}" -K "$get_cfg"; t2=$(now)
    raw_w+=("$(mbps "$TOTAL_MB" "$t0" "$t1")"); raw_r+=("$(mbps "$TOTAL_MB" "$t1" "$t2")")
  }
  run_tier() {
    out=$(AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER "${CLIENT_CPU[@]}" "$BIN" s3 --endpoint "$EP" \
          --bucket bench --blocks "$BLOCKS" --block-mib 2 --batch "$BATCH" --parallel "$PARALLEL" --unsigned-payload 1 \
          --check-before-put "$CHECK_BEFORE_PUT")
    tier_w+=("$(echo "$out" | sed -n 's/.*put_MBps=\([0-9.]*\).*/\1/p')")
    tier_r+=("$(echo "$out" | sed -n 's/.*get_MBps=\([0-9.]*\).*/\1/p')")
  }
  # Alternate which goes first: s3rver is slower just after a burst of writes.
  if [ $((round % 2)) = 1 ]; then run_curl; run_tier; else run_tier; run_curl; fi
  echo "round $round: curl put ${raw_w[-1]} get ${raw_r[-1]} MB/s | S3Tier put ${tier_w[-1]} get ${tier_r[-1]} MB/s"
  # Next round starts from an empty bucket (the tier skips blocks that exist).
  curl -sf "${SIGN[@]}" "$EP/bench?list-type=2&max-keys=100000" | python3 -c '
import re, sys
for k in re.findall(r"<Key>([^<]+)</Key>", sys.stdin.read()): print(k)' | while read -r key; do
    echo "url = \"$EP/bench/$key\""; echo 'request = "DELETE"'; echo 'output = "/dev/null"'
  done > "$DIR/del.cfg"
  [ -s "$DIR/del.cfg" ] && curl -s --no-progress-meter --parallel --parallel-max 16 "${SIGN[@]}" -K "$DIR/del.cfg" || true
done
echo "S3Tier/curl: $(summary put "${tier_w[*]}" "${raw_w[*]}"), $(summary get "${tier_r[*]}" "${raw_r[*]}")"
target "G4 S3 put / curl" "$(median_ratio "${tier_w[*]}" "${raw_w[*]}")" ">=" 0.9
target "G4 S3 get / curl" "$(median_ratio "${tier_r[*]}" "${raw_r[*]}")" ">=" 0.9
