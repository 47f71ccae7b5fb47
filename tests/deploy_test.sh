#!/usr/bin/env bash
# What an operator installs, checked as they would use it:
#   1. cmake --install into a staging prefix: daemon, CLI, headers, libkvtier-client.so, the
#      CMake package and the pkg-config file, the unit, the configuration, deploy/;
#   2. a C++ program built with find_package(kvtier) and a C program built with pkg-config,
#      both run against the staged kvtierd (started with the shipped configuration, moved to a
#      temporary data directory and free ports);
#   3. the Prometheus rules (promtool check rules, promtool test rules) and the Grafana
#      dashboard: every kvtier metric they name is one kvtierd serves;
#   4. the systemd unit (systemd-analyze verify);
#   5. the Debian package (cpack -G DEB): its files, conffiles and dependencies.
# Usage: deploy_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
# shellcheck source=tests/kvtierd_start.sh
source "$(dirname "$0")/kvtierd_start.sh"
BUILD=$(cd "${1:?usage: deploy_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
SRC=$(cd "${2:?usage: deploy_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
WORK=$(mktemp -d)
PID=""
trap 'stop_kvtierd; rm -rf "$WORK"' EXIT
for tool in promtool systemd-analyze dpkg-deb pkg-config cc curl; do
  command -v "$tool" >/dev/null || { echo "skipped: no $tool"; exit 77; }
done

echo "== 1. cmake --install into a staging prefix"
STAGE=$WORK/stage
cmake --install "$BUILD" --prefix "$STAGE" >/dev/null
for f in bin/kvtierd bin/kvtier include/kvtier/client.h include/kvtier/c.h \
  lib/libkvtier-client.so lib/cmake/kvtier/kvtierConfig.cmake lib/pkgconfig/kvtier-client.pc \
  lib/systemd/system/kvtierd.service lib/sysusers.d/kvtier.conf etc/kvtier/kvtierd.toml \
  share/kvtier/grafana/kvtier-dashboard.json share/kvtier/prometheus/kvtier-alerts.yml; do
  [ -e "$STAGE/$f" ] || fail "not installed: $f"
done
"$STAGE/bin/kvtierd" --config "$STAGE/etc/kvtier/kvtierd.toml" --check-config >/dev/null ||
  fail "the shipped configuration does not check"

echo "== 2. programs built against the installed package, run against the staged kvtierd"
sed -e "s|^data_dir = .*|data_dir = \"$WORK/data\"|" -e 's|127.0.0.1:[0-9]*"|127.0.0.1:0"|' \
  -e 's|^capacity = "8GiB"|capacity = "64MiB"|' -e 's|^capacity = "500GiB"|capacity = "2GiB"|' \
  -e 's|^warm_restart = true|warm_restart = false|' \
  "$STAGE/etc/kvtier/kvtierd.toml" >"$WORK/kvtierd.toml"
start_kvtierd "$STAGE/bin/kvtierd" "$WORK/kvtierd.toml" "$WORK"
cmake -S "$SRC/tests/install_consumer" -B "$WORK/consumer" -DCMAKE_PREFIX_PATH="$STAGE" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null || fail "find_package(kvtier) against the staging prefix"
cmake --build "$WORK/consumer" >/dev/null || fail "building against kvtier::client"
LD_LIBRARY_PATH="$STAGE/lib" "$WORK/consumer/consumer" "unix:$unix_socket" ||
  fail "the C++ program against the staged kvtierd"
export PKG_CONFIG_PATH="$STAGE/lib/pkgconfig"
# shellcheck disable=SC2046
cc -std=c11 -o "$WORK/consumer_c" "$SRC/tests/install_consumer/consumer.c" \
  $(pkg-config --cflags --libs kvtier-client) || fail "building with pkg-config kvtier-client"
LD_LIBRARY_PATH="$STAGE/lib" "$WORK/consumer_c" "unix:$unix_socket" ||
  fail "the C program against the staged kvtierd"

echo "== 3. Prometheus rules and the Grafana dashboard"
(cd "$STAGE/share/kvtier/prometheus" && promtool check rules kvtier-alerts.yml >/dev/null &&
  promtool test rules kvtier-alerts.test.yml >/dev/null) || fail "promtool on the alert rules"
python3 -c "import json, sys; json.load(open(sys.argv[1]))" \
  "$STAGE/share/kvtier/grafana/kvtier-dashboard.json" || fail "the dashboard is not JSON"
curl -fsS "http://127.0.0.1:$http_port/metrics" | awk '$1 == "#" && $2 == "TYPE" {print $3}' |
  sort -u >"$WORK/served"
grep -ohE 'kvtier_[a-z0-9_]+' "$STAGE/share/kvtier/grafana/kvtier-dashboard.json" \
  "$STAGE/share/kvtier/prometheus/kvtier-alerts.yml" | sed -E 's/_(bucket|count|sum)$//' |
  sort -u >"$WORK/named"
missing=$(comm -23 "$WORK/named" "$WORK/served")
[ -z "$missing" ] || fail "metrics named by deploy/ that kvtierd does not serve: $missing"
echo "   $(wc -l <"$WORK/named") metrics named by the dashboard and the alerts, all served"

echo "== 4. the systemd unit"
sed "s|/usr/bin/kvtierd|$STAGE/bin/kvtierd|g; s|/etc/kvtier/|$STAGE/etc/kvtier/|g" \
  "$STAGE/lib/systemd/system/kvtierd.service" >"$WORK/kvtierd.service"
verify=$(systemd-analyze verify "$WORK/kvtierd.service" 2>&1 | grep -v "Documentation" || true)
[ -z "$verify" ] || fail "systemd-analyze verify: $verify"
# Exposure as systemd scores it (0 = locked down, 10 = unprotected): what is left is what a
# network daemon sharing /dev/shm needs.
exposure=$(systemd-analyze security --offline=yes "$WORK/kvtierd.service" 2>/dev/null |
  sed -n 's/.*Overall exposure level for kvtierd.service: \([0-9.]*\).*/\1/p')
awk -v e="$exposure" 'BEGIN { exit !(e != "" && e <= 2.0) }' || fail "exposure level $exposure > 2.0"
echo "   systemd-analyze security: exposure $exposure"

echo "== 5. the Debian package"
(cd "$WORK" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$WORK/deb" >/dev/null) ||
  fail "cpack -G DEB"
deb=$(ls "$WORK"/deb/kvtier_*.deb)
contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/kvtierd ./usr/bin/kvtier ./usr/lib/libkvtier-client.so.0 \
  ./usr/include/kvtier/client.h ./usr/lib/systemd/system/kvtierd.service \
  ./etc/kvtier/kvtierd.toml ./usr/share/doc/kvtier/operations.md; do
  grep -q " $f" <<<"$contents" || fail "the package lacks $f"
done
info=$(dpkg-deb -I "$deb")
grep -q "Depends:.*libssl" <<<"$info" || fail "the package's dependencies: $info"
[ "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)" = "/etc/kvtier/kvtierd.toml" ] ||
  fail "the configuration is not a conffile"
echo "   $(basename "$deb"): $(grep -c . <<<"$contents") entries; $(grep Depends: <<<"$info" | cut -c1-120)"
echo "PASS"
