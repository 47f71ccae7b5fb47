#!/usr/bin/env bash
# Every benchmark, one after the other, and at the end one line per target with its measured
# ratio and whether it is met: what a change that slowed a path would have shown. Each
# benchmark measures against its limit or its peer in the same run (memcpy, iperf3, fio, curl,
# redis-server), so the lines compare across machines; run it on an otherwise idle machine.
#
# Usage: bench/all.sh BUILD_DIR [NAME...]
#   BUILD_DIR  a release build with the benchmark programs (build/release; scripts/test makes it)
#   NAME       only these benchmarks (shm python peer daemon lmcache disk g4 restart ttft s3 soak
#              fleet)
# environment: KVTIER_BENCH_OUT (where each benchmark's output is kept; default a new
#   directory under /tmp, printed at the end); each benchmark's own variables pass through.
# Exits 1 when a target is not met or could not be measured, else 0. Every benchmark script
# takes BUILD_DIR as its first argument and prints its targets as bench/target.sh does.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:?usage: bench/all.sh BUILD_DIR [NAME...]}" && pwd)
shift
PY=$ROOT/build/venv/bin/python
OUT=${KVTIER_BENCH_OUT:-$(mktemp -d /tmp/kvtier-bench.XXXXXX)}
mkdir -p "$OUT"
source "$ROOT/bench/target.sh"

# name, then the command (run from the repository's root).
BENCHES=(
  "shm|bench/shm_bench.sh $BUILD"
  "python|$PY bench/python_bench.py $BUILD"
  "peer|$PY bench/peer_bench.py $BUILD"
  "daemon|bench/daemon_bench.sh $BUILD"
  "lmcache|bench/lmcache_bench.sh $BUILD"
  "disk|bench/disk_bench.sh $BUILD"
  "g4|bench/g4_bench.sh $BUILD"
  "restart|$PY bench/restart_bench.py $BUILD"
  "ttft|$PY bench/ttft_bench.py $BUILD"
  "s3|$PY bench/s3_bench.py $BUILD"
  "soak|$PY bench/soak.py $BUILD --seconds 60"
  "fleet|$PY bench/fleet_bench.py $BUILD"
)

cd "$ROOT" || exit 1
for entry in "${BENCHES[@]}"; do
  name=${entry%%|*}
  cmd=${entry#*|}
  if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
  echo "== $name: $cmd"
  start=$(date +%s)
  # shellcheck disable=SC2086  # the command is split on purpose
  $cmd >"$OUT/$name.log" 2>&1
  rc=$?
  grep -E '^ *TARGET ' "$OUT/$name.log" | sed 's/^ *//'
  if [ "$rc" -ne 0 ]; then
    not_measured "$name" "the benchmark exited $rc (last lines of $OUT/$name.log below)" |
      tee -a "$OUT/$name.log"
    tail -5 "$OUT/$name.log" | sed 's/^/   | /'
  elif ! grep -qE '^ *TARGET ' "$OUT/$name.log"; then
    not_measured "$name" "the benchmark printed no target ($OUT/$name.log)" |
      tee -a "$OUT/$name.log"
  fi
  echo "   ($(($(date +%s) - start)) s)"
done

echo
echo "== targets (outputs in $OUT)"
lines=$(cat "$OUT"/*.log 2>/dev/null | grep -E '^ *TARGET ' | sed 's/^ *TARGET //')
echo "$lines"
met=$(grep -c ') met$' <<<"$lines")
missed=$(grep -c ') NOT MET' <<<"$lines")
# A line that says why this machine cannot reach its target: "... NOT MET: <why>".
explained=$(grep -c ') NOT MET: ' <<<"$lines")
unmeasured=$(grep -c ': not measured: ' <<<"$lines")
echo "met: $met; not met: $missed ($explained with the reason this machine cannot reach it);" \
  "not measured: $unmeasured"
[ "$missed" -eq 0 ] && [ "$unmeasured" -eq 0 ]
