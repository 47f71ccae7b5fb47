#!/usr/bin/env bash
# G3 against the disk's own limit, in one run on one filesystem (DESIGN.md, "How it is
# measured"): fio with O_DIRECT sequential 2 MiB writes and reads at queue depth 16 through
# io_uring, and the DiskTier writing and reading 2 MiB blocks with the same depth. Rounds
# alternate fio and the tier, each first in every other round, so both see the same background
# load. The targets are the medians of the rounds' own ratios: this VM's disk swings by up to 2x
# from one minute to the next (a host's write cache, other guests), which moves both sides of a
# ratio measured seconds apart alike, and the medians of runs minutes apart not. Each round also
# runs the same bytes through a Store whose G2 holds an eighth of them (kvtier_disk_bench
# spill): G3 written by the Demoter as G2 evicts, and read back with promotion, the path of a
# node whose engines write more than its DRAM holds; its ratios to fio are printed.
# Then the data services: the tier's put/get throughput on bf16 KV blocks (real K and V of the
# reference model when ../shared/data holds it, else synthetic) with compression and
# encryption off, each alone and both on, in alternating rounds, the ratio both/off and the
# compression ratio; each put's busy cores (process CPU over wall time) too, and where 0.7x of
# the uncoded puts would need more cores than the machine has at the rate reached per core, the
# put target's line says so. Then: recovery time of a tier holding 1M small blocks, and index memory
# per block.
#
# usage: bench/disk_bench.sh BUILD_DIR [DIR] [SIZE_MiB]
#   BUILD_DIR a build with kvtier_disk_bench (build/release)
#   DIR       where the files go (default: BUILD_DIR/disk-bench); emptied, then removed
#   SIZE_MiB  bytes written and read per measurement (default 2048)
# environment: ROUNDS (6), RECOVERY_BLOCKS (1000000),
#   RECOVERY_VALUE_BYTES (1024), SERVICES_MiB (SIZE_MiB / 4, per run), KVTIER_MODEL_DIR
#   (default ../shared/data)
# needs: fio (Debian package fio), a build with kvtier_disk_bench.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:?usage: disk_bench.sh BUILD_DIR [DIR] [SIZE_MiB]}
BIN=$BUILD/kvtier_disk_bench
DIR=${2:-$BUILD/disk-bench}
SIZE_MIB=${3:-2048}
source "$ROOT/bench/target.sh"
ROUNDS=${ROUNDS:-6}
RECOVERY_BLOCKS=${RECOVERY_BLOCKS:-1000000}
RECOVERY_VALUE_BYTES=${RECOVERY_VALUE_BYTES:-1024}
SERVICES_MIB=${SERVICES_MiB:-$((SIZE_MIB / 4))}
MODEL_DIR=${KVTIER_MODEL_DIR:-$ROOT/../shared/data}
DEPTH=16
BLOCK=$((2 * 1024 * 1024))

command -v fio >/dev/null || { echo "fio not found (apt-get install fio)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "$BIN not found: build the kvtier_disk_bench target" >&2; exit 1; }
rm -rf "$DIR"
mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT

# fio's terse output (version 3): field 7 is read bandwidth, field 48 write bandwidth, in KiB/s.
fio_mbps() {  # rw field
  fio --name=kvtier-g3 --rw="$1" --bs=2M --direct=1 --ioengine=io_uring --iodepth=$DEPTH \
      --size="${SIZE_MIB}M" --filename="$DIR/fio.dat" --output-format=terse |
    awk -F';' -v f="$2" '{ printf "%.1f", $f * 1024 / 1e6 }'
}

median() {  # VALUE...
  printf '%s\n' "$@" | sort -g |
    awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo "filesystem: $(df -T "$DIR" | awk 'NR == 2 { print $1, $2 }'), ${SIZE_MIB} MiB per measurement, 2 MiB blocks, depth $DEPTH"
write_ratios=(); read_ratios=(); spill_write_ratios=(); spill_read_ratios=()
run_fio() {
  fw=$(fio_mbps write 48)
  fr=$(fio_mbps read 7)
  rm -f "$DIR/fio.dat"
}
run_tier() {
  local out
  out=$("$BIN" throughput "$DIR/tier" $BLOCK $((SIZE_MIB * 1024 * 1024)) $DEPTH)
  tw=$(echo "$out" | awk '/^write_MBps/ { print $2 }')
  tr=$(echo "$out" | awk '/^read_MBps/ { print $2 }')
  rm -rf "$DIR/tier"
}
run_spill() {
  local out
  # Its stderr says each time that G2 is on 4 KiB pages here: shown only if it fails.
  out=$("$BIN" spill "$DIR/spill" $BLOCK $((SIZE_MIB * 1024 * 1024)) $DEPTH 2>"$DIR/spill.err") ||
    { cat "$DIR/spill.err" >&2; exit 1; }
  sw=$(echo "$out" | awk '/^spill_write_MBps/ { print $2 }')
  sr=$(echo "$out" | awk '/^spill_read_MBps/ { print $2 }')
  rm -rf "$DIR/spill"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
for round in $(seq 1 "$ROUNDS"); do
  # fio goes first in every other round: a disk faster after a pause (a host's write cache or
  # burst credits) would otherwise favour whichever always runs first.
  if ((round % 2)); then run_fio; run_tier; run_spill; else run_spill; run_tier; run_fio; fi
  write_ratios+=("$(ratio "$tw" "$fw")"); read_ratios+=("$(ratio "$tr" "$fr")")
  spill_write_ratios+=("$(ratio "$sw" "$fw")"); spill_read_ratios+=("$(ratio "$sr" "$fr")")
  echo "round $round: fio write $fw MB/s, read $fr MB/s; DiskTier write $tw MB/s, read $tr MB/s;" \
    "through the Store write $sw MB/s, read $sr MB/s"
done
write_ratio=$(median "${write_ratios[@]}")
read_ratio=$(median "${read_ratios[@]}")
echo "medians of the rounds' ratios: DiskTier / fio write $write_ratio, read $read_ratio;" \
  "through the Store (G2 full: G3 fed by the Demoter) / fio write" \
  "$(median "${spill_write_ratios[@]}"), read $(median "${spill_read_ratios[@]}")"
target "G3 write / fio" "$write_ratio" ">=" 0.85
target "G3 read / fio" "$read_ratio" ">=" 0.85

echo "data services (compression + AES-256-GCM) on bf16 KV, ${SERVICES_MIB} MiB per run"
"$BIN" services "$DIR/services" $BLOCK $((SERVICES_MIB * 1024 * 1024)) $DEPTH "$ROUNDS" \
  "$MODEL_DIR" | sed 's/^/  /'
rm -rf "$DIR/services"

echo "recovery: $RECOVERY_BLOCKS blocks of $RECOVERY_VALUE_BYTES bytes"
"$BIN" recovery "$DIR/recovery" "$RECOVERY_BLOCKS" "$RECOVERY_VALUE_BYTES" | sed 's/^/  /'
