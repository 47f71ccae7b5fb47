// Hundreds of concurrent clients on loopback: no acknowledged put is lost, no wrong byte is
// returned. Bounded in count (clients x blocks), not in time.

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/client.h"
#include "tests/daemon/daemon_harness.h"

namespace kvtier::daemon_test {
namespace {

constexpr uint32_t kClients = 256;
constexpr uint32_t kBlocksPerClient = 12;

BlockKey KeyOf(uint32_t client, uint32_t block) {
  std::array<uint8_t, kBlockKeySize> bytes{};
  std::memcpy(bytes.data(), &client, 4);
  std::memcpy(bytes.data() + 4, &block, 4);
  bytes[31] = 0xA5;
  return BlockKey(bytes);
}

// Size 1 KiB .. 64 KiB and content both depend on (client, block), so any mix-up shows.
std::vector<std::byte> ValueOf(uint32_t client, uint32_t block) {
  const uint64_t x = (uint64_t{client} << 32 | block) * 0x9E3779B97F4A7C15ull + 7;
  return XorshiftBytes(x, 1024 + (x >> 40) % (63 * 1024));
}

bool Matches(const Result<std::span<const std::byte>>& got, const std::vector<std::byte>& want) {
  return got.ok() && got->size() == want.size() && std::memcmp(got->data(), want.data(), want.size()) == 0;
}

TEST(DaemonLoadTest, HundredsOfConcurrentClientsLoseNothing) {
  Daemon d("max_connections = 1024\n");
  ASSERT_TRUE(d.running());
  std::vector<std::vector<bool>> acked(kClients, std::vector<bool>(kBlocksPerClient, false));
  std::atomic<uint64_t> wrong_bytes{0};
  std::atomic<uint64_t> connect_failures{0};
  std::atomic<uint64_t> acked_count{0};
  std::vector<std::thread> threads;
  for (uint32_t c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      ClientOptions o;
      // Half the clients over TCP, half over the Unix socket.
      o.endpoint = c % 2 == 0 ? d.tcp_endpoint() : d.unix_endpoint();
      Result<std::unique_ptr<Client>> client = Client::Connect(o);
      if (!client.ok()) {
        connect_failures.fetch_add(1);
        return;
      }
      std::vector<std::vector<std::byte>> values;
      std::vector<BlockWrite> writes;
      for (uint32_t b = 0; b < kBlocksPerClient; ++b) values.push_back(ValueOf(c, b));
      for (uint32_t b = 0; b < kBlocksPerClient; ++b) writes.push_back({KeyOf(c, b), values[b], std::nullopt, 0, std::nullopt});
      // Half singly, half as one pipelined batch.
      for (uint32_t b = 0; b < kBlocksPerClient / 2; ++b) {
        acked[c][b] = (*client)->Put(writes[b].key, writes[b].value).ok();
      }
      std::vector<Status> rest = (*client)->PutMany(std::span(writes).subspan(kBlocksPerClient / 2));
      for (uint32_t i = 0; i < rest.size(); ++i) acked[c][kBlocksPerClient / 2 + i] = rest[i].ok();
      std::vector<BlockKey> keys;
      for (const BlockWrite& w : writes) keys.push_back(w.key);
      BlockValues got = (*client)->GetMany(keys);
      for (uint32_t b = 0; b < kBlocksPerClient; ++b) {
        if (acked[c][b]) {
          acked_count.fetch_add(1);
          if (!Matches(got.values[b], values[b])) wrong_bytes.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(connect_failures.load(), 0u);
  EXPECT_EQ(wrong_bytes.load(), 0u);
  // The store has room for everything, so every put must have been acknowledged.
  EXPECT_EQ(acked_count.load(), uint64_t{kClients} * kBlocksPerClient);

  // Afterwards, one client reads back every acknowledged block.
  ClientOptions o;
  o.endpoint = d.tcp_endpoint();
  auto checker = std::move(Client::Connect(o)).value();
  for (uint32_t c = 0; c < kClients; ++c) {
    std::vector<BlockKey> keys;
    for (uint32_t b = 0; b < kBlocksPerClient; ++b) keys.push_back(KeyOf(c, b));
    BlockValues got = checker->GetMany(keys);
    for (uint32_t b = 0; b < kBlocksPerClient; ++b) {
      if (acked[c][b]) {
        EXPECT_TRUE(Matches(got.values[b], ValueOf(c, b))) << c << "/" << b;
      }
    }
  }
}

}  // namespace
}  // namespace kvtier::daemon_test
