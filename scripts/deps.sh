#!/usr/bin/env bash
# Sourced by scripts/run and scripts/test: installs the Debian packages kvtier needs, once.
# Run by itself, `scripts/deps.sh --peers` installs the peers' environment (build/venv-peers,
# kvtier_install_peer_deps below) and nothing else; neither script ever does.
# The C++ core builds from Debian's archive only; nothing is downloaded at build time. The
# Python package's tests and the engine packages they run against come from PyPI, pinned, into
# a virtual environment (kvtier_install_python_deps).
#
# Downloads and one-time builds (pip's cache, the virtual environment, MinIO, s3rver, ccache's
# objects) live in $KVTIER_CACHE, outside the clone, so that a new checkout on the same machine
# reuses them; build/venv, build/go and build/npm are links into it. A fresh machine fills it.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  KVTIER_ROOT=$(cd "$(dirname "$0")/.." && pwd)
  case "${1:-}" in
  --peers) ;;
  *)
    echo "usage: scripts/deps.sh --peers   (scripts/run and scripts/test source it)" >&2
    exit 2
    ;;
  esac
fi
if [ -z "${KVTIER_CACHE:-}" ]; then
  if [ -n "${XDG_CACHE_HOME:-}" ]; then
    KVTIER_CACHE=$XDG_CACHE_HOME/kvtier
  elif [ -n "${HOME:-}" ]; then
    KVTIER_CACHE=$HOME/.cache/kvtier
  fi
fi
mkdir -p "$KVTIER_ROOT/build"
if [ -z "${KVTIER_CACHE:-}" ] || ! mkdir -p "$KVTIER_CACHE" 2>/dev/null ||
  [ ! -w "$KVTIER_CACHE" ]; then
  # No home, or none writable: the clone's build/ keeps them, as it did before.
  KVTIER_CACHE="$KVTIER_ROOT/build/cache"
  mkdir -p "$KVTIER_CACHE"
fi

# kvtier_link NAME TARGET: build/NAME is a link to TARGET (a directory of $KVTIER_CACHE). A real
# directory there (left by an older checkout) is moved into the cache when TARGET is absent.
kvtier_link() {
  local link="$KVTIER_ROOT/build/$1" target=$2
  if [ -d "$link" ] && [ ! -L "$link" ]; then
    if [ ! -e "$target" ]; then mv "$link" "$target"; else rm -rf "$link"; fi
  fi
  mkdir -p "$target"
  ln -sfn "$target" "$link"
}

# Every C and C++ compilation goes through ccache (its objects in $KVTIER_CACHE/ccache), keyed
# on paths relative to the clone so that another checkout hits the same objects.
export CCACHE_DIR="$KVTIER_CACHE/ccache" CCACHE_BASEDIR="$KVTIER_ROOT" CCACHE_NOHASHDIR=true
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
# CMake takes these as the default launchers of a new build directory (pip's build too).
export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache

KVTIER_PACKAGES=(
  # toolchain
  cmake ninja-build ccache g++ clang lld libclang-rt-14-dev pkg-config python3 python3-dev
  python3-venv
  # libraries
  libssl-dev libabsl-dev libcli11-dev nlohmann-json3-dev libtomlplusplus-dev
  libzstd-dev liburing-dev libxxhash-dev libgtest-dev libgmock-dev pybind11-dev
  # KV events (src/server/kv_events.h): ZMQ and msgpack
  libzmq3-dev libmsgpack-cxx-dev
  # HTTP/1.1 request framing of the S3 endpoint (src/server/http_request.h)
  libhttp-parser-dev
  # peers and checkers that tests and benchmarks start themselves
  redis-server redis-tools python3-redis prometheus fio iperf3 curl chromium
  # network faults between namespaces (python/tests/test_network_faults.py)
  iproute2 nftables
  # G4 S3 tier (src/tier/s3): HTTP client and ListObjectsV2 XML
  libcurl4-openssl-dev libtinyxml2-dev
)

# The S3 tier's test peer, s3rver (npm), installed into $KVTIER_CACHE/npm (build/npm); quick
# when it is already there. Node and npm come from Debian when absent. The S3 tests skip
# without it.
KVTIER_S3RVER_VERSION=3.7.1
kvtier_install_s3rver() {
  kvtier_link npm "$KVTIER_CACHE/npm"
  local prefix="$KVTIER_ROOT/build/npm"
  [ -x "$prefix/node_modules/.bin/s3rver" ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  if ! command -v npm >/dev/null 2>&1; then
    echo "kvtier: installing Debian packages: nodejs npm"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm
  fi
  echo "kvtier: installing s3rver@$KVTIER_S3RVER_VERSION into $prefix"
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
    "s3rver@$KVTIER_S3RVER_VERSION" >/dev/null
}

# The second S3 test peer, MinIO, built from its Go module (the module proxy serves it; there
# are no release binaries to fetch here) into $KVTIER_CACHE/go/bin (build/go/bin), with its
# module and build caches beside it; quick when the binary is there. Go comes from Debian when
# absent. The MinIO cases of the S3 tests skip without it.
KVTIER_MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
kvtier_install_minio() {
  kvtier_link go "$KVTIER_CACHE/go"
  local prefix="$KVTIER_ROOT/build/go"
  local stamp="$prefix/bin/.minio-$KVTIER_MINIO_VERSION"
  [ -x "$prefix/bin/minio" ] && [ -f "$stamp" ] && return 0
  local go=go
  if ! command -v go >/dev/null 2>&1; then
    if [ -x /usr/local/go/bin/go ]; then
      go=/usr/local/go/bin/go
    else
      local sudo=""
      [ "$(id -u)" -ne 0 ] && sudo="sudo"
      echo "kvtier: installing Debian packages: golang-go"
      $sudo apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends golang-go
    fi
  fi
  echo "kvtier: building MinIO $KVTIER_MINIO_VERSION from its Go module into $prefix/bin"
  mkdir -p "$prefix/bin"
  # -modcacherw: the module cache stays deletable with the rest of build/.
  GOBIN="$prefix/bin" GOMODCACHE="$prefix/mod" GOCACHE="$prefix/cache" GOFLAGS=-modcacherw \
    "$go" install "github.com/minio/minio@$KVTIER_MINIO_VERSION" && touch "$stamp"
}

# The Rust AWS SDK's test client (tests/rust_s3_client, every crate pinned by its Cargo.lock,
# fetched from crates.io into cargo's own cache), built into $KVTIER_CACHE/cargo-target
# (build/cargo-target); quick when it is up to date. python/tests/test_s3_rust.py skips
# without it.
kvtier_build_rust_s3_client() {
  kvtier_link cargo-target "$KVTIER_CACHE/cargo-target"
  local cargo
  cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
  [ -x "$cargo" ] || { echo "kvtier: no cargo"; return 1; }
  CARGO_TARGET_DIR="$KVTIER_ROOT/build/cargo-target" "$cargo" build -q --release --locked \
    --manifest-path "$KVTIER_ROOT/tests/rust_s3_client/Cargo.toml"
}

kvtier_install_deps() {
  kvtier_install_s3rver || echo "kvtier: s3rver could not be installed; the S3 tests will skip"
  local missing=()
  for p in "${KVTIER_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "kvtier: installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# kvtier_venv PREFIX LINK REQUIREMENTS [NO_DEPS_REQUIREMENTS]: a virtual environment at
# $KVTIER_CACHE/PREFIX-<hash of python's version and the requirement files>, made once and
# reused while those are unchanged (environments of other hashes are removed), linked as LINK.
# NO_DEPS_REQUIREMENTS, if given, are installed after REQUIREMENTS with --no-deps. pip keeps
# its downloads in $KVTIER_CACHE/pip, so a rebuilt environment does not fetch them again.
kvtier_venv() {
  local prefix=$1 link=$2 req=$3 nodeps=${4:-}
  local want
  want=$( (python3 --version; cat "$req" ${nodeps:+"$nodeps"}) | sha256sum | cut -c1-16)
  local venv="$KVTIER_CACHE/$prefix-$want" stamp="$KVTIER_CACHE/$prefix-$want/.kvtier-requirements"
  if [ ! -f "$stamp" ]; then
    echo "kvtier: installing $venv (${req#"$KVTIER_ROOT"/}${nodeps:+, ${nodeps#"$KVTIER_ROOT"/}})"
    rm -rf "$venv"
    python3 -m venv "$venv"
    export PIP_CACHE_DIR="$KVTIER_CACHE/pip"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    if [ -n "$nodeps" ]; then
      "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$nodeps"
    fi
    echo "$want" >"$stamp"
  fi
  find "$KVTIER_CACHE" -maxdepth 1 -name "$prefix-*" ! -name "$prefix-$want" -exec rm -rf {} +
  # An environment is not relocatable: one left in build/ by an older checkout goes.
  [ -L "$link" ] || rm -rf "$link"
  ln -sfn "$venv" "$link"
}

# The Python test environment: build/venv, from python/requirements-test.txt and the engines
# of python/requirements-engines.txt without their GPU dependency sets (see that file); every
# package pinned, torch and lmcache included.
KVTIER_VENV="$KVTIER_ROOT/build/venv"
kvtier_install_python_deps() {
  kvtier_venv venv "$KVTIER_VENV" "$KVTIER_ROOT/python/requirements-test.txt" \
    "$KVTIER_ROOT/python/requirements-engines.txt"
}

# The peers' environment, for bench/peer_bench.py only: build/venv-peers, from
# python/requirements-peers.txt (Mooncake Store, every package pinned). It is apart from
# build/venv so that no test imports a peer, and only `scripts/deps.sh --peers` installs it:
# CI never does.
KVTIER_PEERS_VENV="$KVTIER_ROOT/build/venv-peers"
kvtier_install_peer_deps() {
  kvtier_venv peers-venv "$KVTIER_PEERS_VENV" "$KVTIER_ROOT/python/requirements-peers.txt"
}

# kvtier_build DIR [cmake args...]: configures (once) and builds DIR with Ninja; every target,
# or only those named in KVTIER_BUILD_TARGETS (a space-separated list).
kvtier_build() {
  local dir=$1
  shift
  cmake -S "$KVTIER_ROOT" -B "$dir" -G Ninja -DCMAKE_C_COMPILER_LAUNCHER=ccache \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache "$@" >/dev/null
  # shellcheck disable=SC2086  # the list is split on purpose
  cmake --build "$dir" ${KVTIER_BUILD_TARGETS:+--target $KVTIER_BUILD_TARGETS}
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  kvtier_install_peer_deps
  echo "kvtier: build/venv-peers is ready (bench/peer_bench.py)"
fi
