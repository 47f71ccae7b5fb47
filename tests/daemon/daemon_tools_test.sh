#!/usr/bin/env bash
# kvtierd against the real tools people point at it: redis-cli and redis-benchmark on the RESP
# port, curl on the HTTP port, promtool on /metrics. Usage: daemon_tools_test.sh path/to/kvtierd
# Exits 77 (ctest: skipped) when a tool is missing. Debian: redis-tools, curl, prometheus.
set -euo pipefail
# shellcheck source=tests/kvtierd_start.sh
source "$(dirname "$0")/../kvtierd_start.sh"

KVTIERD=$1
for tool in redis-cli redis-benchmark curl promtool sha256sum; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (Debian: redis-tools, curl, prometheus)"
    exit 77
  fi
done

DIR=$(mktemp -d)
PID=""
cleanup() {
  if [ -n "$PID" ]; then kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$DIR"
  # G2 stays in its files on /dev/shm for a warm restart (the arena file and its .* beside it:
  # the tenants' regions, the index, the lock): this daemon has none coming.
  if [ -n "${g2_arena_file:-}" ]; then rm -f "$g2_arena_file" "$g2_arena_file".*; fi
}
trap cleanup EXIT

cat >"$DIR/kvtierd.toml" <<EOF
data_dir = "$DIR"
[server]
native_listen = "127.0.0.1:0"
resp_listen = "127.0.0.1:0"
http_listen = "127.0.0.1:0"
[memory]
capacity = "256MiB"
EOF
start_kvtierd "$KVTIERD" "$DIR/kvtierd.toml" "$DIR"

fail() { echo "FAIL: $*"; cat "$DIR/log"; exit 1; }

# redis-cli: set/get/exists/del, as LMCache's redis connector uses them.
[ "$(redis-cli -p "$resp_port" set k1kv_bytes hello)" = "OK" ] || fail "redis-cli set"
[ "$(redis-cli -p "$resp_port" get k1kv_bytes)" = "hello" ] || fail "redis-cli get"
[ "$(redis-cli -p "$resp_port" exists k1kv_bytes k1metadata)" = "1" ] || fail "redis-cli exists"
[ "$(redis-cli -p "$resp_port" ping)" = "PONG" ] || fail "redis-cli ping"
head -c 2097152 /dev/urandom >"$DIR/blob"
redis-cli -p "$resp_port" -x set blob <"$DIR/blob" >/dev/null || fail "redis-cli -x set"
redis-cli -p "$resp_port" --no-raw get blob >/dev/null || fail "redis-cli get blob"
echo "redis-cli: ok"

# The admin API finds the same block by the documented key mapping.
hex=$(printf %s "kvtier/resp/v1k1kv_bytes" | sha256sum | cut -c1-64)
curl -fsS -X DELETE "http://127.0.0.1:$http_port/admin/blocks/$hex?tenant=default" | grep -q '"deleted":true' \
  || fail "admin delete of a RESP key"
[ -z "$(redis-cli -p "$resp_port" get k1kv_bytes)" ] || fail "key still there after admin delete"
curl -fsS "http://127.0.0.1:$http_port/admin/tenants" | grep -q '"name":"default"' || fail "/admin/tenants"
[ "$(curl -fsS "http://127.0.0.1:$http_port/healthz")" = "ok" ] || fail "/healthz"
echo "admin API: ok"

# redis-py (Debian python3-redis), the client LMCache's redis:// remote backend is built on, used
# the way LMCache's connector does: <key>kv_bytes and <key>metadata with SET/GET/EXISTS/DEL.
if /usr/bin/python3 -c "import redis" 2>/dev/null; then
  /usr/bin/python3 - "$resp_port" <<'PY' || fail "redis-py as LMCache uses it"
import os, sys, redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
key = "lmcache@model@0@0@abcdef"
kv = os.urandom(2 * 1024 * 1024)
meta = b"\x01" * 28
assert r.exists(key + "metadata") == 0
r.set(key + "kv_bytes", kv)
r.set(key + "metadata", meta)
assert r.exists(key + "metadata") == 1
assert r.get(key + "metadata") == meta and r.get(key + "kv_bytes") == kv
assert r.delete(key + "kv_bytes", key + "metadata") == 2
assert r.get(key + "kv_bytes") is None
assert r.ping()
PY
  echo "redis-py (LMCache-style): ok"
else
  echo "note: python3-redis not installed; LMCache-style redis-py check skipped"
fi

# redis-benchmark, as the issue asks: -t set,get.
redis-benchmark -p "$resp_port" -t set,get -n 2000 -c 20 -d 4096 -q 2>&1 | tr '\r' '\n' >"$DIR/bench" \
  || fail "redis-benchmark"
grep -E "^(SET|GET): [0-9.]+ requests per second" "$DIR/bench" || fail "redis-benchmark output"
if grep -q "WARNING" "$DIR/bench"; then fail "redis-benchmark warned: $(grep WARNING "$DIR/bench")"; fi

# promtool accepts /metrics.
curl -fsS "http://127.0.0.1:$http_port/metrics" >"$DIR/metrics" || fail "/metrics"
promtool check metrics <"$DIR/metrics" || fail "promtool check metrics"
grep -q 'kvtier_request_duration_seconds_count{protocol="resp",op="put"}' "$DIR/metrics" || fail "no RESP put latency"
echo "promtool: ok"

# SIGTERM shuts down cleanly.
kill -TERM "$PID"
wait "$PID" || fail "kvtierd exit status $?"
PID=""
echo "PASS"
