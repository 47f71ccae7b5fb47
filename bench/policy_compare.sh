#!/usr/bin/env bash
# G2 eviction against LRU, ARC, Belady's OPT (with and without bypass) and an infinite cache,
# with `kvtier replay --compare`, on Mooncake's two public FAST'25 traces and a generated
# agentic trace (`kvtier trace gen --workload agentic --seed 1`), at 1/64 .. 1x of each
# trace's footprint, then on the conversation trace at the three capacities of issue 15; then
# the conversation trace with G3 (4x G2, admission on and off) and G4.
# Usage: bench/policy_compare.sh BUILD_DIR MOONCAKE_TRACES_DIR
# MOONCAKE_TRACES_DIR holds conversation_trace.jsonl and synthetic_trace.jsonl from
# github.com/kvcache-ai/Mooncake, FAST25-release/traces/. Llama 3.1 70B, BF16 KV, 512-token
# blocks (160 MiB each), one H100 at MFU 0.5 for the FLOP and GPU-hour columns.
set -euo pipefail

BUILD=${1:?usage: policy_compare.sh BUILD_DIR MOONCAKE_TRACES_DIR}
TRACES=${2:?usage: policy_compare.sh BUILD_DIR MOONCAKE_TRACES_DIR}
KVTIER=$BUILD/tools/kvtier
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$KVTIER" trace gen --workload agentic --seed 1 --out "$WORK/agentic.jsonl" 2>/dev/null
for trace in "$TRACES/conversation_trace.jsonl" "$TRACES/synthetic_trace.jsonl" "$WORK/agentic.jsonl"; do
  echo "=== $(basename "$trace")"
  "$KVTIER" replay "$trace" --compare | sed -n '/by G2 capacity/,$p'
  echo
done
echo "=== conversation_trace.jsonl at issue 15's capacities"
"$KVTIER" replay "$TRACES/conversation_trace.jsonl" --compare \
  --capacities 915.53GiB,2.98TiB,14.90TiB | sed -n '/by G2 capacity/,$p'
for accesses in 2 1; do
  echo
  echo "=== conversation_trace.jsonl, G2 2.98 TiB, G3 11.92 TiB (G3 admission: $accesses access(es)), G4 on demotion"
  "$KVTIER" replay "$TRACES/conversation_trace.jsonl" --capacity 2.98TiB --g3-capacity 11.92TiB \
    --g3-min-accesses "$accesses" --g4 on_demotion | sed -n '/^tier/,/^G3 writes/p'
done
