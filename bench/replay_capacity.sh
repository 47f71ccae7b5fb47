#!/usr/bin/env bash
# What `kvtier replay` costs as its configured G2 capacity grows from 64 GiB to 1 PiB on the same
# trace: wall time (best of 5) and peak resident memory, beside what the Store did (evictions).
# Past the trace's footprint nothing more is stored, so nothing more may be spent.
# Usage: bench/replay_capacity.sh BUILD_DIR TRACE... (a Mooncake trace, or `kvtier trace gen`'s)
set -euo pipefail
BUILD=${1:?usage: replay_capacity.sh BUILD_DIR TRACE...}
shift
KVTIER=$BUILD/tools/kvtier
OUT=$(mktemp)
trap 'rm -f "$OUT" "$OUT.time"' EXIT
for trace in "$@"; do
  echo "=== $(basename "$trace")"
  printf '%-9s %9s %12s %12s %10s\n' capacity "wall s" "peak RSS" "evictions" "hit ratio"
  for capacity in 64GiB 1TiB 8TiB 30TiB 256TiB 1PiB; do
    best=""
    for _ in 1 2 3 4 5; do
      /usr/bin/time -f '%e %M' -o "$OUT.time" "$KVTIER" replay "$trace" --capacity "$capacity" --json >"$OUT"
      read -r wall rss_kib <"$OUT.time"
      best=$(python3 -c "print(min(float('$wall'), float('${best:-1e9}')))")
    done
    python3 - "$OUT" "$capacity" "$best" "$rss_kib" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<9} {float(sys.argv[3]):9.2f} {int(sys.argv[4]) / 1024:9.0f} MiB "
      f"{report['evictions']:>12} "
      f"{100 * report['block_hit_rate']:9.1f}%")
PY
  done
done
