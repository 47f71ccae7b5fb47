# Sourced by scripts/run and scripts/test: installs the Debian packages kvtier needs, once.
# Everything comes from Debian's archive; nothing is downloaded at build time.

KVTIER_PACKAGES=(
  # toolchain
  cmake ninja-build g++ clang lld libclang-rt-14-dev pkg-config python3
  # libraries
  libssl-dev libabsl-dev libcli11-dev nlohmann-json3-dev libtomlplusplus-dev
  libzstd-dev liburing-dev libxxhash-dev libgtest-dev libgmock-dev
  # peers and checkers that tests and benchmarks start themselves
  redis-server redis-tools python3-redis prometheus fio iperf3 curl chromium
)

kvtier_install_deps() {
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

# kvtier_build DIR [cmake args...]: configures (once) and builds DIR with Ninja.
kvtier_build() {
  local dir=$1
  shift
  cmake -S "$KVTIER_ROOT" -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir"
}
