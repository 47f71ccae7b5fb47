// kvtier_disk_crash_writer DIR FIRST_BLOCK: the process the crash harness kills. Opens a
// DiskTier (compressing) on DIR and puts blocks FIRST_BLOCK, FIRST_BLOCK+1, ... in small
// batches, each in its session (SessionOf), erasing a block or a whole session now and then,
// until killed. On stdout, one line per event, written only after the tier acknowledged it:
//   A <n>   block n is acknowledged (durability kWritten: it must survive kill -9)
//   e <n>   block n's erase is about to start (from now on the block may be gone)
//   E <n>   block n's erase is acknowledged (it must never be served again)
//   s <s>   session s's erase is about to start (its blocks may be gone)
//   S <s>   session s's erase is acknowledged (none of its blocks may be served again)
// An erase that a kill interrupts may or may not have reached the disk: its "e"/"s" line tells
// the driver not to count the blocks as lost.
// Meanwhile a reader thread reads acknowledged blocks back; wrong bytes print "BAD <n>" and
// exit with status 3. Exit status 2: the tier failed to open or to write.

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/disk_crash_common.h"

namespace kvtier::crash {
namespace {

void Say(char what, uint64_t n) {
  char line[32];
  int len = std::snprintf(line, sizeof(line), "%c %llu\n", what,
                          static_cast<unsigned long long>(n));
  // One write(2) per line: a line is either whole in the pipe or absent.
  if (::write(STDOUT_FILENO, line, static_cast<size_t>(len)) != len) std::_Exit(2);
}

int Run(const std::string& dir, uint64_t first) {
  std::unique_ptr<BlockCodec> codec = NewCodec();
  if (codec == nullptr) return 2;
  Result<std::unique_ptr<DiskTier>> opened =
      DiskTier::Open(TierOptions(dir), Tenants(), nullptr, codec.get());
  if (!opened.ok()) {
    std::fprintf(stderr, "open: %s\n", opened.status().ToString().c_str());
    return 2;
  }
  DiskTier& tier = **opened;
  std::atomic<uint64_t> acked_below{first};  // Blocks [first, acked_below) were acknowledged.
  std::thread reader([&] {
    uint64_t x = first;
    std::vector<std::byte> out(256 * 1024);
    while (true) {
      const uint64_t hi = acked_below.load();
      if (hi == first) {
        std::this_thread::yield();
        continue;
      }
      x = Mix(x + 1);
      const uint64_t n = first + x % (hi - first);
      const BlockKey key = KeyOf(n);
      std::span<std::byte> span(out);
      Result<size_t> r = tier.ReadMany(0, {&key, 1}, {&span, 1})[0];
      if (!r.ok()) continue;  // Erased, or never acknowledged.
      const std::vector<std::byte> want = ValueOf(n);
      if (*r != want.size() || std::memcmp(out.data(), want.data(), want.size()) != 0) {
        Say('B', n);
        std::_Exit(3);
      }
    }
  });
  uint64_t next = first;
  uint64_t x = first;
  while (true) {
    x = Mix(x + 7);
    const size_t batch = 1 + x % 8;
    std::vector<std::vector<std::byte>> values;
    std::vector<DiskTier::PutRequest> reqs;
    for (size_t i = 0; i < batch; ++i) values.push_back(ValueOf(next + i));
    for (size_t i = 0; i < batch; ++i) {
      reqs.push_back({KeyOf(next + i), values[i], SessionOf(next + i), 0, KvDtype::kBf16});
    }
    std::vector<Status> st = tier.PutMany(0, reqs);
    for (size_t i = 0; i < batch; ++i) {
      if (!st[i].ok()) {
        std::fprintf(stderr, "put: %s\n", st[i].ToString().c_str());
        std::_Exit(2);
      }
      Say('A', next + i);
    }
    next += batch;
    acked_below.store(next);
    if (x % 5 == 0) {
      const uint64_t victim = first + Mix(x) % (next - first);
      Say('e', victim);
      Status s = tier.Erase(0, KeyOf(victim));
      if (s.ok() || s.code() == StatusCode::kNotFound) Say('E', victim);
    } else if (x % 7 == 0) {
      // A session all of whose blocks this process has put (and had acknowledged).
      const SessionId newest = SessionOf(next - 1);
      const uint64_t back = 1 + Mix(x) % 4;
      const SessionId session = newest > back ? newest - back : 0;
      if (session >= 1 && FirstBlockOf(session) >= first) {
        Say('s', session);
        if (tier.EraseSession(0, session).ok()) Say('S', session);
      }
    }
  }
}

}  // namespace
}  // namespace kvtier::crash

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s DIR FIRST_BLOCK\n", argv[0]);
    return 1;
  }
  return kvtier::crash::Run(argv[1], std::strtoull(argv[2], nullptr, 10));
}
