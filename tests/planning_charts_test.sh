#!/bin/sh
# Renders the planning charts (crossover, cost, hit rate vs capacity, a fleet's G4 traffic,
# sizing page) in headless Chromium and checks that each screenshot shows a drawn chart, not a
# blank page.
# Usage: planning_charts_test.sh path/to/kvtier
# Exits 77 (skipped) when Chromium is not installed.
set -eu
KVTIER=$1
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
  echo "skipped: chromium not installed"
  exit 77
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$KVTIER" crossover --model llama-3.1-70b --gpu h100 --link nvme-gen4 --tp 8 --svg "$WORK/crossover.svg" >/dev/null
"$KVTIER" cost --model deepseek-v3 --gpu h200 --link 400gbe --tp 8 --svg "$WORK/cost.svg" >/dev/null
"$KVTIER" trace gen --workload chat --sessions 200 --seed 3 --out "$WORK/chat.jsonl" 2>/dev/null
"$KVTIER" replay "$WORK/chat.jsonl" --model llama-3.1-8b --capacity 16GiB --html "$WORK/replay.html" >/dev/null
"$KVTIER" replay "$WORK/chat.jsonl" --model llama-3.1-8b --capacity 2GiB --nodes 4 --g4 on_put \
  --html "$WORK/fleet.html" >/dev/null
"$KVTIER" size --format html --out "$WORK/size.html"

status=0
for page in crossover.svg cost.svg replay.html fleet.html size.html; do
  png="$WORK/${page%.*}.png"
  "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$(mktemp -d -p "$WORK")" --screenshot="$png" --window-size=1000,700 \
    "file://$WORK/$page" >/dev/null 2>&1 || true
  if ! python3 "$(dirname "$0")/planning_png_check.py" "$png"; then
    echo "FAIL: $page rendered blank or not at all"
    status=1
  fi
done
exit $status
