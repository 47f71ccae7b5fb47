#!/usr/bin/env bash
# kvtier admin fsck against the G3 and G4 directories of a real kvtierd: it refuses a G3 in
# use, counts a clean one, finds a flipped byte and repairs it, and kvtierd then serves every
# value with its bytes; on G4 it finds a corrupt object and a stale temp file and removes them.
# Usage: fsck_test.sh KVTIERD KVTIER
set -euo pipefail
# shellcheck source=tests/kvtierd_start.sh
source "$(dirname "$0")/kvtierd_start.sh"
KVTIERD=${1:?usage: fsck_test.sh KVTIERD KVTIER}
KVTIER=${2:?usage: fsck_test.sh KVTIERD KVTIER}
command -v redis-cli >/dev/null || { echo "skipped: no redis-cli"; exit 77; }
DIR=$(mktemp -d)
PID=""
trap 'stop_kvtierd; rm -rf "$DIR"' EXIT

mkdir "$DIR/g4"
cat >"$DIR/kvtierd.toml" <<TOML
data_dir = "$DIR"
[server]
native_listen = ""
resp_listen = "127.0.0.1:0"
http_listen = "127.0.0.1:0"
[memory]
capacity = "64MiB"
warm_restart = false
[disk]
dir = "disk"
capacity = "64MiB"
segment_bytes = "8MiB"
compress = false
[shared]
location = "$DIR/g4"
write_policy = "on_put"
compress = false
TOML
start_kvtierd "$KVTIERD" "$DIR/kvtierd.toml" "$DIR"
N=20
for i in $(seq $N); do
  head -c 6000 /dev/urandom | base64 -w0 >"$DIR/value$i"
  redis-cli -p "$resp_port" -x set "k$i" <"$DIR/value$i" >/dev/null
done
[ "$(redis-cli -p "$resp_port" save)" = "OK" ] || fail "SAVE did not write G3"

# fsck EXPECTED_RC ARGS...: runs kvtier admin fsck, output in $out.
fsck() {
  local want=$1
  shift
  set +e
  out=$("$KVTIER" admin fsck "$@" 2>&1)
  local rc=$?
  set -e
  [ "$rc" -eq "$want" ] || fail "kvtier admin fsck $* exited $rc, not $want: $out"
}
json_field() { python3 -c "import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$out" "$1"; }
# Inverts the byte at offset $2 of file $1 (writing a fixed byte would change nothing when the
# byte already had that value).
flip_byte() {
  python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1)[0]; f.seek(int(sys.argv[2])); f.write(bytes([b ^ 0xff]))' "$1" "$2"
}

fsck 8 --g3 "$DIR/disk"
grep -q "stop the kvtierd" <<<"$out" || fail "G3 in use: $out"
fsck 0 --g4 "$DIR/g4" --json  # G4 is shared: checked while nodes run.
[ "$(json_field objects)" = "$N" ] || fail "G4 objects: $out"
stop_kvtierd

fsck 0 --g3 "$DIR/disk" --json
[ "$(json_field live_blocks)" = "$N" ] || fail "G3 live blocks: $out"
[ "$(json_field clean)" = "True" ] || fail "G3 not clean: $out"

# A flipped byte in the first record's payload (records start after the 4 KiB segment header).
seg=$(ls "$DIR"/disk/*.seg | head -1)
flip_byte "$seg" $((4096 + 3000))
fsck 4 --g3 "$DIR/disk"
grep -q "payload checksum mismatch" <<<"$out" || fail "corruption not found: $out"
grep -q "run again with --repair" <<<"$out" || fail "no advice: $out"
fsck 1 --g3 "$DIR/disk" --repair
grep -q "1 rewritten, 1 damaged records left behind" <<<"$out" || fail "repair: $out"
fsck 0 --g3 "$DIR/disk" --json
[ "$(json_field live_blocks)" = "$((N - 1))" ] || fail "after repair: $out"

# G4: a stale temp file and an object with a flipped byte.
mkdir -p "$DIR/g4/kvtier-g4/v1/tmp"
echo partial >"$DIR/g4/kvtier-g4/v1/tmp/node-x.1.1.tmp"
touch -d '2 hours ago' "$DIR/g4/kvtier-g4/v1/tmp/node-x.1.1.tmp"
obj=$(find "$DIR/g4/kvtier-g4/v1/objects" -type f | head -1)
flip_byte "$obj" 1000
fsck 4 --g4 "file:$DIR/g4"
grep -q "payload checksum mismatch" <<<"$out" || fail "G4 corruption not found: $out"
grep -q "temp file of an upload that never finished" <<<"$out" || fail "G4 temp file: $out"
fsck 1 --g4 "$DIR/g4" --repair
grep -q "1 objects, 0 session markers and 1 temp files removed" <<<"$out" || fail "G4 repair: $out"
fsck 0 --g4 "$DIR/g4"
fsck 8 --g4 "s3://bucket"
grep -q "file system" <<<"$out" || fail "s3: $out"

# kvtierd serves every value with its bytes: the one G3 lost comes from G4, the one G4 lost
# from G3, unless both were the same block, which is then a miss, never wrong bytes.
start_kvtierd "$KVTIERD" "$DIR/kvtierd.toml" "$DIR"
missing=0
for i in $(seq $N); do
  got=$(redis-cli -p "$resp_port" get "k$i")
  if [ -z "$got" ]; then missing=$((missing + 1)); continue; fi
  [ "$got" = "$(cat "$DIR/value$i")" ] || fail "k$i served other bytes after repair"
done
[ "$missing" -le 1 ] || fail "$missing values lost, at most 1 may be"
echo "PASS ($missing of $N missed)"
