// kvtier_daemon_bench: native-protocol PUT and GET throughput and latency against a running
// kvtierd, through the C++ client. Used by bench/daemon_bench.sh; prints one CSV line per phase:
//   op,clients,value_bytes,ops,seconds,gib_per_s,p50_ms,p99_ms

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "kvtier/client.h"

namespace {

using Clock = std::chrono::steady_clock;

kvtier::BlockKey KeyOf(uint32_t client, uint32_t i) {
  std::array<uint8_t, kvtier::kBlockKeySize> b{};
  std::memcpy(b.data(), &client, 4);
  std::memcpy(b.data() + 4, &i, 4);
  b[31] = 0xBE;
  return kvtier::BlockKey(b);
}

struct Phase {
  std::vector<double> latencies_ms;
  double seconds = 0;
  uint64_t failures = 0;
};

// Runs `op(client, thread, i)` `per_client` times on each client thread.
template <typename Op>
Phase Run(std::vector<std::unique_ptr<kvtier::Client>>& clients, uint32_t per_client, Op op) {
  std::vector<std::vector<double>> lat(clients.size());
  std::atomic<uint64_t> failures{0};
  std::vector<std::thread> threads;
  Clock::time_point start = Clock::now();
  for (uint32_t t = 0; t < clients.size(); ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t i = 0; i < per_client; ++i) {
        Clock::time_point s = Clock::now();
        if (!op(*clients[t], t, i)) failures.fetch_add(1);
        lat[t].push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
      }
    });
  }
  for (auto& th : threads) th.join();
  Phase p;
  p.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& l : lat) p.latencies_ms.insert(p.latencies_ms.end(), l.begin(), l.end());
  std::sort(p.latencies_ms.begin(), p.latencies_ms.end());
  p.failures = failures.load();
  return p;
}

void Print(const char* op, size_t clients, size_t value_bytes, const Phase& p) {
  size_t n = p.latencies_ms.size();
  double gib = static_cast<double>(n) * static_cast<double>(value_bytes) / (1u << 30) / p.seconds;
  std::printf("%s,%zu,%zu,%zu,%.3f,%.3f,%.3f,%.3f\n", op, clients, value_bytes, n, p.seconds, gib,
              p.latencies_ms[n / 2], p.latencies_ms[std::min(n - 1, n * 99 / 100)]);
  if (p.failures > 0) std::fprintf(stderr, "%s: %llu failures\n", op, static_cast<unsigned long long>(p.failures));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Native-protocol throughput and latency against a running kvtierd", "kvtier_daemon_bench");
  std::string endpoint = "127.0.0.1:7380";
  uint32_t clients = 4;
  uint32_t ops = 200;
  std::string value_size = "2097152";
  std::string tls_ca;
  app.add_option("--endpoint", endpoint, "host:port or unix:/path");
  app.add_option("--tls-ca", tls_ca, "Speak TLS 1.3, trusting this PEM CA file");
  app.add_option("--clients", clients, "Concurrent clients, one connection and thread each");
  app.add_option("--ops", ops, "Operations per client per phase");
  app.add_option("--value-bytes", value_size, "Bytes per value");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  size_t value_bytes = std::stoull(value_size);
  std::vector<std::unique_ptr<kvtier::Client>> conns;
  for (uint32_t i = 0; i < clients; ++i) {
    kvtier::ClientOptions o;
    o.endpoint = endpoint;
    o.tls.enabled = !tls_ca.empty();
    o.tls.ca_file = tls_ca;
    kvtier::Result<std::unique_ptr<kvtier::Client>> c = kvtier::Client::Connect(o);
    if (!c.ok()) {
      std::fprintf(stderr, "connect: %s\n", c.status().ToString().c_str());
      return 1;
    }
    conns.push_back(std::move(c).value());
  }
  std::vector<std::byte> value(value_bytes);
  for (size_t i = 0; i < value_bytes; ++i) value[i] = static_cast<std::byte>(i * 131 + 7);

  // Distinct keys, so every PUT stores; the working set must fit the server's DRAM tier.
  Phase put = Run(conns, ops, [&](kvtier::Client& c, uint32_t t, uint32_t i) {
    return c.Put(KeyOf(t, i), value).ok();
  });
  Phase get = Run(conns, ops, [&](kvtier::Client& c, uint32_t t, uint32_t i) {
    kvtier::BlockKey k = KeyOf(t, i);
    kvtier::BlockValues v = c.GetMany(std::span(&k, 1));
    return v.values[0].ok() && v.values[0]->size() == value_bytes;
  });
  std::printf("op,clients,value_bytes,ops,seconds,gib_per_s,p50_ms,p99_ms\n");
  Print("PUT", clients, value_bytes, put);
  Print("GET", clients, value_bytes, get);
  return put.failures + get.failures == 0 ? 0 : 1;
}
