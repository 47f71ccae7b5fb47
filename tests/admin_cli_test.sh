#!/usr/bin/env bash
# kvtier admin against a real kvtierd (an admin token set, two tenants, values stored with
# redis-cli): status, tenants, pin/unpin, delete by name, session and tenant, shred's
# confirmation, top, and the errors that say what to do. Usage: admin_cli_test.sh KVTIERD KVTIER
set -euo pipefail
# shellcheck source=tests/kvtierd_start.sh
source "$(dirname "$0")/kvtierd_start.sh"
KVTIERD=${1:?usage: admin_cli_test.sh KVTIERD KVTIER}
KVTIER=${2:?usage: admin_cli_test.sh KVTIERD KVTIER}
command -v redis-cli >/dev/null || { echo "skipped: no redis-cli"; exit 77; }
DIR=$(mktemp -d)
PID=""
trap 'stop_kvtierd; rm -rf "$DIR"' EXIT

cat >"$DIR/kvtierd.toml" <<TOML
data_dir = "$DIR"
[server]
native_listen = ""
resp_listen = "127.0.0.1:0"
http_listen = "127.0.0.1:0"
[auth]
admin_token = "admin-secret"
[memory]
capacity = "64MiB"
warm_restart = false
[[tenants]]
name = "default"
[[tenants]]
name = "acme"
token = "acme-token"
TOML
start_kvtierd "$KVTIERD" "$DIR/kvtierd.toml" "$DIR"
export KVTIER_ADMIN_URL="http://127.0.0.1:$http_port"
for k in k1 k2 k3; do redis-cli -p "$resp_port" set "$k" "value of $k" >/dev/null; done

# run EXPECTED_RC ARGS...: runs kvtier admin, output in $out.
run() {
  local want=$1
  shift
  set +e
  out=$("$KVTIER" admin "$@" 2>&1)
  local rc=$?
  set -e
  [ "$rc" -eq "$want" ] || fail "kvtier admin $* exited $rc, not $want: $out"
}

run 0 status
grep -q "kvtierd at $KVTIER_ADMIN_URL: ok" <<<"$out" || fail "status: $out"
grep -qE '^g2 .* 3 ' <<<"$out" || fail "status does not show 3 blocks in G2: $out"
run 2 tenants
grep -q "admin token" <<<"$out" || fail "no token: $out"
export KVTIER_ADMIN_TOKEN=admin-secret
run 0 tenants
grep -qE '^default +3 ' <<<"$out" || fail "tenants: $out"
grep -qE '^acme +0 ' <<<"$out" || fail "tenants: $out"
run 0 tenants --json
python3 -c "import json, sys; t = json.loads(sys.argv[1]); assert t['tenants'][0]['blocks'] == 3" "$out" ||
  fail "tenants --json: $out"

run 0 pin --name k1
grep -q " OK" <<<"$out" || fail "pin: $out"
run 1 unpin --name k1 --name k2
grep -q "FAILED_PRECONDITION" <<<"$out" || fail "unpin of an unpinned block: $out"
run 2 pin --key not-a-key
grep -q "not a block key" <<<"$out" || fail "bad key: $out"

run 0 delete --tenant default --name k1
grep -q "deleted" <<<"$out" || fail "delete: $out"
[ -z "$(redis-cli -p "$resp_port" get k1)" ] || fail "k1 still there after kvtier admin delete"
run 1 delete --tenant default --name k1
grep -q "not stored" <<<"$out" || fail "delete of a missing block: $out"
run 2 delete --tenant default
grep -q "say what to delete" <<<"$out" || fail "delete without a scope: $out"
run 2 delete --tenant default --session 0
grep -q "HTTP 400" <<<"$out" || fail "session 0: $out"
run 2 delete --tenant nobody --all
grep -q "HTTP 404" <<<"$out" || fail "unknown tenant: $out"
run 0 delete --tenant default --all
grep -q "removed 2 copies from G2" <<<"$out" || fail "delete --all: $out"
[ "$(redis-cli -p "$resp_port" dbsize)" = "0" ] || fail "blocks left after delete --all"

run 2 shred --tenant acme
grep -q "Add --yes" <<<"$out" || fail "shred without --yes: $out"
run 2 shred --tenant acme --yes
grep -q "master key" <<<"$out" || fail "shred without a master key: $out"

run 0 top --interval 0.2 --iterations 2
[ "$(grep -c '^kvtier top' <<<"$out")" = 2 ] || fail "top did not show 2 frames: $out"
grep -q "^stats " <<<"$out" || fail "top: $out"

run 2 --url http://127.0.0.1:1 status
grep -q "cannot reach kvtierd" <<<"$out" || fail "unreachable: $out"
stop_kvtierd

# arenas: G2 arena files of kvtierds with warm restarts, here in $DIR/shm rather than /dev/shm.
# write_config NAME: a kvtierd with its data directory $DIR/NAME and its arena $DIR/shm/NAME.
mkdir -p "$DIR/shm"
write_config() {
  mkdir -p "$DIR/$1"
  cat >"$DIR/$1/kvtierd.toml" <<TOML
data_dir = "$DIR/$1"
[server]
native_listen = ""
resp_listen = ""
http_listen = "127.0.0.1:0"
[memory]
capacity = "16MiB"
arena_file = "$DIR/shm/$1"
[store]
max_block_bytes = "1MiB"
TOML
}
write_config gone
start_kvtierd "$KVTIERD" "$DIR/gone/kvtierd.toml" "$DIR/gone"
wait_provisioned "$DIR/gone"  # arenas shows the memory held, which grows until then.
run 0 arenas --dir "$DIR/shm"
grep -qE "^$DIR/shm/gone +in use +$PID +16\.0. MiB +$DIR/gone\$" <<<"$out" || fail "arenas, in use: $out"
run 0 arenas --dir "$DIR/shm" --remove --all-stopped
[ -f "$DIR/shm/gone.lock" ] || fail "--remove took an arena in use: $out"
stop_kvtierd
run 0 arenas --dir "$DIR/shm" --json
python3 -c "import json, sys; a = json.loads(sys.argv[1]); assert [x['state'] for x in a] == ['stopped'], a" \
  "$out" || fail "arenas --json after a stop: $out"
run 0 arenas --dir "$DIR/shm" --remove
[ -f "$DIR/shm/gone.lock" ] || fail "--remove took a stopped arena whose data_dir is there: $out"
mv "$DIR/gone" "$DIR/moved"  # The operator moves the data directory: nothing adopts the arena.
write_config next
start_kvtierd "$KVTIERD" "$DIR/next/kvtierd.toml" "$DIR/next"
grep -q "whose data directory is gone keep 16 MiB of memory: $DIR/shm/gone ($DIR/gone)" "$DIR/next/log" ||
  fail "kvtierd's start does not name the orphaned arena: $(cat "$DIR/next/log")"
run 0 arenas --dir "$DIR/shm" --remove
grep -qE "^$DIR/shm/gone +orphaned .*\(removed\)$" <<<"$out" || fail "arenas --remove: $out"
grep -qE "^$DIR/shm/next +in use" <<<"$out" || fail "arenas --remove: $out"
[ -z "$(find "$DIR/shm" -name 'gone*')" ] || fail "files of the orphaned arena are left: $(ls "$DIR/shm")"
[ -f "$DIR/shm/next.lock" ] || fail "--remove touched the arena in use"
run 2 arenas --dir "$DIR/nowhere"
grep -q "does not exist" <<<"$out" || fail "arenas in a missing directory: $out"
echo "PASS"
