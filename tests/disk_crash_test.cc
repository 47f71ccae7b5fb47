// kvtier_disk_crash_test: the DiskTier crash harness (RocksDB db_crashtest.py style).
//
// Each iteration starts kvtier_disk_crash_writer on a directory, lets it put blocks for a
// random time, kill -9s it, reopens the directory in this process and checks that
//   - every block the writer reported as acknowledged is present and byte-exact, unless an
//     erase of it (or of its session) was started;
//   - no block whose erase (or its session's erase) was acknowledged is served;
//   - every other block the writer may have been writing is either absent or byte-exact.
// The directory carries over between iterations (recovery of recovered segments is tested
// too) until it holds about 750 MiB, then starts afresh.
//
// Usage: kvtier_disk_crash_test --writer PATH --dir DIR [--seconds S] [--iterations N]
// The environment variable KVTIER_CRASH_SECONDS, when set, overrides --seconds (long runs).
// Exit status 0 when every check held.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/disk_crash_common.h"

namespace kvtier::crash {
namespace {

struct Args {
  std::string writer;
  std::string dir;
  double seconds = 5;
  uint64_t iterations = 1000000;
};

struct Ledger {
  std::set<uint64_t> acked;
  std::set<uint64_t> erased;
  std::set<uint64_t> maybe_erased;  // An erase started (it may have been cut short by the kill).
  uint64_t next_block = 0;  // Blocks below were possibly written.
};

// Runs the writer for about `run_ms`, then kill -9. Appends what it acknowledged.
bool RunWriter(const Args& args, uint64_t first, int run_ms, Ledger* ledger) {
  int fds[2];
  if (::pipe(fds) != 0) return false;
  pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    const std::string first_arg = std::to_string(first);
    ::execl(args.writer.c_str(), args.writer.c_str(), args.dir.c_str(), first_arg.c_str(),
            static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  ::close(fds[1]);
  std::string buffered;
  bool killed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(run_ms);
  while (true) {
    int timeout = -1;
    if (!killed) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        ::kill(pid, SIGKILL);
        killed = true;
      } else {
        timeout = static_cast<int>(left.count());
      }
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, killed ? -1 : timeout) == 0) continue;
    char buf[65536];
    ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;  // The writer is gone and the pipe drained.
    buffered.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  // Whole lines only: a line is written with one write(2), so a partial one cannot occur, but
  // be strict anyway.
  size_t pos = 0;
  bool bad = false;
  while (true) {
    size_t nl = buffered.find('\n', pos);
    if (nl == std::string::npos) break;
    const std::string line = buffered.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.size() < 3) continue;
    const uint64_t n = std::strtoull(line.c_str() + 2, nullptr, 10);
    if (line[0] == 'A') ledger->acked.insert(n);
    if (line[0] == 'e') ledger->maybe_erased.insert(n);
    if (line[0] == 'E') ledger->erased.insert(n);
    if ((line[0] == 's' || line[0] == 'S') && n >= 1) {
      std::set<uint64_t>& into = line[0] == 'S' ? ledger->erased : ledger->maybe_erased;
      for (uint64_t b = FirstBlockOf(n); b < FirstBlockOf(n + 1); ++b) into.insert(b);
    }
    if (line[0] == 'B') {
      std::fprintf(stderr, "writer's reader saw wrong bytes for block %llu\n",
                   static_cast<unsigned long long>(n));
      bad = true;
    }
  }
  if (WIFEXITED(status)) {
    std::fprintf(stderr, "writer exited by itself with status %d\n", WEXITSTATUS(status));
    return false;
  }
  return !bad;
}

// Checks the directory against the ledger. Every block's presence is checked; bytes are read
// back for the blocks of the last run (`first` on) and a random sample of the older ones.
// Returns the number of violations.
uint64_t Verify(const Args& args, const Ledger& ledger, uint64_t first, std::mt19937_64& rng,
                uint64_t* present) {
  std::unique_ptr<BlockCodec> codec = NewCodec();
  if (codec == nullptr) return 1;
  Result<std::unique_ptr<DiskTier>> opened =
      DiskTier::Open(TierOptions(args.dir), Tenants(), nullptr, codec.get());
  if (!opened.ok()) {
    std::fprintf(stderr, "reopen failed: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  DiskTier& tier = **opened;
  uint64_t violations = 0;
  std::vector<std::byte> out(256 * 1024);
  for (uint64_t n = 0; n < ledger.next_block; ++n) {
    const BlockKey key = KeyOf(n);
    const bool read_back = n >= first || rng() % 64 == 0;
    std::span<std::byte> span(out);
    Result<size_t> r = read_back ? tier.ReadMany(0, {&key, 1}, {&span, 1})[0]
                                 : tier.BlockSize(0, key);
    const bool acked = ledger.acked.contains(n);
    const bool erased = ledger.erased.contains(n);
    if (!r.ok()) {
      if (acked && !erased && !ledger.maybe_erased.contains(n)) {
        std::fprintf(stderr, "LOST acknowledged block %llu: %s\n",
                     static_cast<unsigned long long>(n), r.status().ToString().c_str());
        ++violations;
      }
      continue;
    }
    ++*present;
    const std::vector<std::byte> want = ValueOf(n);
    if (*r != want.size() ||
        (read_back && std::memcmp(out.data(), want.data(), want.size()) != 0)) {
      std::fprintf(stderr, "WRONG bytes served for block %llu\n",
                   static_cast<unsigned long long>(n));
      ++violations;
    } else if (erased) {
      std::fprintf(stderr, "ERASED block %llu served\n", static_cast<unsigned long long>(n));
      ++violations;
    }
  }
  return violations;
}

int Main(const Args& args) {
  std::mt19937_64 rng(std::random_device{}());
  std::filesystem::remove_all(args.dir);
  Ledger ledger;
  const auto start = std::chrono::steady_clock::now();
  uint64_t iteration = 0;
  uint64_t total_acked = 0;
  while (iteration < args.iterations &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
             args.seconds) {
    if (ledger.next_block > 8000) {  // About 750 MiB written (96 KiB per block on average).
      std::filesystem::remove_all(args.dir);
      ledger = Ledger{};
    }
    const int run_ms = static_cast<int>(5 + rng() % 300);
    const uint64_t first = ledger.next_block;
    const size_t before = ledger.acked.size();
    if (!RunWriter(args, first, run_ms, &ledger)) return 1;
    // The writer may have had a batch in flight past its last acknowledgement.
    uint64_t last = first;
    for (auto it = ledger.acked.lower_bound(first); it != ledger.acked.end(); ++it) last = *it + 1;
    ledger.next_block = last + 8;
    uint64_t present = 0;
    const uint64_t violations = Verify(args, ledger, first, rng, &present);
    total_acked += ledger.acked.size() - before;
    std::printf("iteration %llu: killed after %d ms, %zu acknowledged (%zu erased), %llu present, "
                "%llu violations\n",
                static_cast<unsigned long long>(iteration), run_ms, ledger.acked.size() - before,
                ledger.erased.size(), static_cast<unsigned long long>(present),
                static_cast<unsigned long long>(violations));
    std::fflush(stdout);
    if (violations != 0) return 1;
    ++iteration;
  }
  std::printf("PASS: %llu iterations, %llu blocks acknowledged, none lost or wrong\n",
              static_cast<unsigned long long>(iteration),
              static_cast<unsigned long long>(total_acked));
  std::filesystem::remove_all(args.dir);
  return iteration > 0 ? 0 : 1;
}

}  // namespace
}  // namespace kvtier::crash

int main(int argc, char** argv) {
  kvtier::crash::Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--writer") args.writer = argv[i + 1];
    else if (flag == "--dir") args.dir = argv[i + 1];
    else if (flag == "--seconds") args.seconds = std::atof(argv[i + 1]);
    else if (flag == "--iterations") args.iterations = std::strtoull(argv[i + 1], nullptr, 10);
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 1;
    }
  }
  if (const char* s = std::getenv("KVTIER_CRASH_SECONDS")) args.seconds = std::atof(s);
  if (args.writer.empty() || args.dir.empty()) {
    std::fprintf(stderr, "usage: %s --writer PATH --dir DIR [--seconds S] [--iterations N]\n",
                 argv[0]);
    return 1;
  }
  return kvtier::crash::Main(args);
}
